"""Grading that does not depend on what ran the tests: a test's limits, the verdict of one test
from its RunResult, and a submission's summary.

Both judges call `grade_test`, so one test is graded by one rule: the local judge (grader.py,
runs on a backend) and the SandboxFusion path (remote.py, runs on a /run_code server). Hence no
imports of backends or remote here.
"""

from __future__ import annotations

from pathlib import Path

from ..problem import Problem
from ..verdict import JudgeResult, Limits, RunResult, SandboxError, TestResult, Verdict
from . import compare
from .classify import RUNTIME_SLACK_MB, run_verdict

HARNESS = (Path(__file__).parent / "functional_harness.py").read_bytes()
"""What a functional (LeetCode-style) problem runs: harness.py locally, prepended on SandboxFusion."""


def test_limits(problem: Problem) -> Limits:
    """Per-test caps: CPU = the time limit; the wall clock allows for a loaded machine."""
    tl = problem.time_limit_s
    return Limits(cpu_s=tl, wall_s=2 * tl + 1, memory_mb=problem.memory_mb + RUNTIME_SLACK_MB)


def grade_test(prob: Problem, i: int, r: RunResult, limits: Limits) -> TestResult:
    """The verdict of test i from its run: the failure classifier's, else the output comparison.

    With a checker, AC only means the run exited 0: the caller has the checker decide every such
    test. A sandbox failure raises SandboxError, never a verdict the submission would be scored by.
    """
    v = run_verdict(r, limits)
    if v is Verdict.SE:
        raise SandboxError(f"test {i}: {r.message}")
    msg = r.stderr[-300:].decode(errors="replace") if v is not None else ""
    if v is None and prob.checker is None:
        msg = compare_output(prob, i, r.stdout)
        v = Verdict.WA if msg else Verdict.AC
    return TestResult(i, v if v is not None else Verdict.AC, r.cpu_s, r.wall_s, r.memory_mb, r.exit_code, msg or "")


def compare_output(prob: Problem, i: int, stdout: bytes) -> str | None:
    """None when test i's output matches by the problem's rule, else why it does not."""
    produced = stdout.decode("utf-8", errors="replace")
    expected = prob.tests[i].output
    if prob.kind == "functional":
        return compare.lcb_functional(expected, produced)
    return compare.COMPARATORS[prob.judge](expected, produced)


def summary(tests: list[TestResult], n: int) -> JudgeResult:
    """The submission's verdict: its first failing test's, else AC (when all n tests ran)."""
    passed = sum(t.verdict is Verdict.AC for t in tests)
    first_bad = next((t for t in tests if t.verdict is not Verdict.AC), None)
    if first_bad is None and len(tests) < n:
        raise SandboxError(f"the backend returned {len(tests)} of {n} results")
    return JudgeResult(first_bad.verdict if first_bad else Verdict.AC, passed, n, tests)
