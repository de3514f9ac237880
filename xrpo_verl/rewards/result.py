"""The one schema of a scorer's result: what every row's `reward_extra_info` carries.

verl builds its reward columns from the first row's keys, so every row of a batch must carry the
same keys with the same types: math rows, code rows, and a custom scorer's rows (a float, or a dict
with a `score`) alike. `ScoreResult` is that schema; the math and code scorers build one, and the
reward manager reduces whatever a scorer returns to it (`ScoreResult.of`).

`acc` is the scorer's own verdict of full correctness, verl's convention: 1.0 for a verified
correct answer (math) or an accepted program (code, AC: every test passed), else 0.0, whatever the
`score` (a partial-credit program may score 0.25 and still have acc 0). A verified success
(`is_success`) is acc >= 1; the trainer counts one only from it, never from the score.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from xrpo_verl.config import option


@dataclass(frozen=True)
class ScoreResult:
    """A scored response; the keys and types of its `reward_extra_info`."""

    score: float = option(help="The reward the policy is trained on.")
    acc: float = option(
        help="1.0 iff verified fully correct (math: the answer verified equal; code: AC); "
        "a custom float scorer's score."
    )
    pred: str = option("", "The extracted final answer (math), '' otherwise.")
    verdict: str = option(
        "", "The scorer's verdict: math `correct`/`wrong`/..., code AC/WA/.../no_code; '' for a custom scorer."
    )
    reason: str = option("", "Why the verdict, when it is not the plain one (no answer found, a time-out, ...).")
    passed: int = option(0, "Code: tests passed.")
    total: int = option(0, "Code: tests of the problem.")
    language: str = option("", "Code: the language of the judged block.")
    sandbox_s: float = option(
        0.0, "Code: seconds inside the sandbox, all attempts (0 for a row that never reached it)."
    )
    sandbox_start: float = option(0.0, "Code: wall-clock epoch seconds when the first attempt began.")
    sandbox_end: float = option(0.0, "Code: wall-clock epoch seconds when the last attempt returned.")
    attempts: int = option(0, "Code: judge calls (more than one: a sandbox error was retried).")
    memo_hit: float = option(
        0.0, "Code: 1.0 when the verdict is that of the same program judged for another row (no sandbox run)."
    )
    received_at: float = option(
        0.0, "Epoch seconds when the reward manager received the response, just after its generation ended."
    )

    @classmethod
    def of(cls, result) -> ScoreResult:
        """A scorer's return value (a number, or a dict with at least `score`) as a ScoreResult."""
        if not isinstance(result, dict):
            score = float(result)
            return cls(score=score, acc=score)
        if "score" not in result:
            raise ValueError(f"scorer returned a dict without 'score': keys {sorted(result)}")
        score = float(result["score"])
        given = {name: cast(result[name]) for name, cast in _CASTS.items() if name in result and name != "score"}
        return cls(score=score, **{"acc": score, **given})

    def to_dict(self) -> dict:
        return asdict(self)


# field -> the type its value is cast to (annotations are strings under `from __future__ import annotations`)
_CASTS = {f.name: {"float": float, "int": int, "str": str}[f.type] for f in fields(ScoreResult)}
RESULT_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ScoreResult))
SUCCESS_ACC = 1.0
# Verdicts a code row can get (SE never reaches a score: it is retried, then raised).
CODE_VERDICTS = ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE", "SE", "no_code", "bad_language")


def is_success(acc: float) -> bool:
    """A verified success: the scorer's acc says fully correct (never a partial score)."""
    return acc >= SUCCESS_ACC
