"""CLI: `python -m sandbox judge|serve|build-image` (see --help)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import RemoteJudge, get_backend, judge


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sandbox", description="Judge code in a sandbox.")
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("judge", help="judge one solution; prints one JSON object")
    j.add_argument("--problem", required=True, help="problem JSON file")
    j.add_argument("--solution", required=True, help="source file")
    j.add_argument("--language", required=True, choices=["python", "cpp"])
    j.add_argument("--backend", default="auto", choices=["auto", "docker", "bwrap", "remote"])
    j.add_argument("--url", action="append", help="server URL for --backend remote (repeat for several)")
    j.add_argument("--protocol", default="xrpo", choices=["xrpo", "sandboxfusion"], help="remote server kind")
    j.add_argument("--all-tests", action="store_true", help="run every test instead of stopping at the first failure")
    s = sub.add_parser("serve", help="serve /judge and SandboxFusion-compatible /run_code")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--backend", default="auto", choices=["auto", "docker", "bwrap"])
    s.add_argument("--max-concurrency", type=int, default=os.cpu_count() or 1, help="requests run at once (workers)")
    s.add_argument("--max-queue", type=int, default=4096, help="requests waiting for a worker before 503")
    s.add_argument("--queue-timeout", type=float, default=60.0, help="seconds a request may wait before 503")
    s.add_argument("--uid-base", type=int, help="lease sandbox uids from here (default: the backend's own range)")
    s.add_argument("--uid-span", type=int, help="how many uids from --uid-base this server may lease")
    b = sub.add_parser("build-image", help="build the Docker image from this host's packages (no registry)")
    b.add_argument("--force", action="store_true", help="rebuild even when the label hash matches")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "judge":
        with open(args.problem) as f:
            problem = json.load(f)
        with open(args.solution) as f:
            code = f.read()
        if args.backend == "remote" and not args.url:
            print("error: --backend remote needs --url", file=sys.stderr)
            return 2
        backend = RemoteJudge(args.url, args.protocol) if args.backend == "remote" else get_backend(args.backend)
        try:
            result = judge(problem, code, args.language, backend=backend, stop_on_first_failure=not args.all_tests)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps(result.to_dict()))
        return 0
    if args.cmd == "serve":
        from .server import listen, serve

        if args.max_concurrency < 1 or args.max_queue < 0 or args.queue_timeout <= 0:
            print("error: --max-concurrency >= 1, --max-queue >= 0, --queue-timeout > 0", file=sys.stderr)
            return 2
        uids = {k: v for k, v in (("uid_base", args.uid_base), ("uid_span", args.uid_span)) if v is not None}
        backend = get_backend(args.backend, workers=args.max_concurrency, **uids)
        if hasattr(backend, "ensure_pch"):  # never inside a request
            backend.ensure_pch()
        sock = listen(args.host, args.port)
        host, port = sock.getsockname()[:2]
        print(f"serving {backend.name} on http://{host}:{port}", flush=True)
        serve(backend, sock, args.max_concurrency, args.max_queue, args.queue_timeout)
        return 0
    import docker

    from .image import build_image

    print(build_image(docker.from_env(), force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
