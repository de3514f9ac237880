"""Generated arithmetic with `\\boxed{}` answers: SFT text for the tiny model and verl parquet data.

Problems are `a + b` and `a - b` with operands in [0, max_operand]; the answer is an integer.
Rows follow verl's RL schema (`data_source`, `prompt` as chat messages, `ability`,
`reward_model.ground_truth`, `extra_info`), as read by `verl.utils.dataset.RLHFDataset`.
"""

import random
import re
from dataclasses import dataclass
from pathlib import Path

DATA_SOURCE = "xrpo_arith"
OPS = ("+", "-")


@dataclass(frozen=True)
class ArithConfig:
    """Difficulty of the generated problems."""

    max_operand: int = 12
    """largest operand (inclusive), drawn uniformly from [0, max_operand] (ours: the warm-up solves some)"""
    ops: tuple[str, ...] = OPS
    """operators to draw from; allowed: '+', '-'"""

    def __post_init__(self):
        if self.max_operand < 1:
            raise ValueError(f"max_operand must be >= 1, got {self.max_operand}")
        bad = [op for op in self.ops if op not in OPS]
        if not self.ops or bad:
            raise ValueError(f"ops {list(self.ops)} invalid: choose a non-empty subset of {list(OPS)}")


@dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int

    @property
    def answer(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b

    @property
    def question(self) -> str:
        return f"{self.a}{self.op}{self.b}=?"


# Bump when solution_text changes: the tiny model's cache key includes it.
SOLUTION_FORMAT = 3


def solution_text(problem: Problem) -> str:
    """Target response of the warm-up: three lines, e.g. `3+4\n=7\n\\boxed{7}`. The newlines are
    ExTra's step boundaries; it never splits at the last one, so a prefix needs two."""
    return f"{problem.a}{problem.op}{problem.b}\n={problem.answer}\n\\boxed{{{problem.answer}}}"


def sample_problems(n: int, seed: int, config: ArithConfig = ArithConfig()) -> list[Problem]:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    hi = config.max_operand
    return [Problem(rng.randint(0, hi), rng.choice(config.ops), rng.randint(0, hi)) for _ in range(n)]


def verl_rows(problems: list, split: str, data_source: str = DATA_SOURCE) -> list[dict]:
    """Rows in verl's RL parquet schema; `problems` need `.question` and `.answer`."""
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": p.question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
            "extra_info": {"split": split, "index": i, "question": p.question},
        }
        for i, p in enumerate(problems)
    ]


# Operands far beyond the warm-up range: the tiny model fails these, so their groups are all-fail
# (what XRPO's ICL seeding and ExTra's prefixes act on) while the easy ones fill the ICL corpus.
HARD = ArithConfig(max_operand=99)


def mixed_problems(n: int, seed: int, hard_every: int, hard: ArithConfig = HARD) -> list[Problem]:
    """`n` problems where every `hard_every`-th one (1-based) is drawn from `hard`, the rest from the default."""
    if hard_every < 1:
        raise ValueError(f"hard_every must be >= 1, got {hard_every}")
    easy, harder = sample_problems(n, seed), sample_problems(n, seed + 1, hard)
    return [harder[i] if (i + 1) % hard_every == 0 else easy[i] for i in range(n)]


def write_parquet(
    path: str | Path, n: int, seed: int, split: str, config: ArithConfig = ArithConfig(), hard_every: int = 0
) -> Path:
    """Write `n` problems to a verl parquet file (every `hard_every`-th one hard; 0: none); returns the path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    problems = mixed_problems(n, seed, hard_every) if hard_every else sample_problems(n, seed, config)
    pd.DataFrame(verl_rows(problems, split)).to_parquet(path)
    return path


def boxed_answer(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (no nested braces: answers here are integers), else None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    end = text.find("}", start)
    return None if end < 0 else text[start + len("\\boxed{") : end].strip()


# One optional minus and ASCII digits: `--9`, `+9`, `٩` (str.isdigit accepts it) and `9.0` are not answers.
_INTEGER = re.compile(r"-?[0-9]+")


def parse_integer(text: str | None) -> int | None:
    """`text` as an integer if it is one written plainly (`-12`, `007`), else None; never raises."""
    if text is None or not _INTEGER.fullmatch(text):
        return None
    try:
        return int(text)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        return None


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict:
    """Exact integer match of the last boxed answer (verl custom-reward signature).

    Total over responses: any string scores 0 or 1, never raises (verl's reward loop does not
    catch a scorer's exception, so one odd sample would end the run). A ground truth that is not
    an integer is a data bug and raises `ValueError`.
    A stand-in for `xrpo_verl.rewards.math` that needs no verifier processes; for these
    integer answers exact match and math-verify agree.
    """
    expected = parse_integer(str(ground_truth).strip())
    if expected is None:
        raise ValueError(f"arithmetic ground truth must be an integer, got {ground_truth!r}")
    answer = boxed_answer(solution_str) if isinstance(solution_str, str) else None
    correct = parse_integer(answer) == expected
    return {"score": float(correct), "acc": float(correct), "formatted": float(answer is not None)}
