"""The sandbox service: FastAPI on uvicorn.

POST /run_code  SandboxFusion's API (verl's sandbox_fusion client works unchanged)
POST /judge     our API: a whole submission (problem, code, language) -> JudgeResult
GET  /health    liveness and load;  GET /metrics  Prometheus text

Requests are validated by pydantic models (SandboxFusion's field names); a malformed one gets
422 (400 for a body that is not UTF-8, or a problem the judge rejects). Sandbox work runs in a
bounded pool: `max_concurrency` at once, up to `max_queue` waiting. A request still queued when
its client has gone or `queue_timeout_s` has passed is dropped without running; a full queue, a
passed deadline and a shutdown answer 503, which means "not run": a client may send the request
to another server. SIGTERM stops accepting, lets running work finish, and closes the backend
(containers, cgroups, uid leases, temp dirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .backends import Backend
from .backends.base import is_relative_path
from .judges.grader import judge
from .languages import LANGUAGES
from .runcode import decode_files, run_code

log = logging.getLogger(__name__)
MAX_TIMEOUT_S = 300.0
"""Largest run_timeout / compile_timeout a request may ask for."""
MAX_BODY = 256 << 20
"""Largest request body accepted (bytes, by Content-Length)."""
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, strict=True)]
Language = Literal[tuple(LANGUAGES)]  # type: ignore[valid-type]


class RunCodeRequest(BaseModel):
    """SandboxFusion's RunCodeRequest (the fields verl sends, and files/fetch_files)."""

    model_config = ConfigDict(extra="ignore")
    code: Annotated[str, Field(strict=True)]
    language: Language
    stdin: Annotated[str | None, Field(strict=True)] = ""
    compile_timeout: Timeout = 10.0
    run_timeout: Timeout = 10.0
    memory_limit_MB: Annotated[int, Field(ge=-1, le=1 << 20, strict=True)] = -1
    files: dict[str, Annotated[str, Field(strict=True)]] = {}
    """Extra files for the working directory: relative path -> base64 content."""
    fetch_files: list[Annotated[str, Field(strict=True)]] = []
    """Paths of the working directory returned (base64) after the run."""

    @field_validator("files", "fetch_files")
    @classmethod
    def _relative_paths(cls, value):
        for name in value:
            if not is_relative_path(name):
                raise ValueError(f"{name!r} is not a relative path inside the working directory")
        return value


class CommandRunResult(BaseModel):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(BaseModel):
    status: Literal["Success", "Failed", "SandboxError"]
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = {}


class JudgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    problem: dict
    code: Annotated[str, Field(strict=True)]
    language: Language
    stop_on_first_failure: Annotated[bool, Field(strict=True)] = True


class NotRun(Exception):
    """The request was dropped before it ran (503)."""


class Pool:
    """Sandbox work in `workers` threads, at most `max_queue` requests waiting for one."""

    def __init__(self, workers: int, max_queue: int, queue_timeout_s: float) -> None:
        self.workers, self.max_queue, self.queue_timeout_s = workers, max_queue, queue_timeout_s
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="sandbox")
        self.queued = self.running = 0
        self.closing = False
        self.dropped: Counter[str] = Counter()
        self._slots: asyncio.Semaphore | None = None

    async def run(self, request: Request, fn):
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        if self.closing:
            raise self._drop("shutting down")
        if self.queued >= self.max_queue:
            raise self._drop("queue full")
        self.queued += 1
        try:
            await self._wait_for_slot(request)
        finally:
            self.queued -= 1
        try:
            if self.closing:
                raise self._drop("shutting down")
            self.running += 1
            try:
                return await asyncio.get_running_loop().run_in_executor(self.executor, fn)
            finally:
                self.running -= 1
        finally:
            self._slots.release()

    async def _wait_for_slot(self, request: Request) -> None:
        """Take a slot, unless the client goes away or the deadline passes first (NotRun)."""
        slot = asyncio.ensure_future(self._slots.acquire())
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait({slot, gone}, timeout=self.queue_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not slot.done():
                slot.cancel()
        if slot.done() and not slot.cancelled():
            if not gone.done() or gone.cancelled():
                return
            self._slots.release()  # the client left just as a slot came free
        if gone.done() and not gone.cancelled():
            raise self._drop("client gone")
        raise self._drop(f"waited {self.queue_timeout_s} s in the queue")

    def _drop(self, reason: str) -> NotRun:
        self.dropped[reason.split(" ")[0]] += 1
        return NotRun(reason)

    def close(self) -> None:
        self.closing = True
        self.executor.shutdown(wait=True, cancel_futures=True)


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Metrics:
    """Counters and a latency histogram, rendered as Prometheus text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[tuple[str, str]] = Counter()  # (endpoint, outcome)
        self.verdicts: Counter[str] = Counter()
        self.buckets: dict[str, list[int]] = {}
        self.sums: Counter[str] = Counter()

    def observe(self, endpoint: str, outcome: str, seconds: float, verdict: str | None = None) -> None:
        with self.lock:
            self.requests[endpoint, outcome] += 1
            if verdict:
                self.verdicts[verdict] += 1
            counts = self.buckets.setdefault(endpoint, [0] * (len(LATENCY_BUCKETS) + 1))
            for i, bound in enumerate((*LATENCY_BUCKETS, float("inf"))):
                if seconds <= bound:
                    counts[i] += 1
            self.sums[endpoint] += seconds

    def render(self, pool: Pool) -> str:
        lines = [
            "# TYPE sandbox_queue_depth gauge",
            f"sandbox_queue_depth {pool.queued}",
            "# TYPE sandbox_in_flight gauge",
            f"sandbox_in_flight {pool.running}",
            "# TYPE sandbox_dropped_total counter",
            *(f'sandbox_dropped_total{{reason="{r}"}} {n}' for r, n in sorted(pool.dropped.items())),
            "# TYPE sandbox_requests_total counter",
        ]
        with self.lock:
            lines += [
                f'sandbox_requests_total{{endpoint="{e}",outcome="{o}"}} {n}'
                for (e, o), n in sorted(self.requests.items())
            ]
            lines += ["# TYPE sandbox_verdicts_total counter"]
            lines += [f'sandbox_verdicts_total{{verdict="{v}"}} {n}' for v, n in sorted(self.verdicts.items())]
            lines += ["# TYPE sandbox_request_seconds histogram"]
            for endpoint, counts in sorted(self.buckets.items()):
                for bound, n in zip((*LATENCY_BUCKETS, "+Inf"), counts):
                    lines.append(f'sandbox_request_seconds_bucket{{endpoint="{endpoint}",le="{bound}"}} {n}')
                lines.append(f'sandbox_request_seconds_sum{{endpoint="{endpoint}"}} {self.sums[endpoint]:.6f}')
                lines.append(f'sandbox_request_seconds_count{{endpoint="{endpoint}"}} {counts[-1]}')
        return "\n".join(lines) + "\n"


def create_app(backend: Backend, max_concurrency: int = 8, max_queue: int = 4096, queue_timeout_s: float = 60.0):
    """The ASGI app over `backend`; closing the app (lifespan shutdown) closes the backend."""
    pool = Pool(max_concurrency, max_queue, queue_timeout_s)
    metrics = Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        pool.close()
        backend.close()

    app = FastAPI(title="xrpo sandbox", lifespan=lifespan)
    app.state.pool, app.state.metrics = pool, metrics

    @app.middleware("http")
    async def body_limit(request: Request, call_next):
        length = request.headers.get("content-length", "0")
        if length.isdigit() and int(length) > MAX_BODY:
            return JSONResponse({"detail": f"request body over {MAX_BODY} bytes"}, status_code=413)
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        # without the offending input, which may not be JSON (Infinity) or may be megabytes long
        errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        metrics.observe(request.url.path.strip("/"), "invalid", 0.0)
        return JSONResponse({"detail": errors}, status_code=422)

    async def serve(endpoint: str, request: Request, fn, verdict_of):
        t0 = time.monotonic()
        try:
            body = await pool.run(request, fn)
        except NotRun as e:
            metrics.observe(endpoint, "not_run", time.monotonic() - t0)
            return JSONResponse({"detail": f"not run: {e}"}, status_code=503)
        except ValueError as e:
            metrics.observe(endpoint, "rejected", time.monotonic() - t0)
            return JSONResponse({"detail": str(e)}, status_code=400)
        verdict = verdict_of(body)
        metrics.observe(endpoint, "ok", time.monotonic() - t0, verdict)
        return body

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code_endpoint(req: RunCodeRequest, request: Request):
        try:
            files = decode_files(req.files)
        except ValueError as e:
            return JSONResponse({"detail": str(e)}, status_code=422)
        kwargs = dict(
            code=req.code,
            language=req.language,
            stdin=req.stdin or "",
            run_timeout=req.run_timeout,
            compile_timeout=req.compile_timeout,
            memory_limit_mb=req.memory_limit_MB,
            files=files,
            fetch_files=req.fetch_files,
        )
        return await serve("run_code", request, lambda: run_code(backend, **kwargs), lambda b: b["status"])

    @app.post("/judge")
    async def judge_endpoint(req: JudgeRequest, request: Request):
        def work():
            res = judge(
                req.problem, req.code, req.language, backend=backend, stop_on_first_failure=req.stop_on_first_failure
            )
            return res.to_dict()

        return await serve("judge", request, work, lambda b: b["verdict"])

    @app.get("/health")
    async def health():
        return {
            "status": "ok",
            "backend": backend.name,
            "uids": getattr(backend, "uids", []),
            "in_flight": pool.running,
            "queued": pool.queued,
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus():
        return metrics.render(pool)

    return app


def listen(host: str, port: int, backlog: int = 4096) -> socket.socket:
    """A listening socket (port 0 picks a free one); connections wait in the backlog until served."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def serve(backend: Backend, sock: socket.socket, max_concurrency: int, max_queue: int, queue_timeout_s: float) -> None:
    """Serve until SIGTERM or SIGINT; the backend is closed on the way out."""
    import uvicorn

    app = create_app(backend, max_concurrency, max_queue, queue_timeout_s)
    config = uvicorn.Config(
        app,
        log_level=os.environ.get("SANDBOX_LOG_LEVEL", "warning"),
        timeout_graceful_shutdown=int(MAX_TIMEOUT_S),
        timeout_keep_alive=30,
        backlog=4096,
        access_log=False,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        backend.close()


@contextlib.contextmanager
def running_server(
    backend: str = "auto", max_concurrency: int = 2, *extra: str, env: dict | None = None, timeout_s: float = 180.0
):
    """`python -m sandbox serve` in a child process on a free loopback port, for tests and
    benchmarks: yields (url, process); SIGTERM (a clean shutdown) on exit."""
    import subprocess
    import sys
    import tempfile

    argv = [sys.executable, "-m", "sandbox", "serve", "--host", "127.0.0.1", "--port", "0", "--backend", backend]
    with tempfile.TemporaryFile() as log_file:
        proc = subprocess.Popen(
            [*argv, "--max-concurrency", str(max_concurrency), *extra],
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            env=env,
        )
        try:
            line = proc.stdout.readline()  # the server prints its URL once it listens
            if not line.startswith("serving"):
                proc.wait(timeout=timeout_s)
                log_file.seek(0)
                raise RuntimeError(f"sandbox server did not start: {log_file.read()[-2000:].decode(errors='replace')}")
            yield line.split()[-1], proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()
