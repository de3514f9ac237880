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
Timing, for the trainer's per-step sandbox metrics (`sandbox_metrics.py`): `sandbox_s` (seconds in
`sandbox.judge`, all attempts), `sandbox_start` / `sandbox_end` (wall-clock epoch seconds around
them) and `attempts` (judge calls; more than one means a sandbox error was retried). A row that
never reached the sandbox has all four at 0.

A program is judged once per problem (`VerdictMemo`): a group's rollouts often write the same
program, more so as the policy sharpens, and its verdict on the same tests is the same. A row whose
program was already judged, or is being judged for another row, takes that verdict with
`memo_hit` 1 and no sandbox time of its own. TLE is not kept (it depends on the machine's load at
the time), nor is a sandbox failure (it is raised, for every row that waited on it).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

from xrpo_verl.config import Config, option
from xrpo_verl.rewards.extract import last_code_block
from xrpo_verl.rewards.result import CODE_VERDICTS, ScoreResult

SUPPORTED_LANGUAGES = ("python", "cpp")
REWARD_MODES = ("pass_fail", "fraction")


class SandboxFailure(RuntimeError):
    """The sandbox itself failed (SE) on every attempt."""


@dataclass(frozen=True)
class CodeRewardConfig(Config):
    """How code responses are judged."""

    reward_mode: Literal["pass_fail", "fraction"] = option(
        "pass_fail", "pass_fail: 1 for AC, else 0; fraction: tests passed / tests (runs every test). [I]"
    )
    backend: object = option(
        "auto",
        "Sandbox for `sandbox.judge`: auto, docker, bwrap or remote (a remote judge), or a `sandbox.Backend`. [I]",
    )
    url: str | tuple[str, ...] | None = option(
        None,
        "backend=remote: the sandbox server(s), e.g. http://127.0.0.1:8080, or a list (spread, with fail-over). [I]",
    )
    protocol: Literal["xrpo", "sandboxfusion"] = option(
        "xrpo", "backend=remote: our /judge API, or SandboxFusion's /run_code. [I]"
    )
    default_language: str = option("python", "Language of a fence with no tag (our prompts ask for ```python). [I]")
    se_retries: int = option(2, "Extra attempts after a sandbox error before the run stops (never scored 0). [I]")
    retry_backoff_s: float = option(0.5, "Sleep before retry k: retry_backoff_s * 2**k seconds. [I]")
    memo_size: int = option(
        4096, "Verdicts of distinct (problem, program) pairs a process keeps; an identical program is judged once. [I]"
    )
    backend_options: dict[str, object] = option(
        help="backend=bwrap or docker: the local sandbox's settings (BwrapConfig or DockerConfig fields, e.g. "
        "uid_base, uid_span, lock_dir, work_root); empty keeps its defaults. [I]",
        factory=dict,
    )

    def __post_init__(self):
        self._check_fields()
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode {self.reward_mode!r} is not one of {list(REWARD_MODES)}")
        if self.default_language not in SUPPORTED_LANGUAGES:
            raise ValueError(f"default_language {self.default_language!r} is not one of {list(SUPPORTED_LANGUAGES)}")
        if self.se_retries < 0:
            raise ValueError(f"se_retries must be >= 0, got {self.se_retries}")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s must be >= 0, got {self.retry_backoff_s}")
        if self.memo_size < 0:
            raise ValueError(f"memo_size must be >= 0 (0: judge every row), got {self.memo_size}")
        if (self.backend == "remote") != (self.url is not None):
            raise ValueError(
                f"url is required with backend='remote' and only then; got backend={self.backend!r}, url={self.url!r}"
            )
        if isinstance(self.url, list):
            object.__setattr__(self, "url", tuple(self.url))
        if isinstance(self.url, tuple) and not (self.url and all(isinstance(u, str) for u in self.url)):
            raise ValueError(f"url must be a URL or a non-empty list of URLs, got {self.url!r}")
        if not isinstance(self.backend_options, Mapping):
            raise ValueError(f"backend_options must be a mapping, got {type(self.backend_options).__name__}")
        object.__setattr__(self, "backend_options", dict(self.backend_options))
        if self.backend_options:
            if self.backend not in ("bwrap", "docker"):
                raise ValueError(f"backend_options need backend='bwrap' or 'docker', got backend={self.backend!r}")
            _local_backend_config(self.backend, self.backend_options)  # raises on an unknown or bad option

    def sandbox_backend(self) -> object:
        """What `sandbox.judge` takes: the name, or the process's backend built with `backend_options`,
        or for remote a shared client for `url`."""
        if self.backend == "remote":
            return _remote_backend(self.url, self.protocol)
        if self.backend_options:
            return _configured_backend(self.backend, json.dumps(self.backend_options, sort_keys=True))
        return self.backend

    def check_service(self, timeout_s: float = 10.0) -> None:
        """With backend=remote, raise `SandboxFailure` (one line: which servers, how to start one)
        unless every server in `url` answers; nothing to check for a local backend. Called at
        start-up (the reward manager, `recipes/launch.py`), so a missing service stops the run before
        its first step rather than failing every row of it."""
        if self.backend != "remote":
            return
        silent = _remote_backend(self.url, self.protocol).silent(timeout_s)
        if silent:
            raise SandboxFailure(
                f"sandbox server(s) not answering: {', '.join(silent)}; start one on each node with "
                "`bash recipes/code/start_sandbox.sh --port PORT` (or `python -m sandbox serve --host 0.0.0.0 "
                "--port PORT`), or point reward.reward_kwargs.code.url (SANDBOX_URLS in the recipes) at running ones"
            )


DEFAULT_CONFIG = CodeRewardConfig()


def _local_backend_config(name: str, options: dict) -> object:
    """The sandbox's BwrapConfig or DockerConfig from `options`; ValueError names a bad one."""
    if name == "bwrap":
        from sandbox.backends.bwrap import BwrapConfig as cls
    else:
        from sandbox.backends.docker import DockerConfig as cls
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown backend_options {unknown} for backend={name!r}; known: {sorted(known)}")
    return cls(**options)


@functools.cache
def _configured_backend(name: str, options_json: str):
    """One backend per process and (name, options), as `sandbox.get_backend` keeps one per name."""
    from sandbox import get_backend

    return get_backend(name, **json.loads(options_json))


@functools.cache
def _remote_backend(url: str | tuple[str, ...], protocol: str):
    """One RemoteJudge per (url, protocol), shared by a worker's judge calls (its round robin)."""
    from sandbox import RemoteJudge

    return RemoteJudge(url, protocol=protocol)


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


# the verdicts this scorer gives; listed with the result schema, which the step metrics read
VERDICTS = CODE_VERDICTS


@dataclass(frozen=True)
class JudgeOutcome:
    """A judge result with the time the sandbox took (all attempts) and how many attempts."""

    result: object
    """`sandbox.JudgeResult` of the last attempt (never SE)"""
    seconds: float
    """time inside `sandbox.judge`, summed over attempts (retry backoff excluded)"""
    start: float
    """epoch seconds when the first attempt began"""
    end: float
    """epoch seconds when the last attempt returned"""
    attempts: int
    """judge calls made (1 + retries)"""


def _result(verdict: str, score: float, reason: str = "", **details) -> dict:
    """The row's result; acc is 1.0 only for AC (every test passed), whatever a partial score says."""
    return ScoreResult(score=score, acc=float(verdict == "AC"), verdict=verdict, reason=reason, **details).to_dict()


def judge_with_retries(
    problem: dict, code: str, language: str, config: CodeRewardConfig = DEFAULT_CONFIG
) -> JudgeOutcome:
    """`sandbox.judge`, retried on SE or a raised judge error; `SandboxFailure` after the last try."""
    from sandbox import Verdict, judge

    failures = []
    seconds, start = 0.0, time.time()
    for attempt in range(config.se_retries + 1):
        if attempt:
            time.sleep(config.retry_backoff_s * 2 ** (attempt - 1))
        tic = time.perf_counter()
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
            seconds += time.perf_counter() - tic
            failures.append(f"{type(exc).__name__}: {exc}")
            continue
        seconds += time.perf_counter() - tic
        if result.verdict != Verdict.SE:
            return JudgeOutcome(result, seconds, start, time.time(), attempt + 1)
        failures.append(f"SE: {json.dumps(result.to_dict(), default=str)[:300]}")
    raise SandboxFailure(
        f"sandbox failed {len(failures)} times on problem {problem.get('id')!r} ({language}): " + " | ".join(failures)
    )


# Verdicts that depend on the program and the tests only; TLE depends on the machine's load too.
MEMO_VERDICTS = frozenset({"AC", "WA", "CE", "RE", "MLE", "OLE"})


class VerdictMemo:
    """Verdicts of the programs judged so far, least recently used dropped beyond `size`.

    `judge(key, run)` returns `(outcome, hit)`: a kept verdict; or, while another thread judges the
    same key, that thread's verdict once it is back (if it is one to keep, else this row is judged
    itself); or `run()`'s, kept if its verdict is in `MEMO_VERDICTS`. A `run()` that raises raises
    in every thread waiting on it.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[str, JudgeOutcome] = OrderedDict()
        self._running: dict[str, Future] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def judge(self, key: str, run) -> tuple[JudgeOutcome, bool]:
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key], True
            running = self._running.get(key)
            if running is None:
                running = self._running[key] = Future()
                owner = True
            else:
                owner = False
        if not owner:
            outcome = running.result()  # raises what the judging thread raised
            if _verdict(outcome) in MEMO_VERDICTS:
                return outcome, True
            return run(), False
        try:
            outcome = run()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            running.set_exception(exc)
            raise
        with self._lock:
            del self._running[key]
            if _verdict(outcome) in MEMO_VERDICTS and self.size:
                self._kept[key] = outcome
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        running.set_result(outcome)
        return outcome, False


def _verdict(outcome: JudgeOutcome) -> str:
    return str(getattr(outcome.result.verdict, "value", outcome.result.verdict))


@functools.cache
def _memo(size: int) -> VerdictMemo:
    """One memo per process and size: the reward worker's rows share it across steps."""
    return VerdictMemo(size)


def memo_key(problem: dict, code: str, language: str, config: CodeRewardConfig) -> str:
    """What decides a verdict: the problem (tests, limits, checker), the program, its language, the
    sandbox that judges it (its toolchain), and whether judging stops at the first failed test
    (pass_fail) or runs them all (fraction)."""
    backend = (
        config.backend if isinstance(config.backend, str) else f"{type(config.backend).__name__}@{id(config.backend)}"
    )
    text = json.dumps(
        [problem, code, language, config.reward_mode, backend, config.url, config.backend_options],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: object,
    extra_info: dict | None = None,
    config: CodeRewardConfig = DEFAULT_CONFIG,
) -> dict:
    """verl custom reward for code.

    Returns:
        `ScoreResult.to_dict()`: acc is 1.0 iff AC; with reward_mode=fraction the score is the share of
        tests passed, so a partial pass scores > 0 with acc 0.
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
    judge_row = functools.partial(judge_with_retries, problem, block.code, language, config)
    if config.memo_size:
        key = memo_key(problem, block.code, language, config)
        outcome, memo_hit = _memo(config.memo_size).judge(key, judge_row)
    else:
        outcome, memo_hit = judge_row(), False
    result, verdict = outcome.result, _verdict(outcome)
    if config.reward_mode == "fraction":
        score = result.passed / total
    else:
        score = float(verdict == "AC")
    return _result(
        verdict,
        score,
        passed=result.passed,
        total=total,
        language=language,
        # a memo hit ran nothing: the sandbox time is the row that was judged
        sandbox_s=0.0 if memo_hit else outcome.seconds,
        sandbox_start=0.0 if memo_hit else outcome.start,
        sandbox_end=0.0 if memo_hit else outcome.end,
        attempts=0 if memo_hit else outcome.attempts,
        memo_hit=float(memo_hit),
    )
