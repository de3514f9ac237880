"""Pure parts: comparison rules, problem validation, run classification. No sandbox needed."""

from __future__ import annotations

import signal

import pytest

from sandbox import Limits, Problem, RunResult, RunStatus, Verdict, judge
from sandbox.judges import compare
from sandbox.judges.classify import RUNTIME_SLACK_MB, run_verdict


def test_lcb_stdio_exact_rules():
    assert compare.lcb_stdio("1 2\n3\n", "  1 2 \n3") is None  # strip per line and overall
    assert compare.lcb_stdio("1.0", "1.00") is None  # Decimal equality
    assert compare.lcb_stdio("0.1", "0.10000001") is not None  # no epsilon
    assert compare.lcb_stdio("1\n2", "1\n\n2") is not None  # line counts must match
    assert compare.lcb_stdio("YES", "yes") is not None  # case matters in LCB
    assert compare.lcb_stdio("1 2", "1  2") is None  # whitespace split on the Decimal path
    assert compare.lcb_stdio("abc", "abd") == "line 1: expected 'abc', got 'abd'"


def test_cf_normalised_diff():
    assert compare.cf_diff("YES\n1 2\n", "yes\r\n\n1   2\n\n") is None  # case of yes/no, \r, blanks, spaces
    assert compare.cf_diff("Yes", "nO") is not None
    assert compare.cf_diff("1.0", "1.00") is not None  # tokens compare as strings
    assert compare.cf_diff("1\n2", "1 2") is not None  # line structure is kept
    assert compare.cf_diff("1\n2", "1") == "expected 2 non-blank lines, got 1"


def test_functional_compare_turns_tuples_into_lists():
    assert compare.lcb_functional("[1, 2]", "[1,2]") is None
    assert compare.lcb_functional("2", "2.0") is None  # Python ==
    assert compare.lcb_functional("[1, 2]", "[2, 1]") is not None
    assert compare.lcb_functional("[1]", "not JSON: {1}") is not None


def _p(**kw):
    d = {"id": "p1", "judge": "livecodebench", "kind": "stdio", "tests": [{"input": "", "output": "1"}]}
    d.update(kw)
    return d


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"judge": "atcoder"}, "judge 'atcoder' is not one of"),
        ({"kind": "interactive"}, "kind 'interactive'"),
        ({"tests": []}, "non-empty list"),
        ({"tests": [{"input": 1, "output": "2"}]}, "test 0"),
        ({"kind": "functional"}, "fn_name"),
        ({"kind": "functional", "fn_name": "f", "judge": "codeforces"}, "LiveCodeBench only"),
        ({"time_limit_s": -1}, "time_limit_s"),
        ({"memory_mb": 4}, "memory_mb"),
        ({"checker": {"language": "python", "code": "x"}}, "only used with judge 'codeforces'"),
        ({"judge": "codeforces", "checker": {"language": "python", "code": " "}}, "checker code is missing"),
        ({"judge": "codeforces", "checker": {"language": "rust", "code": "x"}}, "checker language 'rust'"),
        ({"extra": 1}, "unknown keys ['extra']"),
    ],
)
def test_malformed_problem_names_problem_and_field(bad, needle):
    with pytest.raises(ValueError, match="problem 'p1'") as e:
        Problem.from_dict(_p(**bad))
    assert needle in str(e.value)


def test_problem_round_trip_and_float_memory():
    p = Problem.from_dict(_p(memory_mb=256.0, time_limit_s=2))
    assert p.memory_mb == 256 and p.time_limit_s == 2.0
    assert Problem.from_dict(p.to_dict()) == p


def test_judge_rejects_unknown_language_before_running():
    with pytest.raises(ValueError, match=r"unknown language 'rust'; supported: \['cpp', 'python'\]"):
        judge(_p(), "fn main(){}", "rust", backend="bwrap")
    with pytest.raises(ValueError, match="Python only"):
        judge(_p(kind="functional", fn_name="f"), "int main(){}", "cpp", backend="bwrap")


LIM = Limits(cpu_s=1, wall_s=3, memory_mb=256 + RUNTIME_SLACK_MB)


@pytest.mark.parametrize(
    "run, verdict",
    [
        (RunResult(RunStatus.OK), None),
        (RunResult(RunStatus.ERROR, message="daemon gone"), Verdict.SE),
        (RunResult(RunStatus.TIMEOUT, cpu_s=0.1), Verdict.TLE),
        (RunResult(RunStatus.SIGNALED, signal=signal.SIGKILL, cpu_s=1.0), Verdict.TLE),  # RLIMIT_CPU
        (RunResult(RunStatus.SIGNALED, signal=signal.SIGKILL, cpu_s=0.897), Verdict.TLE),  # seen under load
        (RunResult(RunStatus.SIGNALED, signal=signal.SIGKILL, cpu_s=0.795), Verdict.TLE),  # under more load
        (RunResult(RunStatus.SIGNALED, signal=signal.SIGKILL, cpu_s=0.1, memory_mb=20.0), Verdict.RE),  # a self-kill
        (RunResult(RunStatus.OUTPUT_LIMIT), Verdict.OLE),
        (RunResult(RunStatus.EXITED, exit_code=1, stderr=b"...\nMemoryError\n"), Verdict.MLE),
        (RunResult(RunStatus.SIGNALED, signal=6, stderr=b"what():  std::bad_alloc"), Verdict.MLE),
        (RunResult(RunStatus.SIGNALED, signal=9, memory_mb=300.0), Verdict.MLE),
        (RunResult(RunStatus.SIGNALED, signal=11, memory_mb=20.0), Verdict.RE),
        (RunResult(RunStatus.EXITED, exit_code=3), Verdict.RE),
    ],
)
def test_run_verdict_classification(run, verdict):
    assert run_verdict(run, LIM) is verdict
