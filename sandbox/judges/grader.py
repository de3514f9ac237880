"""`judge()`: compile, run every test in one backend session, compare, and give verdicts.

Judges never start processes themselves: they hand RunSpecs to a backend session. A
`SubmissionJudge` given in place of a backend (`sandbox.remote.RemoteJudge`) judges the whole
submission itself. It is matched by its shape, not imported: the remote transport grades with the
judges' own rules (`scoring.py`), so it sits above them, and the judges never import it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol, runtime_checkable

from ..backends import Accept, Backend, RunSpec, get_backend
from ..languages import COMPILE_LIMITS, PYTHON, Language, get_language
from ..problem import Problem, as_problem
from ..verdict import JudgeResult, Limits, RunResult, RunStatus, SandboxError, TestResult, Verdict
from .classify import STARVED_WALL_FACTOR, compile_starved, starved
from .scoring import HARNESS, grade_test, summary, test_limits

log = logging.getLogger(__name__)

CHECKER_LIMITS = Limits(cpu_s=10, wall_s=20, memory_mb=1024, max_output_bytes=1 << 20)


@runtime_checkable
class SubmissionJudge(Protocol):
    """A judge-level transport: it compiles, runs and compares a whole submission itself."""

    def judge(self, prob: Problem, code: str, lang: Language, stop_on_first_failure: bool) -> JudgeResult: ...


def judge(
    problem: Problem | dict,
    code: str,
    language: str,
    *,
    backend: str | Backend | SubmissionJudge = "auto",
    stop_on_first_failure: bool = True,
    compile_limits: Limits = COMPILE_LIMITS,
) -> JudgeResult:
    """Judge one submission. Caller mistakes raise ValueError; sandbox failures give verdict SE."""
    prob = as_problem(problem)
    lang = get_language(language)
    if not isinstance(code, str):
        raise ValueError(f"code must be a str, got {type(code).__name__}")
    if prob.kind == "functional" and lang.name != "python":
        raise ValueError(f"problem {prob.id!r} is functional (LeetCode-style), which is Python only; got {language!r}")
    be = get_backend(backend) if isinstance(backend, str) else backend
    try:
        if isinstance(be, SubmissionJudge):  # a judge-level transport: the server compiles, runs and compares
            return be.judge(prob, code, lang, stop_on_first_failure)
        return _judge(prob, code, lang, be, stop_on_first_failure, compile_limits)
    except (SandboxError, OSError) as e:
        return JudgeResult(Verdict.SE, 0, len(prob.tests), message=str(e))
    except ValueError:  # a bad problem found late (e.g. a checker that does not compile)
        raise
    except Exception as e:  # a backend bug or a daemon hiccup is still our fault, never the model's
        log.exception("sandbox failure judging %s", prob.id)
        return JudgeResult(Verdict.SE, 0, len(prob.tests), message=f"{type(e).__name__}: {e}")


def _judge(prob: Problem, code: str, lang: Language, be: Backend, stop: bool, compile_limits: Limits) -> JudgeResult:
    limits = test_limits(prob)
    n = len(prob.tests)
    ce, runs = _run_tests(prob, code, lang, be, stop, compile_limits, limits, 0)
    if ce is not None:
        return JudgeResult(Verdict.CE, 0, n, message=ce)
    first = _first_starved(prob, runs, limits, stop)
    if first is not None:
        # A loaded host gave this test's run too little CPU to reach its CPU limit before the wall
        # clock stopped it: run it, and the tests after it, once more with a longer wall clock
        # (classify.STARVED_WALL_FACTOR), which an endless loop still ends at its CPU limit. What
        # the longer wall clock stops is TLE.
        longer = dataclasses.replace(limits, wall_s=limits.wall_s * STARVED_WALL_FACTOR)
        ce, rest = _run_tests(prob, code, lang, be, stop, compile_limits, longer, first)
        if ce is not None:
            return JudgeResult(Verdict.CE, 0, n, message=ce)
        runs = runs[:first] + rest
    tests = []
    for i, r in enumerate(runs):
        tests.append(grade_test(prob, i, r, limits))
        if stop and tests[-1].verdict is not Verdict.AC:
            break
    pending = [t.index for t in tests if t.verdict is Verdict.AC] if prob.checker is not None else []
    if pending:
        _check(prob, be, tests, {i: runs[i].stdout for i in pending}, stop)
    return summary(tests, n)


def _run_tests(
    prob: Problem,
    code: str,
    lang: Language,
    be: Backend,
    stop: bool,
    compile_limits: Limits,
    limits: Limits,
    first: int,
) -> tuple[str | None, list[RunResult]]:
    """Compile, then run tests first.. in one session: the compiler's message, or None and one run
    per test from `first` on (fewer when a failing test stopped the batch)."""
    argv, files = lang.run_argv("sol"), {}
    if prob.kind == "functional":
        argv, files = [PYTHON, "harness.py", prob.fn_name], {"harness.py": HARNESS}
    cases = prob.tests[first:]
    specs = [RunSpec(argv, limits, t.input.encode(), files if k == 0 else {}) for k, t in enumerate(cases)]
    accept = None
    if prob.checker is None:  # with a checker, a run is graded only after the batch, by the checker

        def accept(k: int, r: RunResult) -> bool:  # run k of specs: test first + k, graded as it comes back
            # graded again by the caller from the batch's final result: the one seen here may lack its
            # measured time and memory
            try:
                return grade_test(prob, first + k, r, limits).verdict is Verdict.AC
            except SandboxError:  # the caller's grading raises it; the batch stops here
                return False

    with be.session() as s:
        source = code.encode(errors="surrogatepass")
        return _compile_and_run(s, lang, "sol", source, compile_limits, specs, stop, accept)


def _first_starved(prob: Problem, runs: list[RunResult], limits: Limits, stop: bool, first: int = 0) -> int | None:
    """The test index of the first starved run (classify.starved) among those graded, or None."""
    for k, r in enumerate(runs):
        if starved(r, limits):
            return first + k
        if stop and grade_test(prob, first + k, r, limits).verdict is not Verdict.AC:
            return None  # judging ends at this test
    return None


def _compile_and_run(
    s,
    lang: Language,
    stem: str,
    source: bytes,
    limits: Limits,
    specs: list[RunSpec],
    stop: bool,
    accept: Accept | None = None,
) -> tuple[str | None, list[RunResult]]:
    """Compile in the sandbox, then run specs, in one run_many (Docker: one exec for both).
    Returns the compiler's message and no runs on failure, else None and the runs. With `stop`, a
    run of specs that `accept(index in specs, result)` rejects is the last (bwrap stops the batch
    there; Docker's runner goes on, and the extra runs are ignored)."""
    files = {lang.source(stem): source}
    argv = lang.compile_argv(stem)
    if argv is None:
        specs = [dataclasses.replace(specs[0], files={**files, **specs[0].files}), *specs[1:]]
        return None, s.run_many(specs, stop_on_failure=stop, accept=accept)
    after_compile = accept and (lambda i, r: i == 0 or accept(i - 1, r))
    runs = s.run_many(
        [RunSpec(argv, limits, files=files, writable=lang.compile_writes, required=True), *specs],
        stop_on_failure=stop,
        accept=after_compile,
    )
    r = runs[0]
    if r.status is RunStatus.ERROR:
        raise SandboxError(f"compiling: {r.message}")
    if r.status is RunStatus.OK:
        return None, runs[1:]
    if compile_starved(r, limits):  # a compiler waits on nothing: the host starved it
        raise SandboxError(
            f"compiling: stopped by the wall clock ({limits.wall_s:g} s) after {r.cpu_s:.2f} s of CPU of its "
            f"{limits.cpu_s:g} s limit: the host is too busy to compile"
        )
    if r.status is RunStatus.TIMEOUT or r.cpu_s >= limits.cpu_s:
        return "compilation exceeded its time limit", []
    return (r.stderr or r.stdout)[-2000:].decode(
        errors="replace"
    ) or f"compiler exited with {r.exit_code or r.signal}", []


def _check(prob: Problem, be: Backend, tests: list[TestResult], outputs: dict[int, bytes], stop: bool) -> None:
    """Run the problem's checker on each pending output, in its own session: the submission
    could otherwise overwrite the checker in a shared work dir."""
    lang = get_language(prob.checker.language)
    order = list(outputs)  # one batch: distinct file names per test, so all fit in one work dir
    specs = [
        RunSpec(
            lang.run_argv("checker") + [f"in{i}.txt", f"expected{i}.txt", f"out{i}.txt"],
            CHECKER_LIMITS,
            files={
                f"in{i}.txt": prob.tests[i].input.encode(),
                f"expected{i}.txt": prob.tests[i].output.encode(),
                f"out{i}.txt": outputs[i],
            },
        )
        for i in order
    ]
    with be.session() as s:
        err, runs = _compile_and_run(s, lang, "checker", prob.checker.code.encode(), COMPILE_LIMITS, specs, stop)
    if err is not None:
        raise ValueError(f"problem {prob.id!r}: the checker does not compile: {err[:500]}")
    for i, r in zip(order, runs):
        if r.status not in (RunStatus.OK, RunStatus.EXITED):
            raise SandboxError(
                f"checker of test {i} did not finish ({r.status.value}): {r.message or r.stderr[-200:]!r}"
            )
        if r.status is RunStatus.EXITED:
            tests[i].verdict = Verdict.WA
            tests[i].message = (r.stdout + r.stderr)[-300:].decode(errors="replace")
            if stop:
                del tests[i + 1 :]
                return
