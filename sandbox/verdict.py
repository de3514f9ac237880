"""The closed verdict set and the result records shared by backends, judges and the CLI."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from enum import Enum

from .runner import decode_files


class Verdict(str, Enum):
    """Outcome of one test or of a whole submission (DMOJ's set, plus SE for our own failures)."""

    AC = "AC"  # accepted
    WA = "WA"  # wrong answer
    TLE = "TLE"  # time limit exceeded (CPU or wall)
    MLE = "MLE"  # memory limit exceeded
    RE = "RE"  # runtime error: non-zero exit or a fatal signal
    CE = "CE"  # compilation error (or the compiler ran past its own limits)
    OLE = "OLE"  # output limit exceeded
    SE = "SE"  # sandbox error: the judge failed, not the submission; callers may retry


class RunStatus(str, Enum):
    """How one sandboxed process ended, before any judging."""

    OK = "ok"  # exit status 0
    EXITED = "exited"  # non-zero exit status (a signal shows as 128+n under bwrap's pid 1)
    SIGNALED = "signaled"  # killed by a signal that we can see directly
    TIMEOUT = "timeout"  # the wall-clock timer fired and we killed it
    OUTPUT_LIMIT = "output_limit"  # stdout passed the byte cap and we killed it
    ERROR = "error"  # the sandbox itself failed; `message` says why


@dataclass
class Limits:
    """Resource caps for one sandboxed process."""

    cpu_s: float = 2.0
    """CPU seconds (RLIMIT_CPU, rounded up to whole seconds; TLE when reached)."""
    wall_s: float = 6.0
    """Wall-clock seconds before the whole process tree is killed (TLE)."""
    memory_mb: int = 256
    """Address-space cap in MiB (RLIMIT_AS); MLE when the program hits it."""
    max_processes: int = 64
    """Processes and threads the sandbox uid may hold (RLIMIT_NPROC, or the pids cgroup)."""
    max_output_bytes: int = 32 << 20
    """Bytes of stdout kept before the run is killed as OLE."""
    max_file_mb: int = 64
    """Largest file the process may write, in MiB (RLIMIT_FSIZE)."""

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s", "memory_mb", "max_processes", "max_output_bytes", "max_file_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class RunResult:
    """What a backend reports for one process."""

    status: RunStatus
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    memory_mb: float = 0.0
    """Peak memory in MiB: under bwrap the growth of the slot's memory cgroup during the run (memory
    it allocated or newly cached), under Docker ru_maxrss (at least the runner's own few MiB)."""
    message: str = ""
    """Why a sandbox error happened; empty otherwise."""
    files: dict[str, bytes] = field(default_factory=dict)
    """The files of /work asked for with RunSpec.fetch, as they were after the run."""

    def to_wire(self) -> dict:
        """A JSON-safe dict (stdout/stderr base64-encoded), for the runner and the remote backend."""
        d = dict(self.__dict__)
        d["status"] = self.status.value
        d["stdout"] = base64.b64encode(self.stdout).decode()
        d["stderr"] = base64.b64encode(self.stderr).decode()
        d["files"] = {k: base64.b64encode(v).decode() for k, v in self.files.items()}
        return d

    @classmethod
    def from_wire(cls, d: dict) -> RunResult:
        d = dict(d)
        d["status"] = RunStatus(d["status"])
        d["stdout"] = base64.b64decode(d["stdout"])
        d["stderr"] = base64.b64decode(d["stderr"])
        files = d.get("files") or {}
        d["files"] = (
            decode_files(files) if isinstance(files, str) else {k: base64.b64decode(v) for k, v in files.items()}
        )
        return cls(**d)


@dataclass
class TestResult:
    """The verdict of one test case, with what it cost."""

    index: int
    verdict: Verdict
    time_s: float = 0.0
    """CPU seconds used by the solution."""
    wall_s: float = 0.0
    memory_mb: float = 0.0
    exit_code: int | None = None
    message: str = ""
    """A short reason: the first differing line, the error tail, or the sandbox failure."""

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "verdict": self.verdict.value,
            "time_s": round(self.time_s, 4),
            "wall_s": round(self.wall_s, 4),
            "memory_mb": round(self.memory_mb, 2),
            "exit_code": self.exit_code,
            "message": self.message,
        }


@dataclass
class JudgeResult:
    """The verdict of a submission: the first failing test's verdict, or AC."""

    verdict: Verdict
    passed: int
    total: int
    tests: list[TestResult] = field(default_factory=list)
    message: str = ""
    """Compiler output for CE, the failure for SE; empty otherwise."""

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "tests": [t.to_dict() for t in self.tests],
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, d: dict) -> JudgeResult:
        tests = [TestResult(**{**t, "verdict": Verdict(t["verdict"])}) for t in d.get("tests", [])]
        return cls(Verdict(d["verdict"]), int(d["passed"]), int(d["total"]), tests, d.get("message", ""))


class SandboxError(RuntimeError):
    """The sandbox could not run the program; judged as SE, never as WA."""
