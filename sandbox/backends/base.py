"""The backend interface: run one command with files, stdin and limits inside a sandbox.

A `Session` is one submission's private work dir (`/work` inside the sandbox), held on one warm
worker (a bwrap uid slot, or a pooled container) from compilation to its last test.
"""

from __future__ import annotations

import contextlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from ..runner import create_nofollow
from ..verdict import Limits, RunResult, RunStatus

WORK = "/work"  # the work dir's path inside every sandbox


@dataclass
class RunSpec:
    """One process to run in a session."""

    argv: list[str]
    """Command inside the sandbox; relative paths resolve in /work."""
    limits: Limits = field(default_factory=Limits)
    """Caps for this process."""
    stdin: bytes = b""
    """Bytes fed to stdin."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Files written into /work before the run (relative paths: no leading '/', no '.' or '..')."""
    writable: bool = False
    """Whether what the run writes to /work must persist for the session's later runs (a compiler's
    output). Every run may write /work; other runs' writes may be discarded after their batch."""
    required: bool = False
    """run_many stops after this run when it fails, whatever stop_on_failure says (a compilation)."""
    fetch: tuple[str, ...] = ()
    """Files of /work returned after the run (RunResult.files); missing ones are left out."""

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise ValueError(f"argv must be a non-empty list of strings, got {self.argv!r}")
        for name in [*self.files, *self.fetch]:
            if not is_relative_path(name):
                raise ValueError(f"file name {name!r} must be a relative path inside /work (no '.', '..', '//')")


def is_relative_path(name: object) -> bool:
    """A path below /work: relative, no empty, '.' or '..' component, no NUL."""
    if not isinstance(name, str) or not name or "\0" in name or len(name) > 255:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


# accept(index in run_many's specs, result): False when that run already fails its test
Accept = Callable[[int, RunResult], bool]


class Session(ABC):
    """One submission's sandbox: a private /work shared by its runs, on one worker."""

    @abstractmethod
    def run(self, spec: RunSpec) -> RunResult:
        """Run one process; a failure of the sandbox itself comes back as status ERROR."""

    def run_many(self, specs: list[RunSpec], stop_on_failure: bool, accept: Accept | None = None) -> list[RunResult]:
        """Run specs in order, stopping after the first run that does not exit 0 when asked
        (or when that run is `required`), or, with `stop_on_failure`, the first that
        `accept(index, result)` rejects (a wrong answer the caller graded as the batch went)."""
        results = []
        for i, spec in enumerate(specs):
            results.append(self.run(spec))
            if stops(spec, results[-1], stop_on_failure) or rejected(accept, i, results[-1], stop_on_failure):
                break
        return results


def rejected(accept: Accept | None, index: int, result: RunResult, stop_on_failure: bool) -> bool:
    """Whether run_many stops after this run because the caller graded it a failure."""
    return stop_on_failure and accept is not None and not accept(index, result)


def stops(spec: RunSpec, result: RunResult, stop_on_failure: bool) -> bool:
    """Whether a batch ends after this run."""
    return result.status is not RunStatus.OK and (stop_on_failure or spec.required)


class Backend(ABC):
    """A sandbox kind. Thread-safe: `session()` may be entered from many threads at once."""

    name: str = ""

    @abstractmethod
    def session(self) -> contextlib.AbstractContextManager[Session]:
        """A fresh session on a warm worker; blocks while all workers are busy."""

    def close(self) -> None:  # noqa: B027 (a backend without warm workers has nothing to release)
        """Release warm workers (containers, dirs)."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_file_nofollow(directory: str, name: str, data: bytes, mode: int = 0o644) -> None:
    """Create directory/name (name may hold subdirectories) without following a symlink the
    sandboxed code may have planted there."""
    with os.fdopen(create_nofollow(directory, name, mode), "wb") as f:
        f.write(data)


class RunnerReport:
    """The in-sandbox batch runner's JSON lines (runner.main), read back into RunResults."""

    def __init__(self) -> None:
        self.results: list[RunResult] = []
        self.begun = -1  # index of the last step the runner started

    def feed(self, line: bytes) -> bool:
        """Take one line; True when it announced the start of a step."""
        msg = json.loads(line)
        if "begin" in msg:
            self.begun = msg["begin"]
            return True
        msg.pop("result")
        self.results.append(RunResult.from_wire(msg))
        return False

    def stop_after_last(self) -> None:
        """The host ended the batch after the last result: no step is left half-reported."""
        self.begun = len(self.results) - 1

    @property
    def interrupted(self) -> bool:
        """A step started but never reported: the runner died or hung mid-step."""
        return self.begun >= len(self.results)

    def finish(self, killed: bool, runner_stderr: bytes) -> list[RunResult]:
        """The results, ending with why the batch stopped when a step never reported."""
        if self.interrupted:
            if killed:
                self.results.append(RunResult(RunStatus.TIMEOUT, message="the runner stopped responding"))
            elif b"Traceback" in runner_stderr:
                err = runner_stderr[-500:].decode(errors="replace")
                self.results.append(RunResult(RunStatus.ERROR, message=f"runner failed: {err}"))
            else:  # the submission killed its runner (it runs under the same uid)
                self.results.append(
                    RunResult(RunStatus.SIGNALED, signal=9, message="the program killed the judge's runner")
                )
        return self.results
