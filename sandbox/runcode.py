"""SandboxFusion's `/run_code`: the request is compiled (C++) and run once on any backend; the
response has SandboxFusion's shape. Deliberate differences are listed in docs/sandbox.md."""

from __future__ import annotations

import base64
import binascii
import socket

from .backends import Backend, RunSpec
from .judges.classify import compile_starved, run_verdict
from .languages import COMPILE_LIMITS, get_language
from .verdict import Limits, RunResult, RunStatus, Verdict

DEFAULT_MEMORY_MB = 4096
"""Address-space cap when the request gives none (memory_limit_MB <= 0)."""
EXECUTOR = socket.gethostname()


def _step(r: RunResult, limits: Limits) -> tuple[dict, bool]:
    """SandboxFusion's CommandRunResult for one run, and whether it succeeded."""
    verdict = run_verdict(r, limits)
    if verdict is Verdict.TLE:  # the wall clock or the CPU limit: no exit code, as SandboxFusion
        status, code = "TimeLimitExceeded", None
    elif verdict is Verdict.OLE:  # killed by the judge for its output: no exit code of its own
        status, code = "Finished", None
    else:
        status = "Finished"
        code = r.exit_code if r.exit_code is not None else 128 + (r.signal or 0)
    body = {
        "status": status,
        "execution_time": round(r.wall_s, 6),
        "return_code": code,
        "stdout": r.stdout.decode(errors="replace"),
        "stderr": r.stderr.decode(errors="replace"),
    }
    return body, verdict is None


def _response(status: str, message: str = "", compile_result=None, run_result=None, files=None) -> dict:
    return {
        "status": status,
        "message": message,
        "compile_result": compile_result,
        "run_result": run_result,
        "executor_pod_name": EXECUTOR,
        "files": files or {},
    }


def decode_files(files: dict[str, str]) -> dict[str, bytes]:
    """The request's base64 files; ValueError names the first that does not decode."""
    out = {}
    for name, data in files.items():
        try:
            out[name] = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"files[{name!r}] is not base64") from None
    return out


def run_code(
    backend: Backend,
    code: str,
    language: str,
    stdin: str = "",
    run_timeout: float = 10,
    compile_timeout: float = 10,
    memory_limit_mb: int = -1,
    files: dict[str, bytes] | None = None,
    fetch_files: list[str] | tuple[str, ...] = (),
) -> dict:
    """Compile (C++ only; Python runs directly, so a syntax error is the run's exit 1, as in
    SandboxFusion) and run `code` once; ValueError on a request that cannot be run."""
    lang = get_language(language)
    mem = memory_limit_mb if memory_limit_mb > 0 else DEFAULT_MEMORY_MB
    limits = Limits(cpu_s=run_timeout, wall_s=run_timeout, memory_mb=mem)
    compile_limits = Limits(**{**COMPILE_LIMITS.to_dict(), "cpu_s": compile_timeout, "wall_s": 2 * compile_timeout})
    files = {**(files or {}), lang.source("sol"): code.encode(errors="surrogatepass")}
    run = RunSpec(lang.run_argv("sol"), limits, stdin=stdin.encode(errors="surrogatepass"), fetch=tuple(fetch_files))
    compile_argv = lang.compile_argv("sol") if lang.compile_writes else None
    if compile_argv is None:
        run.files = files
        specs = [run]
    else:
        specs = [RunSpec(compile_argv, compile_limits, files=files, writable=True, required=True), run]
    with backend.session() as s:
        results = s.run_many(specs, stop_on_failure=True)
    compile_result = None
    if compile_argv is not None:
        c = results[0]
        if c.status is RunStatus.ERROR:
            return _response("SandboxError", c.message)
        if compile_starved(c, compile_limits):  # the host's fault, as in judges/grader.py: never a compile error
            return _response("SandboxError", f"compiling: stopped by the wall clock after {c.cpu_s:.2f} s of CPU")
        compile_result, ok = _step(c, compile_limits)
        if not ok:
            return _response("Failed", compile_result=compile_result)
    r = results[-1]
    if r.status is RunStatus.ERROR:
        return _response("SandboxError", r.message, compile_result)
    run_result, ok = _step(r, limits)
    fetched = {k: base64.b64encode(v).decode() for k, v in r.files.items()}
    message = "output limit exceeded" if r.status is RunStatus.OUTPUT_LIMIT else ""
    return _response("Success" if ok else "Failed", message, compile_result, run_result, fetched)
