"""Judge untrusted Python and C++ solutions in Docker or bubblewrap, with LiveCodeBench and
Codeforces grading rules. Standalone: no torch, no verl.

    from sandbox import judge
    result = judge(problem, code, "python")   # result.verdict is a Verdict: AC WA TLE MLE RE CE OLE SE
"""

from .backends import Backend, RunSpec, Session, get_backend
from .judges.grader import judge
from .problem import Checker, Problem, TestCase
from .remote import RemoteJudge
from .verdict import JudgeResult, Limits, RunResult, RunStatus, SandboxError, TestResult, Verdict

__all__ = [
    "Backend",
    "Checker",
    "JudgeResult",
    "Limits",
    "Problem",
    "RemoteJudge",
    "RunResult",
    "RunSpec",
    "RunStatus",
    "SandboxError",
    "Session",
    "TestCase",
    "TestResult",
    "Verdict",
    "get_backend",
    "judge",
]
