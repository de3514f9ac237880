"""CLI, HTTP server (/judge, SandboxFusion-compatible /run_code) and the remote judge."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sandbox import RemoteJudge, Verdict, get_backend, judge
from sandbox.server import running_server

AB = {
    "id": "ab",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 1,
    "tests": [{"input": "1 2\n", "output": "3"}, {"input": "2 2\n", "output": "4"}],
}
SOL = "a, b = map(int, input().split())\nprint(a + b)"


def _cli(tmp_path, problem, code, *extra):
    (tmp_path / "p.json").write_text(json.dumps(problem))
    (tmp_path / "sol.py").write_text(code)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "judge",
            "--problem",
            str(tmp_path / "p.json"),
            "--solution",
            str(tmp_path / "sol.py"),
            "--language",
            "python",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_one_json_object_and_exits_0(tmp_path, bwrap_backend):
    r = _cli(tmp_path, AB, SOL, "--backend", "bwrap")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["verdict"], out["passed"], out["total"], len(out["tests"])) == ("AC", 2, 2, 2)
    r = _cli(tmp_path, AB, "print(0)", "--backend", "bwrap")  # a wrong answer is still a verdict
    assert r.returncode == 0 and json.loads(r.stdout)["verdict"] == "WA"


def test_cli_rejects_malformed_problem(tmp_path, bwrap_backend):
    r = _cli(tmp_path, {**AB, "judge": "icpc"}, SOL, "--backend", "bwrap")
    assert r.returncode == 2 and "problem 'ab': judge 'icpc'" in r.stderr


@pytest.fixture(scope="module")
def server(bwrap_backend):  # the fixture only checks that bwrap works here
    with running_server("bwrap", 2) as (url, _):
        yield url


def test_remote_judge_through_our_server(server):
    remote = RemoteJudge(server)
    r = judge(AB, SOL, "python", backend=remote)
    assert (r.verdict, r.passed, r.total) == (Verdict.AC, 2, 2)
    assert judge(AB, "print(1/0)", "python", backend=remote).verdict is Verdict.RE
    with pytest.raises(ValueError, match="unknown language"):
        judge(AB, SOL, "java", backend=remote)


def test_cli_judges_on_a_remote_server(tmp_path, server):
    r = _cli(tmp_path, AB, SOL, "--backend", "remote", "--url", server)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "AC"


def test_get_backend_points_remote_to_remote_judge():
    with pytest.raises(ValueError, match="RemoteJudge"):
        get_backend("remote", url="http://127.0.0.1:9")


def test_sandboxfusion_failure_is_se_and_a_wrong_answer_stops_the_tests(monkeypatch):
    """The SandboxFusion path grades each /run_code answer as local runs are (no server needed)."""
    stdins_sent = []

    def post(self, path, body):
        stdins_sent.append(body["stdin"])
        return {"status": "Success", "run_result": runs.pop(0)}

    monkeypatch.setattr(RemoteJudge, "post", post)
    sf = RemoteJudge("http://127.0.0.1:9", protocol="sandboxfusion")
    runs = [{"status": "Finished", "return_code": 0, "stdout": "0\n"}, {"status": "Finished", "return_code": 0}]
    r = judge(AB, SOL, "python", backend=sf)
    assert (r.verdict, r.passed, len(r.tests), len(stdins_sent)) == (Verdict.WA, 0, 1, 1)
    assert r.tests[0].message.startswith("line 1")
    runs = [{"status": "Error", "stderr": "executor died"}]
    r = judge(AB, SOL, "python", backend=sf)
    assert r.verdict is Verdict.SE and "executor died" in r.message


def test_sandboxfusion_protocol_against_our_run_code(server):
    sf = RemoteJudge(server, protocol="sandboxfusion")
    assert judge(AB, SOL, "python", backend=sf).verdict is Verdict.AC
    assert judge(AB, "print(5)", "python", backend=sf).verdict is Verdict.WA
    cpp = "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a+b;}"
    assert judge(AB, cpp, "cpp", backend=sf).verdict is Verdict.AC
    assert judge(AB, "int main( {", "cpp", backend=sf).verdict is Verdict.CE
    fn = {
        "id": "f",
        "judge": "livecodebench",
        "kind": "functional",
        "fn_name": "add",
        "tests": [{"input": "1\n2", "output": "3"}],
    }
    assert (
        judge(fn, "class Solution:\n    def add(self, a, b):\n        return a + b", "python", backend=sf).verdict
        is Verdict.AC
    )


def test_run_code_response_shape(server):
    sf = RemoteJudge(server, protocol="sandboxfusion")
    resp = sf.post(
        "/run_code",
        {"code": "import sys\nprint(sys.stdin.read().upper())", "language": "python", "stdin": "hi", "run_timeout": 5},
    )
    assert resp["status"] == "Success" and resp["compile_result"] is None
    assert resp["run_result"]["status"] == "Finished" and resp["run_result"]["stdout"] == "HI\n"
    resp = sf.post("/run_code", {"code": "while True: pass", "language": "python", "run_timeout": 1})
    assert resp["status"] == "Failed" and resp["run_result"]["status"] == "TimeLimitExceeded"


def test_unreachable_remote_is_se_not_wa():
    remote = RemoteJudge("http://127.0.0.1:9")
    r = judge(AB, SOL, "python", backend=remote)
    assert r.verdict is Verdict.SE and "refused" in r.message
