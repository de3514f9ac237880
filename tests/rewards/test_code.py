"""Code scorer: block extraction and problem lookup (no sandbox), then real judging in bwrap.

Judging tests skip, with the reason, only when no sandbox backend can run here.
"""

import contextlib
import json
import os
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from types import SimpleNamespace

import pytest

from sandbox.backends.bwrap import bwrap_available
from xrpo_verl.rewards.code import (
    CodeRewardConfig,
    JudgeOutcome,
    SandboxFailure,
    VerdictMemo,
    compute_score,
    resolve_problem,
)

ADD = {
    "id": "add", "judge": "livecodebench", "kind": "stdio", "fn_name": None,
    "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7\n", "output": "12\n"}, {"input": "0 0\n", "output": "0\n"}],
    "time_limit_s": 2.0, "memory_mb": 256, "checker": None,
}  # fmt: skip
GOOD = "Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
HALF = "```python\nprint(3 if input() == '1 2' else 12)\n```"  # passes tests 1 and 2 only


_NO_BWRAP = bwrap_available()  # None, or why bubblewrap cannot run here
needs_bwrap = pytest.mark.skipif(_NO_BWRAP is not None, reason=f"no sandbox backend: {_NO_BWRAP}")
BWRAP = CodeRewardConfig(backend="bwrap")


# --- no sandbox needed -------------------------------------------------------------------------


def test_problem_comes_from_ground_truth_json_or_extra_info():
    assert resolve_problem(json.dumps(ADD), None) == ADD
    assert resolve_problem(ADD, None) == ADD
    assert resolve_problem("add", {"problem": json.dumps(ADD)}) == ADD
    assert resolve_problem("add", {"problem": ADD, "index": 3}) == ADD


@pytest.mark.parametrize(
    "ground_truth, extra_info, message",
    [
        ("42", {"index": 1}, "no code problem found"),
        ("{not json", None, "does not parse"),
        ("x", {"problem": {**ADD, "tests": []}}, "has no tests"),
    ],
)
def test_missing_or_broken_problem_raises(ground_truth, extra_info, message):
    with pytest.raises(ValueError, match=message):
        compute_score("code/x", GOOD, ground_truth, extra_info, BWRAP)


def test_no_code_block_scores_zero_without_judging():
    result = compute_score("code/x", "I would loop over the input.", "add", {"problem": ADD}, BWRAP)
    assert result["score"] == 0.0 and result["verdict"] == "no_code" and "no fenced code block" in result["reason"]
    assert result["total"] == 3 and result["passed"] == 0


def test_unsupported_language_scores_zero_with_a_reason():
    result = compute_score("code/x", "```java\nclass Main {}\n```", "add", {"problem": ADD}, BWRAP)
    assert result["verdict"] == "bad_language" and result["score"] == 0.0
    assert "'java'" in result["reason"] and "python" in result["reason"]
    functional = {**ADD, "kind": "functional", "fn_name": "add"}
    cpp = compute_score(
        "code/x", "```cpp\nint add(int a, int b) { return a + b; }\n```", "add", {"problem": functional}, BWRAP
    )
    assert cpp["verdict"] == "bad_language" and "function-call" in cpp["reason"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"reward_mode": "partial"}, "reward_mode"),
        ({"default_language": "rust"}, "default_language"),
        ({"se_retries": -1}, "se_retries"),
        ({"backend": "bwrap", "backend_options": {"uid_bse": 62000}}, r"unknown backend_options \['uid_bse'\]"),
        ({"backend": "bwrap", "backend_options": {"uid_base": 5}}, "uid_base=5"),  # BwrapConfig's own check
        ({"backend": "auto", "backend_options": {"uid_base": 62000}}, "backend_options need backend='bwrap' or"),
        ({"backend": "docker", "backend_options": ["uid_base"]}, "backend_options must be a mapping"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CodeRewardConfig(**kwargs)


# --- real sandbox ------------------------------------------------------------------------------


@needs_bwrap
def test_backend_options_reach_the_sandbox_of_the_process(tmp_path):
    """reward_kwargs.code.backend_options: the process judges in one backend built with them (its
    uids from the range given, its work dirs under work_root), and a verdict is not shared with
    the default sandbox's."""
    from xrpo_verl.rewards import code

    work_root = tempfile.mkdtemp(prefix="xrpo-test-options-")
    os.chmod(work_root, 0o711)  # the slot uids pass through it to their work dirs
    base, span = 64800, 4  # a range of this test's own
    config = CodeRewardConfig.from_dict(
        {"backend": "bwrap", "backend_options": {"uid_base": base, "uid_span": span, "work_root": work_root}}
    )
    try:
        backend = config.sandbox_backend()
        assert backend is config.sandbox_backend() is replace(config, se_retries=1).sandbox_backend()
        assert set(backend.uids) <= set(range(base, base + span)) and backend.config.work_root == work_root
        seen = []
        original = backend.session

        def session():
            with original() as s:
                seen.append((s.uid, os.path.dirname(s.work)))
                yield s

        backend.session = contextlib.contextmanager(session)
        assert compute_score("code/x", GOOD, json.dumps(ADD), None, config)["verdict"] == "AC"
        assert seen and all(uid in backend.uids and parent == work_root for uid, parent in seen), seen
        assert os.listdir(work_root) == []  # the session's work dir went with it
        assert code.memo_key(ADD, GOOD, "python", config) != code.memo_key(ADD, GOOD, "python", BWRAP)
    finally:
        code._configured_backend(config.backend, json.dumps(config.backend_options, sort_keys=True)).close()
        code._configured_backend.cache_clear()
        os.rmdir(work_root)


@needs_bwrap
def test_accepted_wrong_and_fraction_rewards():
    ac = compute_score("code/x", GOOD, json.dumps(ADD), None, BWRAP)
    assert (ac["score"], ac["acc"], ac["verdict"], ac["passed"], ac["language"]) == (1.0, 1.0, "AC", 3, "python")

    wa = compute_score("code/x", HALF, json.dumps(ADD), None, BWRAP)
    assert (wa["score"], wa["acc"], wa["verdict"]) == (0.0, 0.0, "WA")

    fraction = CodeRewardConfig(backend="bwrap", reward_mode="fraction")
    part = compute_score("code/x", HALF, json.dumps(ADD), None, fraction)
    assert part["verdict"] == "WA" and part["passed"] == 2 and part["score"] == pytest.approx(2 / 3)
    assert part["acc"] == 0.0  # partial credit scores, but is not a verified success


@needs_bwrap
def test_untagged_block_uses_default_language_and_cpp_is_judged():
    untagged = compute_score("code/x", GOOD.replace("```python", "```"), "add", {"problem": ADD}, BWRAP)
    assert untagged["verdict"] == "AC" and untagged["language"] == "python"
    cpp = "```cpp\n#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n```"
    result = compute_score("code/x", cpp, "add", {"problem": ADD}, BWRAP)
    assert result["verdict"] == "AC" and result["language"] == "cpp"


@needs_bwrap
def test_functional_problem_calls_the_function():
    problem = {
        **ADD,
        "kind": "functional",
        "fn_name": "add",
        "tests": [{"input": "1\n2", "output": "3"}, {"input": "[1]\n[2]", "output": "[1, 2]"}],
    }
    result = compute_score(
        "code/x", "```python\ndef add(a, b):\n    return a + b\n```", "add", {"problem": problem}, BWRAP
    )
    assert result["verdict"] == "AC" and result["passed"] == 2


def _failing_backend(failures_before_success):
    """A real BwrapBackend whose first `failures_before_success` sessions fail like a dead daemon."""
    from sandbox.backends.bwrap import BwrapBackend

    class FlakyBwrap(BwrapBackend):
        calls = 0

        def session(self):
            FlakyBwrap.calls += 1
            if FlakyBwrap.calls <= failures_before_success:
                raise OSError("simulated sandbox outage")
            return super().session()

    return FlakyBwrap()


@needs_bwrap
def test_sandbox_error_is_retried_then_raised_never_scored_zero():
    """The failure is injected in a subclass of the real bwrap backend: judge() reports SE."""
    backend = _failing_backend(failures_before_success=10)
    config = CodeRewardConfig(backend=backend, se_retries=2, retry_backoff_s=0.0)
    with pytest.raises(SandboxFailure, match="failed 3 times on problem 'add'"):
        compute_score("code/x", GOOD, "add", {"problem": ADD}, config)
    assert type(backend).calls == 3


@needs_bwrap
def test_sandbox_error_then_success_scores_the_real_verdict():
    backend = _failing_backend(failures_before_success=1)
    config = CodeRewardConfig(backend=backend, se_retries=2, retry_backoff_s=0.0)
    before = time.time()
    result = compute_score("code/x", GOOD, "add", {"problem": ADD}, config)
    after = time.time()
    assert result["verdict"] == "AC" and type(backend).calls == 2
    # Two judge calls; the timestamps bracket both, the seconds are within them.
    assert result["attempts"] == 2
    assert before <= result["sandbox_start"] < result["sandbox_end"] <= after
    assert 0 < result["sandbox_s"] <= result["sandbox_end"] - result["sandbox_start"]


@needs_bwrap
def test_judged_rows_carry_timing_and_unjudged_rows_zeros():
    ac = compute_score("code/x", GOOD, json.dumps(ADD), None, replace(BWRAP, memo_size=0))
    assert ac["attempts"] == 1 and ac["sandbox_s"] > 0 and ac["sandbox_end"] > ac["sandbox_start"] > 0
    none = compute_score("code/x", "no code here", json.dumps(ADD), None, BWRAP)
    assert (none["attempts"], none["sandbox_s"], none["sandbox_start"], none["sandbox_end"]) == (0, 0.0, 0.0, 0.0)


def test_remote_backend_needs_a_url_and_only_then():
    with pytest.raises(ValueError, match="url is required"):
        CodeRewardConfig(backend="remote")
    with pytest.raises(ValueError, match="url is required"):
        CodeRewardConfig(backend="bwrap", url="http://127.0.0.1:1")


# Responses a policy can produce that are not ordinary code: each still gets a score.
ODD_RESPONSES = [
    "",
    "```python\n\ud800\n```",  # a lone surrogate (not encodable as UTF-8)
    "```python\nprint('\x00')\x00\n```",
    "```python\n" + "x = 1\n" * 20000 + "```",
    "```python\n```",
    "```c++\nint main(){}\n```",
    "```python\nimport os; os.kill(os.getppid(), 9)\n```",
    "```\n\n```",
    "``````",
]


@needs_bwrap
def test_any_response_gets_a_score_locally_and_remotely():
    from sandbox.server import running_server

    with running_server("bwrap", 2) as (url, _):
        for config in (BWRAP, CodeRewardConfig(backend="remote", url=url)):
            for response in [*ODD_RESPONSES, None, 3]:
                result = compute_score("code/x", response, "add", {"problem": ADD}, config)
                assert result["score"] == 0.0 and result["verdict"] in ("no_code", "bad_language", "CE", "RE", "WA")


@needs_bwrap
def test_remote_service_judges_like_the_local_backend():
    """A cluster's reward workers reach a shared `python -m sandbox serve` through backend=remote."""
    from sandbox.server import running_server

    with running_server("bwrap", 2) as (url, _):
        remote = CodeRewardConfig(backend="remote", url=url)
        remote.check_service()  # the start-up check passes once the service answers
        assert compute_score("code/x", GOOD, "add", {"problem": ADD}, remote)["verdict"] == "AC"
        assert compute_score("code/x", HALF, "add", {"problem": ADD}, remote)["verdict"] == "WA"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_start_up_check_names_the_silent_server_and_how_to_start_one():
    """With backend=remote the reward workers and the launch check every URL before the first step."""
    import http.server

    dead = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(SandboxFailure) as e:
        CodeRewardConfig(backend="remote", url=dead).check_service(timeout_s=2)
    msg = str(e.value)
    assert "\n" not in msg and dead in msg and "recipes/code/start_sandbox.sh" in msg and "sandbox serve" in msg
    CodeRewardConfig(backend="bwrap").check_service()  # a local backend has no service to check

    # a web server that is not a sandbox: ours must answer /health; SandboxFusion only answer at all
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *args):
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{other.server_address[1]}"
        with pytest.raises(SandboxFailure, match="GET /health answered HTTP 404"):
            CodeRewardConfig(backend="remote", url=[url]).check_service(timeout_s=2)
        CodeRewardConfig(backend="remote", url=[url], protocol="sandboxfusion").check_service(timeout_s=2)
    finally:
        other.shutdown()
        other.server_close()


@pytest.mark.timeout(300)
@needs_bwrap
def test_two_servers_one_killed_mid_run_nothing_lost_or_misscored():
    """Requests spread over two servers; one is SIGKILLed while requests are in flight. Requests it
    refused go to the other; one it dropped mid-run is an SE, retried by the scorer; none scores 0
    for the service's failure."""
    from concurrent.futures import ThreadPoolExecutor

    from sandbox.backends.bwrap import BwrapBackend, BwrapConfig
    from sandbox.server import running_server

    # the doomed server leases from a range of its own: once it dies, a server of another test
    # would otherwise take its uids (lowest free first) before this test could clean them
    base, span = 64900, 2
    own_range = ("--uid-base", str(base), "--uid-span", str(span))
    with running_server("bwrap", span) as (a, _), running_server("bwrap", span, *own_range) as (b, doomed):
        with urllib.request.urlopen(b + "/health") as r:
            doomed_uids = json.loads(r.read())["uids"]
        assert doomed_uids == list(range(base, base + span))
        config = CodeRewardConfig(backend="remote", url=[a, b], se_retries=3, retry_backoff_s=0.2)
        cases = [(GOOD, "AC"), (HALF, "WA")] * 20
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(compute_score, "code/x", r, "add", {"problem": ADD}, config) for r, _ in cases]
            while sum(f.done() for f in futures) < 8:
                time.sleep(0.05)
            doomed.kill()
            verdicts = [f.result()["verdict"] for f in futures]
        assert doomed.wait() != 0
    assert verdicts == [v for _, v in cases]
    # what the killed server left (work dirs, slot cgroups) goes when its uids are leased again
    BwrapBackend(BwrapConfig(workers=span, uid_base=base, uid_span=span)).close()
    assert not [
        n for n in os.listdir(tempfile.gettempdir()) if n.startswith(tuple(f"xrpo-sbx-{u}-" for u in doomed_uids))
    ]


# --- one verdict per distinct program ------------------------------------------------------------


def _outcome(verdict: str) -> JudgeOutcome:
    return JudgeOutcome(SimpleNamespace(verdict=verdict, passed=0), 0.1, 1.0, 1.1, 1)


def test_memo_judges_a_program_once_even_when_rows_arrive_together():
    memo, calls, release = VerdictMemo(size=8), [], threading.Event()

    def run():
        calls.append(1)
        release.wait(5)
        return _outcome("WA")

    found = []
    threads = [threading.Thread(target=lambda: found.append(memo.judge("k", run))) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.2)  # all four are in: one judging, three waiting on it
    release.set()
    for t in threads:
        t.join(5)
    assert len(calls) == 1 and sorted(hit for _, hit in found) == [False, True, True, True]
    assert {o.result.verdict for o, _ in found} == {"WA"}
    assert memo.judge("k", run) == (found[0][0], True) and len(calls) == 1


def test_memo_keeps_no_tle_and_no_failure_and_drops_the_least_recent():
    memo, calls = VerdictMemo(size=2), []

    def run(verdict):
        calls.append(verdict)
        return _outcome(verdict)

    assert memo.judge("slow", lambda: run("TLE"))[1] is False
    assert memo.judge("slow", lambda: run("TLE"))[1] is False  # judged again: TLE depends on the load
    with pytest.raises(SandboxFailure):
        memo.judge("se", lambda: (_ for _ in ()).throw(SandboxFailure("down")))
    assert memo.judge("se", lambda: run("AC"))[1] is False  # a failure is not a verdict
    memo.judge("b", lambda: run("WA"))
    memo.judge("c", lambda: run("RE"))  # drops "se", the least recently used
    assert len(memo) == 2 and memo.judge("b", lambda: run("x"))[1] is True
    assert memo.judge("se", lambda: run("AC"))[1] is False
    assert calls == ["TLE", "TLE", "AC", "WA", "RE", "AC"]


def test_memo_failure_reaches_every_row_waiting_on_it():
    memo, release = VerdictMemo(size=8), threading.Event()

    def fail():
        release.wait(5)
        raise SandboxFailure("down")

    errors = []

    def row():
        try:
            memo.judge("k", fail)
        except SandboxFailure as exc:
            errors.append(exc)

    threads = [threading.Thread(target=row) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    release.set()
    for t in threads:
        t.join(5)
    assert len(errors) == 3  # no row waiting on a failed judge gets a score


@needs_bwrap
def test_an_identical_program_takes_the_verdict_without_a_sandbox_run():
    config = replace(BWRAP, memo_size=16)
    program = "```python\na, b = map(int, input().split())\nprint(a + b)  # memo test\n```"
    first = compute_score("code/x", program, json.dumps(ADD), None, config)
    again = compute_score("code/x", "Again:\n" + program, json.dumps(ADD), None, config)  # the same block
    assert (first["verdict"], first["memo_hit"], first["attempts"]) == ("AC", 0.0, 1)
    assert (again["verdict"], again["score"], again["memo_hit"], again["attempts"], again["sandbox_s"]) == (
        "AC", 1.0, 1.0, 0, 0.0
    )  # fmt: skip
    other = compute_score("code/x", program.replace("# memo test", "# memo test 2"), json.dumps(ADD), None, config)
    assert (other["memo_hit"], other["attempts"]) == (0.0, 1)  # another program text: judged
    wrong_tests = {**ADD, "tests": [{"input": "1 2\n", "output": "4\n"}]}
    moved = compute_score("code/x", program, json.dumps(wrong_tests), None, config)
    assert (moved["verdict"], moved["memo_hit"]) == ("WA", 0.0)  # other tests: judged
    fraction = compute_score("code/x", program, json.dumps(ADD), None, replace(config, reward_mode="fraction"))
    assert fraction["memo_hit"] == 0.0  # all tests run in fraction mode: another key
