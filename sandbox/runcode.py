"""SandboxFusion's `/run_code` request/response shape, served by our server on any backend."""

from __future__ import annotations

import base64

from .backends import Backend, RunSpec
from .languages import COMPILE_LIMITS, get_language
from .verdict import Limits, RunResult, RunStatus

_SF_STATUS = {
    RunStatus.OK: "Finished",
    RunStatus.EXITED: "Finished",
    RunStatus.SIGNALED: "Finished",
    RunStatus.TIMEOUT: "TimeLimitExceeded",
    RunStatus.OUTPUT_LIMIT: "Error",
    RunStatus.ERROR: "Error",
}


def _step(r: RunResult) -> dict:
    code = r.exit_code if r.exit_code is not None else (128 + r.signal if r.signal else None)
    return {
        "status": _SF_STATUS[r.status],
        "execution_time": r.wall_s,
        "return_code": code,
        "stdout": r.stdout.decode(errors="replace"),
        "stderr": r.stderr.decode(errors="replace"),
    }


def run_code(backend: Backend, req: dict) -> dict:
    """Compile (if needed) and run `req["code"]` once; ValueError on a malformed request."""
    if not isinstance(req.get("code"), str):
        raise ValueError("run_code needs 'code' as a string")
    lang = get_language(req.get("language"))
    run_timeout = float(req.get("run_timeout") or 10)
    compile_timeout = float(req.get("compile_timeout") or 10)
    mem = int(req.get("memory_limit_MB") or -1)
    files = {lang.source("sol"): req["code"].encode()}
    for name, data in (req.get("files") or {}).items():
        files[name] = base64.b64decode(data)
    limits = Limits(cpu_s=run_timeout, wall_s=run_timeout, memory_mb=mem if mem > 0 else 4096)
    with backend.session() as s:
        c = s.run(
            RunSpec(
                lang.compile_argv("sol"),
                Limits(**{**COMPILE_LIMITS.to_dict(), "cpu_s": compile_timeout, "wall_s": 2 * compile_timeout}),
                files=files,
                writable=True,
            )
        )
        if c.status is RunStatus.ERROR:
            return {
                "status": "SandboxError",
                "message": c.message,
                "compile_result": None,
                "run_result": None,
                "files": {},
            }
        compile_result = _step(c) if lang.name != "python" else None
        if c.status is not RunStatus.OK:
            return {"status": "Failed", "message": "", "compile_result": _step(c), "run_result": None, "files": {}}
        r = s.run(RunSpec(lang.run_argv("sol"), limits, stdin=(req.get("stdin") or "").encode()))
    if r.status is RunStatus.ERROR:
        return {
            "status": "SandboxError",
            "message": r.message,
            "compile_result": compile_result,
            "run_result": None,
            "files": {},
        }
    ok = r.status is RunStatus.OK
    return {
        "status": "Success" if ok else "Failed",
        "message": "",
        "compile_result": compile_result,
        "run_result": _step(r),
        "files": {},
    }
