"""The service (`python -m sandbox serve`, a child process) on both backends: SandboxFusion's
response shape and the same answer from bwrap and Docker for each case, malformed requests
answered 422/400 while the server keeps serving, dropped work, metrics, SIGTERM cleanup."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import signal
import socket
import tempfile
import threading
import time
import urllib.request

import pytest

from sandbox.backends.isolation import own_memory_cgroup
from sandbox.backends.uids import RUN_LOCK_DIR, lock_path
from sandbox.server import running_server

CPP_ABORT = "#include <cstdlib>\nint main() { std::abort(); }"


@pytest.fixture(scope="module", params=["bwrap", "docker"])
def server(request):
    getter = request.getfixturevalue  # skips with the reason when the backend is unavailable here
    getter(f"{request.param}_backend")
    with running_server(request.param, 2) as (url, _):
        yield url


def post(url: str, body, timeout: float = 60) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + "/run_code", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def raw(url: str, request: bytes, timeout: float = 30) -> int:
    """Send raw HTTP bytes; the answer's status code."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(request)
        head = s.recv(4096)
    return int(head.split(b" ")[1])


def run(url: str, code: str, language: str = "python", **kw) -> dict:
    status, body = post(url, {"code": code, "language": language, **kw})
    assert status == 200, body
    assert set(body) == {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
    assert body["executor_pod_name"]
    return body


# (code, language, extra request fields) -> (status, run_result.status, return_code, stderr contains)
CASES = {
    "writes its working dir": (
        "open('out.txt', 'w').write('x'); print(open('out.txt').read())",
        "python",
        {},
        ("Success", "Finished", 0, ""),
    ),
    "kills itself": (
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        "python",
        {},
        ("Failed", "Finished", 137, ""),
    ),
    "aborts": (CPP_ABORT, "cpp", {}, ("Failed", "Finished", 134, "")),
    "syntax error": ("print(1", "python", {}, ("Failed", "Finished", 1, "SyntaxError")),
    "wall clock": (
        "import time; time.sleep(5)",
        "python",
        {"run_timeout": 1},
        ("Failed", "TimeLimitExceeded", None, ""),
    ),
    "cpu limit": ("while True: pass", "python", {"run_timeout": 1}, ("Failed", "TimeLimitExceeded", None, "")),
    "memory": ("x = bytearray(1 << 31)", "python", {"memory_limit_MB": 256}, ("Failed", "Finished", 1, "MemoryError")),
    "exit code": ("raise SystemExit(3)", "python", {}, ("Failed", "Finished", 3, "")),
    "output cap": (
        "import sys\nb = b'x' * (1 << 20)\nfor _ in range(40): sys.stdout.buffer.write(b)",
        "python",
        {},
        ("Failed", "Finished", None, ""),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sandboxfusion_shape_and_same_answer_on_both_backends(server, case):
    code, language, extra, (status, run_status, code_, err) = CASES[case]
    body = run(server, code, language, **extra)
    r = body["run_result"]
    assert (body["status"], r["status"], r["return_code"]) == (status, run_status, code_), body
    assert err in r["stderr"]
    assert (body["compile_result"] is None) == (language == "python")
    if case == "output cap":
        assert body["message"] == "output limit exceeded" and len(r["stdout"]) <= 4096


def test_compile_error_files_and_fetch(server):
    body = run(server, "int main( {", "cpp")
    assert body["status"] == "Failed" and body["run_result"] is None
    assert body["compile_result"]["status"] == "Finished" and body["compile_result"]["return_code"] != 0
    code = "open('res/out.txt', 'w').write(open('data/in.txt').read().upper())"
    files = {"data/in.txt": base64.b64encode(b"nested").decode()}
    body = run(server, "import os; os.mkdir('res')\n" + code, files=files, fetch_files=["res/out.txt", "missing"])
    assert body["status"] == "Success" and body["files"] == {"res/out.txt": base64.b64encode(b"NESTED").decode()}


MALFORMED = {
    "list body": b"[1]",
    "string body": b'"code"',
    "stdin int": b'{"code": "print(1)", "language": "python", "stdin": 5}',
    "stdin list": b'{"code": "print(1)", "language": "python", "stdin": ["a"]}',
    "files null": b'{"code": "print(1)", "language": "python", "files": null}',
    "files list": b'{"code": "print(1)", "language": "python", "files": ["a"]}',
    "files escapes": b'{"code": "print(1)", "language": "python", "files": {"../x": ""}}',
    "files not base64": b'{"code": "print(1)", "language": "python", "files": {"a": "%%%"}}',
    "not utf-8": b'{"code": "\xff\xfe", "language": "python"}',
    "infinite timeout": b'{"code": "print(1)", "language": "python", "run_timeout": Infinity}',
    "NaN timeout": b'{"code": "print(1)", "language": "python", "run_timeout": NaN}',
    "huge timeout": b'{"code": "print(1)", "language": "python", "run_timeout": 1e9}',
    "zero timeout": b'{"code": "print(1)", "language": "python", "run_timeout": 0}',
    "unknown language": b'{"code": "print(1)", "language": "cobol"}',
    "no code": b'{"language": "python"}',
    "not json": b"{code",
}


def test_malformed_requests_get_4xx_and_the_server_keeps_serving(server):
    for name, body in MALFORMED.items():
        status, detail = post(server, body)
        assert status in (400, 422), (name, status, detail)
    head = b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    assert raw(server, head + b"Content-Length: abc\r\n\r\n{}") == 400
    assert raw(server, head + f"Content-Length: {(256 << 20) + 1}\r\n\r\n{{}}".encode()) == 413
    body = b'{"code": "print(7)", "language": "python"}'
    chunked = b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    assert raw(server, head + chunked) == 200
    assert run(server, "print(7)")["run_result"]["stdout"] == "7\n"


def test_health_and_metrics(server):
    with urllib.request.urlopen(server + "/health") as r:
        health = json.loads(r.read())
    assert health["status"] == "ok" and health["backend"] in ("bwrap", "docker") and len(health["uids"]) == 2
    run(server, "print(1)")
    with urllib.request.urlopen(server + "/metrics") as r:
        text = r.read().decode()
    for name in (
        "sandbox_queue_depth",
        "sandbox_in_flight",
        "sandbox_verdicts_total",
        "sandbox_request_seconds_bucket",
    ):
        assert re.search(rf"^{name}\b", text, re.M), name
    assert int(re.search(r'sandbox_verdicts_total\{verdict="Success"\} (\d+)', text)[1]) >= 1


def _metric(url: str, line_start: str) -> int:
    with urllib.request.urlopen(url + "/metrics") as r:
        for line in r.read().decode().splitlines():
            if line.startswith(line_start):
                return int(float(line.split()[-1]))
    return 0


def test_work_of_a_gone_client_or_past_its_deadline_is_dropped(bwrap_backend):
    with running_server("bwrap", 1, "--queue-timeout", "2") as (url, _):
        slow = threading.Thread(target=post, args=(url, {"code": "import time; time.sleep(4)", "language": "python"}))
        slow.start()
        time.sleep(0.5)
        body = json.dumps({"code": "open('/tmp/ran', 'w')", "language": "python"}).encode()
        for _ in range(3):  # clients that give up while the request waits
            with socket.create_connection(url.removeprefix("http://").split(":")) as s:
                s.sendall(
                    b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
        t0 = time.monotonic()
        status, detail = post(url, {"code": "print(1)", "language": "python"})  # waits past its deadline
        assert status == 503 and "queue" in detail["detail"] and time.monotonic() - t0 < 3.5
        slow.join()
        time.sleep(0.5)
        assert _metric(url, 'sandbox_dropped_total{reason="client"}') == 3
        assert _metric(url, 'sandbox_requests_total{endpoint="run_code",outcome="ok"}') == 1


@pytest.mark.parametrize("kind", ["bwrap", "docker"])
def test_sigterm_leaves_nothing_behind(kind, request):
    request.getfixturevalue(f"{kind}_backend")
    tmp_path = tempfile.mkdtemp(prefix="sigterm-", dir="/tmp")  # sandbox uids must reach work dirs
    os.chmod(tmp_path, 0o711)
    env = {**os.environ, "TMPDIR": tmp_path}
    with running_server(kind, 2, env=env) as (url, proc):
        with urllib.request.urlopen(url + "/health") as r:
            uids = json.loads(r.read())["uids"]
        busy = threading.Thread(target=post, args=(url, {"code": "import time; time.sleep(1)", "language": "python"}))
        busy.start()
        assert run(url, "print(1)")["status"] == "Success"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        busy.join()
    assert os.listdir(tmp_path) == []  # work dirs, job dirs, Docker's bind dirs
    os.rmdir(tmp_path)
    for uid in uids:  # the uid leases are free again
        with open(lock_path(RUN_LOCK_DIR, uid), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert not [p for p in os.listdir("/proc") if p.isdigit() and _owner(p) == uid]
    own = own_memory_cgroup()
    if own is not None:
        assert not [u for u in uids if os.path.exists(os.path.join(own[0], "xrpo-sandbox", f"slot-{u}"))]
    if kind == "docker":
        import docker

        left = docker.from_env().containers.list(
            all=True, sparse=True, filters={"label": f"xrpo.sandbox.pid={proc.pid}"}
        )
        assert left == []


def _owner(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1
