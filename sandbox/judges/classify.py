"""The one failure classifier: how a run that did not exit 0 is judged (used by the local judge,
the SandboxFusion transport and the /run_code endpoint)."""

from __future__ import annotations

import signal

from ..verdict import Limits, RunResult, RunStatus, Verdict

CPU_KILL_FRACTION = 0.8
"""A SIGKILL after at least this share of the CPU limit is the limit's kill (TLE): on a loaded
machine the CPU time accounted to a busy loop killed at its limit can fall short of the limit, as
seen in CI; a share this high is still no other kill's."""

RUNTIME_SLACK_MB = 64
"""Added to the problem's memory limit for the address-space cap: the interpreter and libc map
memory they never touch, and RLIMIT_AS counts it."""


def run_verdict(r: RunResult, limits: Limits) -> Verdict | None:
    """The verdict a finished run already decides, or None when it exited 0 and needs comparing."""
    if r.status is RunStatus.ERROR:
        return Verdict.SE
    if r.status is RunStatus.OK:
        return None
    # RLIMIT_CPU kills with SIGKILL (SIGXCPU first for non-init processes); the rusage we read is
    # accounted apart from the limit's tick-sampled clock, so a kill at the limit may show less.
    cpu_kill = r.signal in (signal.SIGKILL, signal.SIGXCPU) and r.cpu_s >= CPU_KILL_FRACTION * limits.cpu_s
    if r.status is RunStatus.TIMEOUT or r.cpu_s >= limits.cpu_s or cpu_kill:
        return Verdict.TLE
    if r.status is RunStatus.OUTPUT_LIMIT:
        return Verdict.OLE
    tail = r.stderr[-4096:]
    # RLIMIT_AS makes Python raise MemoryError and C++ throw std::bad_alloc.
    # A SIGKILL at the memory limit is an out-of-memory kill (Docker's or a memory cgroup's).
    oom_kill = r.signal == signal.SIGKILL and r.memory_mb >= limits.memory_mb - RUNTIME_SLACK_MB
    if b"MemoryError" in tail or b"std::bad_alloc" in tail or oom_kill:
        return Verdict.MLE
    return Verdict.RE
