"""Code reward: take the last fenced code block and judge it in the sandbox.

`compute_score` has verl's custom-reward signature. The problem (tests, limits, checker) comes
from `ground_truth` (a problem dict or its JSON) or else from `extra_info["problem"]`; the
converters in `xrpo_verl.data` write it to `extra_info["problem"]`.

Total over responses: any string gets a score (a non-string is scored as no code). A sandbox
error (verdict SE, or the judge raising) is retried `se_retries` times and then raised as
`SandboxFailure`: the service failing is never scored as a wrong answer. With several sandbox
URLs, a request a server refused (down, or 503) goes to the next one (sandbox/remote.py).
Verdicts: the sandbox's (AC WA TLE MLE RE CE OLE), plus `no_code` (no fenced block) and
`bad_language` (a language the sandbox does not run, or C++ for a Python function-call problem).
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Literal

from xrpo_verl.rewards.extract import last_code_block

SUPPORTED_LANGUAGES = ("python", "cpp")
REWARD_MODES = ("pass_fail", "fraction")


class SandboxFailure(RuntimeError):
    """The sandbox itself failed (SE) on every attempt."""


@dataclass(frozen=True)
class CodeRewardConfig:
    """How code responses are judged."""

    reward_mode: Literal["pass_fail", "fraction"] = "pass_fail"
    """pass_fail: 1 for AC else 0; fraction: passed tests / all tests (runs every test)"""
    backend: object = "auto"
    """sandbox backend for `sandbox.judge`: a name (auto | docker | bwrap | remote) or a `sandbox.Backend`"""
    url: str | tuple[str, ...] | None = None
    """with backend=remote: the sandbox service(s), e.g. http://127.0.0.1:8080 or a list (spread, with fail-over)"""
    protocol: Literal["xrpo", "sandboxfusion"] = "xrpo"
    """with backend=remote: our /judge API, or SandboxFusion's /run_code"""
    default_language: str = "python"
    """language assumed for a fence with no tag (our prompts ask for ```python)"""
    se_retries: int = 2
    """extra attempts after a sandbox error before raising (our choice)"""
    retry_backoff_s: float = 0.5
    """sleep before retry k is retry_backoff_s * 2**k seconds"""

    def __post_init__(self):
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode {self.reward_mode!r} is not one of {list(REWARD_MODES)}")
        if self.default_language not in SUPPORTED_LANGUAGES:
            raise ValueError(f"default_language {self.default_language!r} is not one of {list(SUPPORTED_LANGUAGES)}")
        if self.se_retries < 0:
            raise ValueError(f"se_retries must be >= 0, got {self.se_retries}")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s must be >= 0, got {self.retry_backoff_s}")
        if (self.backend == "remote") != (self.url is not None):
            raise ValueError(
                f"url is required with backend='remote' and only then; got backend={self.backend!r}, url={self.url!r}"
            )
        if isinstance(self.url, list):
            object.__setattr__(self, "url", tuple(self.url))
        if isinstance(self.url, tuple) and not (self.url and all(isinstance(u, str) for u in self.url)):
            raise ValueError(f"url must be a URL or a non-empty list of URLs, got {self.url!r}")

    def sandbox_backend(self) -> object:
        """What `sandbox.judge` takes: the name, or for remote a shared client for `url`."""
        if self.backend != "remote":
            return self.backend
        return _remote_backend(self.url, self.protocol)


DEFAULT_CONFIG = CodeRewardConfig()


@functools.cache
def _remote_backend(url: str, protocol: str):
    from sandbox import get_backend

    return get_backend("remote", url=url, protocol=protocol)


def _as_problem(value: object, where: str) -> dict | None:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} looks like JSON but does not parse: {exc}") from exc
    if isinstance(value, dict) and "tests" in value:
        return value
    return None


def resolve_problem(ground_truth: object, extra_info: dict | None) -> dict:
    """The sandbox problem dict, from `ground_truth` first, then `extra_info["problem"]`."""
    problem = _as_problem(ground_truth, "ground_truth")
    if problem is None and extra_info is not None and extra_info.get("problem") is not None:
        problem = _as_problem(extra_info["problem"], "extra_info['problem']")
    if problem is None:
        keys = sorted(extra_info) if isinstance(extra_info, dict) else None
        raise ValueError(
            "no code problem found: ground_truth is not a problem dict/JSON with 'tests' "
            f"(got {type(ground_truth).__name__}) and extra_info has no 'problem' (keys: {keys})"
        )
    if not problem["tests"]:
        raise ValueError(f"code problem {problem.get('id')!r} has no tests")
    return problem


def _result(verdict: str, score: float, reason: str = "", passed: int = 0, total: int = 0, language: str = "") -> dict:
    return {
        "score": score,
        "acc": float(verdict == "AC"),
        "pred": "",
        "verdict": verdict,
        "reason": reason,
        "passed": passed,
        "total": total,
        "language": language,
    }


def judge_with_retries(problem: dict, code: str, language: str, config: CodeRewardConfig = DEFAULT_CONFIG):
    """`sandbox.judge`, retried on SE or a raised judge error; `SandboxFailure` after the last try."""
    from sandbox import Verdict, judge

    failures = []
    for attempt in range(config.se_retries + 1):
        if attempt:
            time.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
        try:
            result = judge(
                problem,
                code,
                language,
                backend=config.sandbox_backend(),
                stop_on_first_failure=config.reward_mode == "pass_fail",
            )
        except ValueError:  # a bad problem or argument: retrying cannot help
            raise
        except Exception as exc:  # the judge failed, not the submission
            failures.append(f"{type(exc).__name__}: {exc}")
            continue
        if result.verdict != Verdict.SE:
            return result
        failures.append(f"SE: {json.dumps(result.to_dict(), default=str)[:300]}")
    raise SandboxFailure(
        f"sandbox failed {len(failures)} times on problem {problem.get('id')!r} ({language}): " + " | ".join(failures)
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: object,
    extra_info: dict | None = None,
    config: CodeRewardConfig = DEFAULT_CONFIG,
) -> dict:
    """verl custom reward for code.

    Returns:
        {"score", "acc" (1.0 iff AC), "pred" (''), "verdict", "reason", "passed", "total", "language"}
    """
    problem = resolve_problem(ground_truth, extra_info)
    total = len(problem["tests"])
    if not isinstance(solution_str, str):
        return _result("no_code", 0.0, f"the response is a {type(solution_str).__name__}, not text", total=total)
    block = last_code_block(solution_str)
    if block.code is None:
        return _result("no_code", 0.0, block.reason, total=total)
    language = block.language or config.default_language
    if language not in SUPPORTED_LANGUAGES:
        reason = f"code block language {language!r} is not one of {list(SUPPORTED_LANGUAGES)}"
        return _result("bad_language", 0.0, reason, total=total, language=language)
    if problem.get("kind") == "functional" and language != "python":
        reason = f"problem {problem.get('id')!r} is a Python function-call problem; the block is {language!r}"
        return _result("bad_language", 0.0, reason, total=total, language=language)
    result = judge_with_retries(problem, block.code, language, config)
    verdict = str(getattr(result.verdict, "value", result.verdict))
    if config.reward_mode == "fraction":
        score = result.passed / total
    else:
        score = float(verdict == "AC")
    return _result(verdict, score, passed=result.passed, total=total, language=language)
