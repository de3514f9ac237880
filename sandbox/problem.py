"""The problem format (JSON) and its validation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

JUDGES = ("livecodebench", "codeforces")
KINDS = ("stdio", "functional")
LANGUAGES = ("python", "cpp")
_KEYS = {"id", "judge", "kind", "fn_name", "tests", "time_limit_s", "memory_mb", "checker"}


@dataclass(frozen=True)
class TestCase:
    input: str
    """stdin text, or for functional problems one JSON-encoded argument per line."""
    output: str
    """Expected stdout, or for functional problems the JSON-encoded return value."""


@dataclass(frozen=True)
class Checker:
    language: Literal["python", "cpp"]
    """Language of the checker program."""
    code: str
    """Source; it gets input, expected and produced output paths as argv[1..3] and exits 0 to accept."""


@dataclass(frozen=True)
class Problem:
    id: str
    """Problem identifier, used in error messages."""
    judge: Literal["livecodebench", "codeforces"]
    """Comparison rules: LiveCodeBench's exact rules, or Codeforces' normalised diff / checker."""
    kind: Literal["stdio", "functional"]
    """stdin/stdout program, or a LeetCode-style `Solution().<fn_name>(*args)` call (LiveCodeBench only)."""
    tests: tuple[TestCase, ...]
    """Test cases, judged in order."""
    fn_name: str | None = None
    """Method to call for functional problems."""
    time_limit_s: float = 6.0
    """CPU seconds per test; 6 s is LiveCodeBench's default `--timeout`."""
    memory_mb: int = 1024
    """Address-space cap per test in MiB; Codeforces problems give their own (usually 256)."""
    checker: Checker | None = field(default=None)
    """Checker program for problems with many valid answers (Codeforces only); None: normalised diff."""

    @classmethod
    def from_dict(cls, d: dict) -> Problem:
        """Validate a JSON problem; raise ValueError naming the problem and the bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"problem must be a JSON object, got {type(d).__name__}")
        pid = d.get("id")
        name = f"problem {pid!r}"
        if not isinstance(pid, str) or not pid:
            raise ValueError(f"{name}: 'id' must be a non-empty string")
        unknown = set(d) - _KEYS
        if unknown:
            raise ValueError(f"{name}: unknown keys {sorted(unknown)}; allowed: {sorted(_KEYS)}")
        judge, kind = d.get("judge"), d.get("kind")
        if judge not in JUDGES:
            raise ValueError(f"{name}: judge {judge!r} is not one of {JUDGES}")
        if kind not in KINDS:
            raise ValueError(f"{name}: kind {kind!r} is not one of {KINDS}")
        fn_name = d.get("fn_name")
        if kind == "functional":
            if judge != "livecodebench":
                raise ValueError(f"{name}: functional problems are LiveCodeBench only, got judge {judge!r}")
            if not isinstance(fn_name, str) or not fn_name.isidentifier():
                raise ValueError(f"{name}: functional problems need fn_name as a Python identifier, got {fn_name!r}")
        tests = d.get("tests")
        if not isinstance(tests, list) or not tests:
            raise ValueError(f"{name}: 'tests' must be a non-empty list of {{input, output}} objects")
        cases = []
        for i, t in enumerate(tests):
            if not isinstance(t, dict) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
                raise ValueError(f"{name}: test {i} must be an object with string 'input' and 'output', got {t!r:.80}")
            cases.append(TestCase(t["input"], t["output"]))
        time_limit = d.get("time_limit_s", cls.time_limit_s)
        if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not 0 < time_limit <= 60:
            raise ValueError(f"{name}: time_limit_s must be in (0, 60] seconds, got {time_limit!r}")
        memory = d.get("memory_mb", cls.memory_mb)
        if isinstance(memory, float) and memory.is_integer():
            memory = int(memory)  # Codeforces data stores MB as floats
        if isinstance(memory, bool) or not isinstance(memory, int) or not 16 <= memory <= 16384:
            raise ValueError(f"{name}: memory_mb must be an integer in [16, 16384], got {memory!r}")
        return cls(
            pid, judge, kind, tuple(cases), fn_name, float(time_limit), memory, _checker(name, judge, d.get("checker"))
        )

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "judge": self.judge,
            "kind": self.kind,
            "fn_name": self.fn_name,
            "tests": [{"input": t.input, "output": t.output} for t in self.tests],
            "time_limit_s": self.time_limit_s,
            "memory_mb": self.memory_mb,
            "checker": None if self.checker is None else {"language": self.checker.language, "code": self.checker.code},
        }


def _checker(name: str, judge: str, c: object) -> Checker | None:
    if c is None:
        return None
    if judge != "codeforces":
        raise ValueError(f"{name}: a checker is only used with judge 'codeforces', got judge {judge!r}")
    if not isinstance(c, dict):
        raise ValueError(f"{name}: checker must be null or {{language, code}}, got {c!r:.80}")
    if c.get("language") not in LANGUAGES:
        raise ValueError(f"{name}: checker language {c.get('language')!r} is not one of {LANGUAGES}")
    code = c.get("code")
    if not isinstance(code, str) or not code.strip():
        raise ValueError(f"{name}: checker code is missing or empty")
    return Checker(c["language"], code)


def as_problem(problem: Problem | dict) -> Problem:
    if isinstance(problem, Problem):
        return problem
    return Problem.from_dict(problem)
