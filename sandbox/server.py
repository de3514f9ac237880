"""HTTP server: POST /judge (our API), POST /run_code (SandboxFusion-compatible), GET /health.

At most `max_concurrency` requests are judged at once; the rest wait up to `queue_timeout_s`
and then get 503, so a cluster's reward workers can share a sandbox machine.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .backends import Backend
from .judges.grader import judge
from .runcode import run_code

log = logging.getLogger(__name__)
MAX_BODY = 256 << 20


def make_server(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 8080,
    max_concurrency: int = 8,
    queue_timeout_s: float = 600.0,
) -> ThreadingHTTPServer:
    """A ready-to-serve server (call serve_forever()); port 0 picks a free port."""
    gate = threading.BoundedSemaphore(max_concurrency)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # route access logs through logging, not stderr
            log.debug(fmt, *args)

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200, {"status": "ok", "backend": backend.name})
            else:
                self._send(404, {"error": f"unknown path {self.path!r}; try /health, /judge, /run_code"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            if not 0 < n <= MAX_BODY:
                return self._send(400, {"error": f"request body must be 1..{MAX_BODY} bytes of JSON, got {n}"})
            try:
                req = json.loads(self.rfile.read(n))
            except json.JSONDecodeError as e:
                return self._send(400, {"error": f"body is not JSON: {e}"})
            if self.path not in ("/judge", "/run_code"):
                return self._send(404, {"error": f"unknown path {self.path!r}; try /judge or /run_code"})
            if not gate.acquire(timeout=queue_timeout_s):
                return self._send(503, {"error": "sandbox busy"})
            try:
                if self.path == "/judge":
                    if not isinstance(req, dict) or not isinstance(req.get("code"), str):
                        raise ValueError("/judge needs {problem, code, language, stop_on_first_failure?}")
                    res = judge(
                        req.get("problem"),
                        req["code"],
                        req.get("language"),
                        backend=backend,
                        stop_on_first_failure=bool(req.get("stop_on_first_failure", True)),
                    )
                    body = res.to_dict()
                else:
                    body = run_code(backend, req)
            except ValueError as e:
                return self._send(400, {"error": str(e)})
            finally:
                gate.release()
            self._send(200, body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
