"""Every verdict on both backends, for Python and C++, and all three judges plus checkers."""

from __future__ import annotations

import pytest

from sandbox import Verdict, judge

AB = {
    "id": "a-plus-b",
    "judge": "livecodebench",
    "kind": "stdio",
    "time_limit_s": 1,
    "memory_mb": 128,
    "tests": [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 7\n", "output": "12"},
        {"input": "-4 4\n", "output": "0"},
    ],
}

PY = {
    Verdict.AC: "a, b = map(int, input().split())\nprint(a + b)",
    Verdict.WA: "a, b = map(int, input().split())\nprint(a - b)",
    Verdict.TLE: "while True:\n    pass",
    Verdict.MLE: "x = bytearray(1 << 30)",
    Verdict.RE: "a, b = map(int, input().split())\nprint(a // (b - b))",
    Verdict.CE: "def f(:\n    pass",
    Verdict.OLE: "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
}
CPP = {
    Verdict.AC: "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<'\\n';}",
    Verdict.WA: "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<'\\n';}",
    Verdict.TLE: "int main(){volatile unsigned long x=0; for(;;) x++;}",
    Verdict.MLE: "#include <vector>\nint main(){std::vector<char> v(1u<<30, 1); return v[7];}",
    Verdict.RE: "int main(){volatile int *p = nullptr; *p = 1; return 0;}",
    Verdict.CE: "int main() { return undeclared; }",
    Verdict.OLE: "#include <cstdio>\nint main(){static char b[1<<16]; for(auto&c:b) c='x'; for(;;) fwrite(b,1,sizeof b,stdout);}",
}


@pytest.mark.parametrize("language, verdict", [("python", v) for v in PY] + [("cpp", v) for v in CPP])
def test_every_verdict(backend, language, verdict):
    code = (PY if language == "python" else CPP)[verdict]
    r = judge(AB, code, language, backend=backend)
    assert r.verdict is verdict, r.to_dict()
    assert r.total == 3
    if verdict is Verdict.AC:
        assert r.passed == 3 and [t.verdict for t in r.tests] == [Verdict.AC] * 3
        # measured, not left at 0; a trivial C++ run's CPU time can fall below the clock's resolution
        assert all(t.wall_s > 0 and t.time_s >= 0 and t.memory_mb > 0 for t in r.tests)
    elif verdict is Verdict.CE:
        assert r.tests == [] and r.message
    else:  # stops at the first failing test
        assert r.passed == 0 and len(r.tests) == 1 and r.tests[0].verdict is verdict


def test_run_all_tests_when_asked(backend):
    code = "a, b = map(int, input().split())\nprint(3 if a == 1 else a + b + 1)"  # only test 0 passes
    r = judge(AB, code, "python", backend=backend, stop_on_first_failure=False)
    assert (r.verdict, r.passed, [t.verdict for t in r.tests]) == (Verdict.WA, 1, [Verdict.AC, Verdict.WA, Verdict.WA])


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_a_wrong_answer_stops_the_batch_where_it_is_graded(bwrap_backend, begun_steps, language):
    """A WA on test 0 ends the submission's batch there: bubblewrap's runner never starts test 1
    (the host grades each output as it comes back), while every test still runs when all are asked."""
    code = (PY if language == "python" else CPP)[Verdict.WA]
    r = judge(AB, code, language, backend=bwrap_backend)
    assert (r.verdict, r.passed, len(r.tests)) == (Verdict.WA, 0, 1)
    # Python: one batch, its compile check then test 0; C++: g++ runs in a sandbox of its own
    assert begun_steps == ([0, 1] if language == "python" else [0])
    begun_steps.clear()
    r = judge(AB, code, language, backend=bwrap_backend, stop_on_first_failure=False)
    assert (r.verdict, len(r.tests)) == (Verdict.WA, 3)
    assert len(begun_steps) == (4 if language == "python" else 3)


THREADED = {
    "python": "import threading\nout = []\nts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]\n"
    "[t.start() for t in ts]; [t.join() for t in ts]\na, b = map(int, input().split())\nprint(a + b)",
    "cpp": "#include <bits/stdc++.h>\nint main(){long a,b;std::cin>>a>>b;long s=0;std::thread t([&]{s=a+b;});t.join();std::cout<<s<<'\\n';}",
}


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_correct_solution_that_starts_threads_is_accepted(backend, language):
    """Thread stacks come from RLIMIT_STACK; a stack cap equal to the memory cap made them fail (RE)."""
    r = judge(AB, THREADED[language], language, backend=backend)
    assert r.verdict is Verdict.AC, r.to_dict()


def test_deep_recursion_within_the_memory_cap_is_legal(backend):
    code = (
        "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return 0 if n == 0 else 1 + f(n - 1)\n"
        "a, b = map(int, input().split())\nprint(a + b + f(100000) - 100000)"
    )
    r = judge(AB, code, "python", backend=backend)
    assert r.verdict is Verdict.AC, r.to_dict()


FUNCTIONAL = {
    "id": "two-sum",
    "judge": "livecodebench",
    "kind": "functional",
    "fn_name": "twoSum",
    "time_limit_s": 2,
    "tests": [{"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]"}, {"input": "[3, 3]\n6", "output": "[0, 1]"}],
}


@pytest.mark.parametrize(
    "code, verdict",
    [
        # A tuple result compares equal to the JSON list; typing names come from LCB's prelude.
        (
            "class Solution:\n    def twoSum(self, nums: List[int], t: int):\n        print('debug')\n"
            "        seen = {}\n        for i, x in enumerate(nums):\n            if t - x in seen:\n"
            "                return (seen[t - x], i)\n            seen[x] = i",
            Verdict.AC,
        ),
        ("class Solution:\n    def twoSum(self, nums, t):\n        return [1, 0]", Verdict.WA),
        ("class Solution:\n    def twoSum(self, nums, t):\n        return {0, 1}", Verdict.WA),  # not JSON: never equal
        ("class Solution:\n    def twoSum(self, nums, t):\n        return nums[99]", Verdict.RE),
    ],
)
def test_livecodebench_functional(backend, code, verdict):
    r = judge(FUNCTIONAL, code, "python", backend=backend)
    assert r.verdict is verdict, r.to_dict()


CF = {
    "id": "cf-yes-no",
    "judge": "codeforces",
    "kind": "stdio",
    "time_limit_s": 1,
    "memory_mb": 256,
    "tests": [{"input": "4\n", "output": "YES\n2 2\n"}, {"input": "3\n", "output": "NO\n"}],
}


def test_codeforces_normalised_diff(backend):
    ok = (
        "n = int(input())\nprint('yes' if n % 2 == 0 else 'No')\nif n % 2 == 0:\n    print(n // 2, '  ', n // 2, '\\r')"
    )
    assert judge(CF, ok, "python", backend=backend).verdict is Verdict.AC
    # The same output under LiveCodeBench's rules is wrong: case matters there.
    assert judge({**CF, "judge": "livecodebench", "id": "lcb"}, ok, "python", backend=backend).verdict is Verdict.WA


SUM_CHECKER_PY = """import sys
n = int(open(sys.argv[1]).read())
a, b = map(int, open(sys.argv[3]).read().split())
sys.exit(0 if a + b == n and a > 0 and b > 0 else 1)
"""
SUM_CHECKER_CPP = """#include <fstream>
int main(int argc, char** argv){ std::ifstream in(argv[1]), out(argv[3]); long n, a, b;
  in >> n; if(!(out >> a >> b)) return 1; return (a + b == n && a > 0 && b > 0) ? 0 : 1; }"""
SPLIT = {
    "id": "cf-split",
    "judge": "codeforces",
    "kind": "stdio",
    "time_limit_s": 1,
    "memory_mb": 256,
    "tests": [{"input": "5\n", "output": "1 4\n"}, {"input": "10\n", "output": "5 5\n"}],
}


@pytest.mark.parametrize("checker_lang, checker", [("python", SUM_CHECKER_PY), ("cpp", SUM_CHECKER_CPP)])
def test_codeforces_checker_accepts_any_valid_answer(backend, checker_lang, checker):
    problem = {**SPLIT, "checker": {"language": checker_lang, "code": checker}}
    other_valid = "n = int(input())\nprint(2, n - 2)"  # differs from the expected output
    r = judge(problem, other_valid, "python", backend=backend)
    assert (r.verdict, r.passed) == (Verdict.AC, 2), r.to_dict()
    r = judge(problem, "n = int(input())\nprint(0, n)", "python", backend=backend)
    assert (r.verdict, r.passed, len(r.tests)) == (Verdict.WA, 0, 1)
    second_wrong = "n = int(input())\nprint(*((2, n - 2) if n < 8 else (0, n)))"
    r = judge(problem, second_wrong, "python", backend=backend)  # the checkers of a submission run as one batch
    assert [t.verdict for t in r.tests] == [Verdict.AC, Verdict.WA] and r.passed == 1, r.to_dict()
    r = judge(
        {**problem, "tests": problem["tests"][::-1]},
        second_wrong,
        "python",
        backend=backend,
        stop_on_first_failure=False,
    )
    assert [t.verdict for t in r.tests] == [Verdict.WA, Verdict.AC] and r.verdict is Verdict.WA, r.to_dict()


def test_checker_that_does_not_compile_is_a_bad_problem(bwrap_backend):
    problem = {**SPLIT, "checker": {"language": "cpp", "code": "int main( {"}}
    with pytest.raises(ValueError, match="checker does not compile"):
        judge(problem, "print(1, 4)", "python", backend=bwrap_backend)
