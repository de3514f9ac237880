"""The one failure classifier: how a run that did not exit 0 is judged (used by the local judge,
the SandboxFusion transport and the /run_code endpoint)."""

from __future__ import annotations

import signal

from ..verdict import Limits, RunResult, RunStatus, Verdict

CPU_KILL_FRACTION = 0.5
"""A SIGKILL after at least this share of the CPU limit is the limit's kill (TLE). The kernel checks
RLIMIT_CPU against tick-charged time, which on a loaded host charges a whole tick to whichever task
is running when it falls, while the rusage we read is the precise run time: a busy loop killed at
its limit has shown 0.9 and then 0.8 of it in CI as the load grew. Half the limit is still no
self-kill's of an ordinary program, and TLE and RE score alike."""

BUSY_CPU_SHARE = 0.1
"""A run the wall clock stopped is *starved* when it was computing (its CPU time is at least this
share of its wall time) but still under its CPU limit: on a loaded host its CPU went to other
processes. A program that sleeps or waits on nothing uses almost no CPU, so it stays below this
share and is TLE at the first wall clock whatever the load."""

STARVED_CPU_FRACTION = 0.8
"""A run the wall clock stopped with at least this share of its CPU limit used is TLE, not starved:
it was about to reach the limit, and a rerun would only spend the wall clock again."""

STARVED_WALL_FACTOR = 1 / (2 * BUSY_CPU_SHARE)
"""How much more wall clock the judge gives a starved run, once; what that stops is TLE. The wall
is more than twice the CPU limit (`scoring.test_limits`), so a run that gets BUSY_CPU_SHARE of a CPU
again reaches its CPU limit within the longer wall: an endless loop is still TLE, and a correct
program finishes."""

COMPILE_STARVED_FRACTION = 0.5
"""A compile the wall clock stopped with less CPU time than this share of its CPU cap was starved by
the host: a compiler has nothing to wait on, so the wall clock is only reached on a loaded host.
That is a sandbox failure (SE, retried), never CE; a compile that used its CPU is CE."""

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


def starved(r: RunResult, limits: Limits) -> bool:
    """The wall clock stopped a run that was computing, short of its CPU limit (BUSY_CPU_SHARE)."""
    return (
        r.status is RunStatus.TIMEOUT
        and r.cpu_s < STARVED_CPU_FRACTION * limits.cpu_s
        and r.cpu_s >= BUSY_CPU_SHARE * r.wall_s
    )


def compile_starved(r: RunResult, limits: Limits) -> bool:
    """The wall clock stopped a compile well short of its CPU cap (COMPILE_STARVED_FRACTION)."""
    return r.status is RunStatus.TIMEOUT and r.cpu_s < COMPILE_STARVED_FRACTION * limits.cpu_s
