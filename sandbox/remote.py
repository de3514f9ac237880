"""Judge on sandbox servers over HTTP: our own (`python -m sandbox serve`, POST /judge), or
SandboxFusion's `/run_code` API (one request per test, each graded here by judges/scoring.py, the
rule local judging uses).

    judge(problem, code, "python", backend=RemoteJudge(["http://a:8080", "http://b:8080"]))

A judge-level transport, not a Backend: it takes whole submissions, and the server compiles and
runs them (ours also compares). Requests are spread over the servers round robin. A request
moves to the next server only when it cannot have run there (connection refused, or 503, which
our server answers only for work it did not start); anything else (a timeout, a reset
mid-request, another 5xx) is a SandboxError, never retried here, so a submission is never
judged twice with different results.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.error
import urllib.request
from typing import Literal

from .judges.classify import RUNTIME_SLACK_MB
from .judges.scoring import HARNESS, grade_test, summary, test_limits
from .languages import COMPILE_LIMITS, Language
from .problem import Problem
from .verdict import JudgeResult, RunResult, RunStatus, SandboxError, Verdict

PROTOCOLS = ("xrpo", "sandboxfusion")


class NotRun(Exception):
    """The server refused the request before running it; another server may take it."""


class RemoteJudge:
    """Judges whole submissions on one or more sandbox servers (see the module docstring).

    `url` is one server or a list; `protocol` is "xrpo" (our /judge) or "sandboxfusion" (/run_code).
    """

    name = "remote"

    def __init__(
        self,
        url: str | list[str] | tuple[str, ...],
        protocol: Literal["xrpo", "sandboxfusion"] = "xrpo",
        timeout_s: float = 600.0,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("the remote judge needs at least one url")
        for u in urls:
            if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                raise ValueError(f"remote url must start with http:// or https://, got {u!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown remote protocol {protocol!r}; choose one of {PROTOCOLS}")
        self.urls = [u.rstrip("/") for u in urls]
        self.protocol, self.timeout_s = protocol, timeout_s
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def post(self, path: str, body: dict) -> dict:
        """POST JSON to the next server, moving on while servers refuse; a 400/422 answer is the
        caller's mistake (ValueError), any other failure a SandboxError."""
        with self._lock:
            start = next(self._turn)
        refused = []
        for k in range(len(self.urls)):
            url = self.urls[(start + k) % len(self.urls)]
            try:
                return _post(url + path, body, self.timeout_s)
            except NotRun as e:
                refused.append(f"{url}: {e}")
        raise SandboxError("every sandbox server refused the request: " + "; ".join(refused))

    def silent(self, timeout_s: float = 10.0) -> list[str]:
        """The servers that do not answer, each as "url (why)"; empty when all do. Ours must answer
        GET /health with status ok; a SandboxFusion server any HTTP answer (it has no such endpoint).
        For a start-up check: a server that is down now would fail the first step's rows."""
        out = []
        for url in self.urls:
            why = _health(url, self.protocol, timeout_s)
            if why is not None:
                out.append(f"{url} ({why})")
        return out

    def judge(self, prob: Problem, code: str, lang: Language, stop_on_first_failure: bool) -> JudgeResult:
        if self.protocol == "xrpo":
            body = {"problem": prob.to_dict(), "code": code, "language": lang.name}
            return JudgeResult.from_dict(self.post("/judge", {**body, "stop_on_first_failure": stop_on_first_failure}))
        return self._judge_sandboxfusion(prob, code, lang, stop_on_first_failure)

    def _judge_sandboxfusion(self, prob: Problem, code: str, lang: Language, stop: bool) -> JudgeResult:
        """One /run_code request per test, graded by `grade_test` as local runs are."""
        if prob.checker is not None:
            raise ValueError(f"problem {prob.id!r} has a checker, which SandboxFusion's run_code cannot run")
        if prob.kind == "functional":  # the harness and the solution travel as one file
            code = HARNESS.decode() + f"\nmain({prob.fn_name!r}, {code!r})\n"
        limits = test_limits(prob)
        tests = []
        for i, t in enumerate(prob.tests):
            req = {
                "code": code,
                "language": lang.name,
                "stdin": t.input,
                "run_timeout": prob.time_limit_s,
                "compile_timeout": COMPILE_LIMITS.cpu_s,
                "memory_limit_MB": prob.memory_mb + RUNTIME_SLACK_MB,
            }
            resp = self.post("/run_code", req)
            if resp.get("status") == "SandboxError":
                raise SandboxError(f"SandboxFusion: {resp.get('message', '')}")
            comp, run = resp.get("compile_result") or {}, resp.get("run_result") or {}
            if comp and (comp.get("status") != "Finished" or comp.get("return_code") != 0):
                return JudgeResult(Verdict.CE, 0, len(prob.tests), message=str(comp.get("stderr", ""))[-2000:])
            tests.append(grade_test(prob, i, sandboxfusion_run(run), limits))
            if stop and tests[-1].verdict is not Verdict.AC:
                break
        return summary(tests, len(prob.tests))

    def close(self) -> None:
        """Nothing to release (kept so a RemoteJudge can stand where a Backend is closed)."""

    def __enter__(self) -> RemoteJudge:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def sandboxfusion_run(run: dict) -> RunResult:
    """A SandboxFusion run_result as a RunResult, for grade_test."""
    out, err = (str(run.get(k) or "").encode(errors="surrogatepass") for k in ("stdout", "stderr"))
    wall = float(run.get("execution_time") or 0.0)
    status, code = run.get("status"), run.get("return_code")
    if status == "TimeLimitExceeded":
        return RunResult(RunStatus.TIMEOUT, stdout=out, stderr=err, wall_s=wall)
    if status != "Finished":
        return RunResult(
            RunStatus.ERROR, message=f"SandboxFusion run status {status!r}: {err[-300:].decode(errors='replace')}"
        )
    if code == 0:
        return RunResult(RunStatus.OK, exit_code=0, stdout=out, stderr=err, wall_s=wall)
    return RunResult(RunStatus.EXITED, exit_code=code, stdout=out, stderr=err, wall_s=wall)


def _health(url: str, protocol: str, timeout_s: float) -> str | None:
    """Why the server at url does not answer as a judge, or None when it does."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        return None if protocol == "sandboxfusion" else f"GET /health answered HTTP {e.code}"
    except urllib.error.URLError as e:
        return str(e.reason)
    except OSError as e:  # a timeout or a reset
        return f"{type(e).__name__}: {e}"
    if protocol == "sandboxfusion":
        return None
    try:
        status = json.loads(body).get("status")
    except (json.JSONDecodeError, AttributeError):
        status = None
    return None if status == "ok" else f"GET /health answered {body[:100]!r}, not a sandbox server's status"


def _post(url: str, body: dict, timeout_s: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        detail = e.read()[:500].decode(errors="replace")
        if e.code == 503:
            raise NotRun(f"HTTP 503: {detail}") from None
        if e.code in (400, 422):
            raise ValueError(f"remote sandbox rejected the request: {detail}") from None
        raise SandboxError(f"remote sandbox at {url} answered HTTP {e.code}: {detail}") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, ConnectionRefusedError):
            raise NotRun("connection refused") from None
        raise SandboxError(f"remote sandbox at {url} failed: {e}") from None
    except ConnectionRefusedError:
        raise NotRun("connection refused") from None
    except (OSError, json.JSONDecodeError) as e:
        raise SandboxError(f"remote sandbox at {url} failed: {type(e).__name__}: {e}") from None
