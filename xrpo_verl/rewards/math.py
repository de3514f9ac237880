"""Math reward: extract the final answer, verify it against the ground truth with math-verify.

`compute_score` has verl's custom-reward signature. It is safe in threads and Ray actors:
math-verify runs in worker processes with math-verify's own `signal.alarm` timeouts disabled,
and a call past `timeout_s` kills its worker (see `_verify_pool`).

Verdicts: `correct`, `wrong`, `no_answer` (nothing extracted), `unparsable` (extracted but
math-verify finds no expression), `timeout` (verification ran past `timeout_s`), `verify_error`
(math-verify raised or its worker died on this answer; the reason says how). Only `correct`
scores 1. Any response string gets a verdict, never an exception: verl's reward loop does not
catch one, so a single odd sample would end a training run. A malformed ground truth raises
`ValueError`: it is a data bug, not a wrong answer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from xrpo_verl.config import Config, option
from xrpo_verl.rewards._verify_pool import WorkerDied, WorkerTimeout, get_pool
from xrpo_verl.rewards.extract import ANSWER_FORMATS, extract_answer
from xrpo_verl.rewards.result import ScoreResult

VERDICTS = ("correct", "wrong", "no_answer", "unparsable", "timeout", "verify_error")


@dataclass(frozen=True)
class MathRewardConfig(Config):
    """How math responses are read and verified."""

    answer_formats: tuple[str, ...] = option(
        ("boxed",),
        "Answer formats tried in order: boxed, answer_tag, hash, answer_line (our prompts ask for \\boxed{}). [I]",
    )
    timeout_s: float = option(
        10.0, "Wall-clock limit of one parse + verify of a response, seconds (math-verify's own is 5 s a step). [I]"
    )
    num_workers: int = option(
        help="math-verify worker processes per scoring process; default min(4, CPUs). [I]",
        factory=lambda: max(1, min(4, os.cpu_count() or 1)),
    )

    def __post_init__(self):
        self._check_fields()
        if not self.answer_formats:
            raise ValueError(f"answer_formats is empty; choose from {list(ANSWER_FORMATS)}")
        bad = [f for f in self.answer_formats if f not in ANSWER_FORMATS]
        if bad:
            raise ValueError(f"unknown answer_formats {bad}; allowed: {list(ANSWER_FORMATS)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")


DEFAULT_CONFIG = MathRewardConfig()


def ground_truth_text(ground_truth: object) -> str:
    """The ground truth as text; ints and floats are accepted, anything else raises `ValueError`."""
    if isinstance(ground_truth, bool) or not isinstance(ground_truth, (str, int, float)):
        raise ValueError(
            f"math ground truth must be str, int or float, got {type(ground_truth).__name__}: {ground_truth!r}"
        )
    text = str(ground_truth).strip()
    if not text:
        raise ValueError("math ground truth is empty")
    return text


def _result(verdict: str, pred: str = "", reason: str = "") -> dict:
    correct = float(verdict == "correct")
    return ScoreResult(score=correct, acc=correct, pred=pred, verdict=verdict, reason=reason).to_dict()


def verify_answer(pred: str, ground_truth: object, config: MathRewardConfig = DEFAULT_CONFIG) -> dict:
    """Verify an already extracted answer `pred` (e.g. `"\\frac{1}{2}"`) against the ground truth."""
    gold = ground_truth_text(ground_truth)
    try:
        reply = get_pool(config.num_workers).call({"gold": gold, "pred": pred}, config.timeout_s)
    except WorkerTimeout:
        return _result("timeout", pred, f"math-verify took longer than {config.timeout_s} s")
    except WorkerDied as exc:  # the answer crashed the verifier (the pool replaces the worker)
        return _result("verify_error", pred, str(exc))
    status = reply["status"]
    if status == "bad_gold":
        raise ValueError(reply["reason"])
    if status == "error":
        return _result("verify_error", pred, f"math-verify raised on this answer: {reply['reason']}")
    if status == "no_parse":
        return _result("unparsable", pred, reply["reason"])
    return _result("correct" if reply["correct"] else "wrong", pred)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: object,
    extra_info: dict | None = None,
    config: MathRewardConfig = DEFAULT_CONFIG,
) -> dict:
    """verl custom reward: 1.0 if the response's final answer equals `ground_truth`, else 0.0.

    Returns:
        `ScoreResult.to_dict()`: pred is the extracted answer or '', verdict one of VERDICTS.
    """
    if not isinstance(solution_str, str):
        raise ValueError(f"solution_str must be str, got {type(solution_str).__name__}")
    found = extract_answer(solution_str, config.answer_formats)
    if found.text is None:
        # Still parse the ground truth (against an empty answer): a malformed one must raise here too.
        checked = verify_answer("", ground_truth, config)
        return {**checked, **_result("no_answer", reason=found.reason)}
    return verify_answer(found.text, ground_truth, config)
