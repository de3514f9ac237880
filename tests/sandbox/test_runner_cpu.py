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
