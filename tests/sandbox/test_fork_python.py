"""Python tests run in children forked from the batch runner (`runner.run_python`, the backends'
`fork_python`), not in new interpreters. A program must not be able to tell, by anything a judge
looks at: each program here runs both ways and the results are compared field by field, and the
expected values are written out by hand as well."""

from __future__ import annotations

import pytest

from sandbox import Limits, RunSpec
from sandbox.languages import PYTHON
from sandbox.runner import forkable_python
from sandbox.verdict import RunStatus

LIM = Limits(cpu_s=2, wall_s=5, memory_mb=256, max_output_bytes=1 << 20)

# name: (source, stdin, expected (status, exit code, stdout), the end of stderr)
PROGRAMS = {
    "sum": ("print(sum(map(int, input().split())))", b"3 4\n", ("ok", 0, b"7\n"), ""),
    "read_all": ("import sys\nd = sys.stdin.read().split()\nprint(len(d), d[-1])", b"3 4\n", ("ok", 0, b"2 4\n"), ""),
    "exit_3": ("import sys\nprint('x')\nsys.exit(3)", b"", ("exited", 3, b"x\n"), ""),
    "exit_message": ("import sys\nsys.exit('bad thing')", b"", ("exited", 1, b""), "bad thing\n"),
    "uncaught": ("def f():\n    raise ValueError('boom')\nf()", b"", ("exited", 1, b""), "ValueError: boom\n"),
    "eof": ("input()\ninput()", b"1\n", ("exited", 1, b""), "EOFError: EOF when reading a line\n"),
    "syntax": ("print(1", b"", ("exited", 1, b""), "SyntaxError: '(' was never closed\n"),
    "thread_joined": (
        # the thread prints only after the main thread has printed and is about to end
        "import threading, time\n"
        "printed = threading.Event()\n"
        "def w():\n    printed.wait()\n    time.sleep(0.05)\n    print('late')\n"
        "threading.Thread(target=w).start()\nprint('early')\nprinted.set()",
        b"",
        ("ok", 0, b"early\nlate\n"),
        "",
    ),
    "atexit": ("import atexit\natexit.register(lambda: print('bye'))\nprint('hi')", b"", ("ok", 0, b"hi\nbye\n"), ""),
    "no_newline": ("import sys\nprint('e', file=sys.stderr)\nprint('out', end='')", b"", ("ok", 0, b"out"), "e\n"),
    "os_exit_unflushed": ("import os\nprint('lost')\nos._exit(5)", b"", ("exited", 5, b""), ""),
    "names": (
        "import os, sys\nprint(sys.argv, __name__, __file__, sys.path[0], os.getcwd(), sorted(os.environ))",
        b"",
        ("ok", 0, b"['sol.py'] __main__ /work/sol.py /work /work ['HOME', 'LANG', 'PATH']\n"),
        "",
    ),
    "main_guard_pickle": (
        "import pickle\nclass A: pass\nif __name__ == '__main__':\n    print(type(pickle.loads(pickle.dumps(A()))).__name__)",
        b"",
        ("ok", 0, b"A\n"),
        "",
    ),
    "unicode": ("print(input()[::-1])", "é✓\n".encode(), ("ok", 0, "✓é\n".encode()), ""),
    "deep_recursion": (
        "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return 0 if n == 0 else 1 + f(n - 1)\nprint(f(50000))",
        b"",
        ("ok", 0, b"50000\n"),
        "",
    ),
    "memory_error": ("x = bytearray(600 << 20)", b"", ("exited", 1, b""), "MemoryError\n"),
    "fork": (
        "import os\np = os.fork()\nprint('c' if p == 0 else 'p', flush=True)\np and os.waitpid(p, 0)",
        b"",
        None,
        "",
    ),
    "closed_stdout": ("import os\nos.close(1)\nprint('x')", b"", ("exited", 120, b""), "Bad file descriptor\n"),
}
CHECK = [PYTHON, "-c", "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')", "sol.py"]


def _lines(name: str, stdout: bytes) -> bytes:
    """stdout, with its lines sorted where two processes race to print them ("fork")."""
    return b"".join(sorted(stdout.splitlines(True))) if name == "fork" else stdout


def _run_all(backend, monkeypatch, fork: bool) -> dict:
    monkeypatch.setattr(backend.config, "fork_python", fork)
    out = {}
    for name, (source, stdin, _, _) in PROGRAMS.items():
        with backend.session() as s:
            check, run = s.run_many(
                [RunSpec(CHECK, LIM, files={"sol.py": source.encode()}), RunSpec([PYTHON, "sol.py"], LIM, stdin=stdin)],
                stop_on_failure=False,
            )
        out[name] = [
            (r.status.value, r.exit_code, r.signal, _lines(name, r.stdout), r.stderr.decode()) for r in (check, run)
        ]
    return out


def test_forked_programs_behave_as_new_interpreters(backend, monkeypatch):
    forked, executed = _run_all(backend, monkeypatch, True), _run_all(backend, monkeypatch, False)
    for name, (_, _, expected, stderr_end) in PROGRAMS.items():
        assert forked[name] == executed[name], name
        check, run = forked[name]
        if name == "syntax":  # the syntax check is CE's source: it fails, with python3's message
            assert check[:2] == ("exited", 1) and check[4].endswith(stderr_end), check
            continue
        assert check[:2] == ("ok", 0), (name, check)
        if expected is not None:
            assert run[:2] + (run[3],) == expected, (name, run)
        assert run[4].endswith(stderr_end), (name, run[4])
        assert "runner.py" not in run[4] and "runpy" not in run[4], (name, run[4])
    assert forked["fork"][1][3] == b"c\np\n"
    assert forked["uncaught"][1][4].startswith('Traceback (most recent call last):\n  File "/work/sol.py", line 3')


def test_the_fork_server_is_what_runs_them(backend, monkeypatch):
    """The switch is not inert: a forked program is the runner's child without an exec, so its
    command line is the runner's."""
    cmdline = "print(open('/proc/self/cmdline').read().replace(chr(0), ' '))"
    seen = {}
    for fork in (True, False):
        monkeypatch.setattr(backend.config, "fork_python", fork)
        with backend.session() as s:
            (r,) = s.run_many([RunSpec([PYTHON, "-c", cmdline], LIM)], stop_on_failure=True)
        assert r.status is RunStatus.OK, r.message
        seen[fork] = r.stdout.decode()
    assert "import runner" in seen[True] and "print(open(" not in seen[True], seen  # runner.runner_command's
    assert "import runner" not in seen[False] and seen[False].startswith(f"{PYTHON} -c print(open("), seen


@pytest.mark.parametrize(
    ("argv", "forkable"),
    [
        ([PYTHON, "sol.py"], True),
        ([PYTHON, "harness.py", "solve"], True),
        ([PYTHON, "-c", "pass", "x"], True),
        ([PYTHON, "-c"], False),
        ([PYTHON, "-u", "sol.py"], False),
        ([PYTHON], False),
        (["./sol"], False),
        (["/usr/bin/python3.99", "sol.py"], False),
    ],
)
def test_forkable_python(argv, forkable):
    assert forkable_python(argv, PYTHON) is forkable
