"""The runner's CPU time of a run stopped by the wall clock counts the children it never reaped."""

import sys

from sandbox import runner


def test_a_wall_clock_kill_keeps_the_cpu_of_the_killed_children():
    # a shell that waits on a busy child, as g++ waits on cc1plus: the kill reaps neither
    busy = f"{sys.executable} -c 'while True: pass'; exit 0"  # a second command: sh must fork
    r = runner.run_capped(["/bin/sh", "-c", busy], b"", wall_s=2.0, max_output=1 << 16)
    assert r["wall_s"] >= 2.0
    assert r["cpu_s"] >= 0.05  # the child's; the shell itself used next to none
    assert runner.group_cpu_s(2**22 + 12345) == 0.0  # a group that does not exist


def test_a_wall_clock_kill_keeps_the_cpu_of_children_in_a_session_of_their_own():
    """bwrap runs its command under --new-session: the compiler is a descendant, not a group member.
    The child spins for 3 s, so it outlives the 2 s wall clock by itself and then exits."""
    spin = f"{sys.executable} -c 'import time; t = time.time()\nwhile time.time() - t < 3: pass'"
    r = runner.run_capped(["/bin/sh", "-c", f"setsid {spin}; exit 0"], b"", wall_s=2.0, max_output=1 << 16)
    assert r["wall_s"] >= 2.0
    assert r["cpu_s"] >= 0.05  # the child's, though it left the group
