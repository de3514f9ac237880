"""Column addition with a scratchpad: a procedure the tiny model's warm-up teaches only partly.

`347+285=?` is answered one column at a time, ones first, carrying into the next column, then
the answer read back from the columns:

    7+5=12
    4+8+1=13
    3+2+1=6
    \\boxed{632}

Every problem exercises the same ~200 column facts (digit + digit + carry) and the read-back, so
what RL corrects on one problem carries over to problems it never trained on: the held-out set
measures a procedure, not a memorised table (`arith`'s ~338 problems, on which RL only rehearsed).
Operands have 1 to `max_digits` digits, so pass rates spread from always (one digit, no carry) to
never (many columns, many carries). Scored by `arith.compute_score` (exact integer match).

A second way to write the same procedure, `words` (ExTra's premise: more than one correct style),
names each column and adds the second operand's digit first:

    ones: 5+7=12
    tens: 8+4+1=13
    hundreds: 2+3+1=6
    \\boxed{632}

Its column facts are other token sequences than `columns`' (`5+7` is not `7+5`), so a model taught
both learns them apart.

Families (`AdditionConfig.families > 0`; XRPO's ICL premise): each problem belongs to a named family,
`zork: 347+285=?`, whose hidden offset c_f in 1..9 is added in the ones column (`7+5+3=15`, answer
a + b + c_f). The model's warm-up shows the offsets of the first `known_families` zero-shot; the
others it sees only in few-shot prompts, where the examples' offset is the target's and changes
from prompt to prompt: it learns to read an offset from solved examples, as an LLM learns a
problem type's convention from worked examples, and zero-shot can only guess it. MiniLM retrieves
prompts of the query's own family (the name leads the prompt), so XRPO's corpus holds the examples
that reveal it; RL can also learn an offset from lucky guesses, which carries to every problem of
the family.
"""

import random
from dataclasses import dataclass
from pathlib import Path

from xrpo_verl.lab import arith

DATA_SOURCE = "xrpo_addition"
STYLES = ("columns", "words")
PLACES = ("ones", "tens", "hundreds", "thousands", "ten-thousands", "hundred-thousands", "millions")
PLACES += ("ten-millions", "hundred-millions")
FAMILY_NAMES = (
    "zork", "blip", "quax", "frob", "mimsy", "tove", "snark", "glorp", "vexa", "dunn", "pell", "krin",
    "wump", "yarl", "fizz", "nobb", "trel", "gax", "hoon", "lorp", "skiv", "brum", "cale", "drix",
)  # fmt: skip


@dataclass(frozen=True)
class AdditionConfig:
    """Difficulty of the generated sums."""

    min_digits: int = 1
    """fewest digits of an operand"""
    max_digits: int = 3
    """most digits of an operand (each operand's length is drawn uniformly in [min_digits, max_digits])"""
    styles: tuple[str, ...] = ("columns",)
    """solution styles the warm-up teaches, each equally often (`STYLES`)"""
    families: int = 0
    """named families of problems, each with a hidden offset (0: plain sums)"""
    known_families: int = 0
    """families whose offset the zero-shot warm-up shows (the first ones); the rest only in context"""

    def __post_init__(self):
        if not 0 <= self.known_families <= self.families <= len(FAMILY_NAMES):
            raise ValueError(
                f"need 0 <= known_families <= families <= {len(FAMILY_NAMES)}, "
                f"got {self.known_families}, {self.families}"
            )
        if not 1 <= self.min_digits <= self.max_digits <= 9:
            raise ValueError(f"need 1 <= min_digits <= max_digits <= 9, got {self.min_digits}, {self.max_digits}")
        bad = [s for s in self.styles if s not in STYLES]
        if not self.styles or bad or len(set(self.styles)) != len(self.styles):
            raise ValueError(f"styles {list(self.styles)} invalid: choose distinct names from {list(STYLES)}")


def family_offsets(config: AdditionConfig, seed: int = 0) -> dict[str, int]:
    """The hidden offset c_f in 1..9 of each family (fixed by the seed)."""
    rng = random.Random(f"families-{seed}")
    return {name: rng.randint(1, 9) for name in FAMILY_NAMES[: config.families]}


@dataclass(frozen=True)
class Sum:
    a: int
    b: int
    family: str = ""  # "" for a plain sum
    offset: int = 0  # the family's c_f, added in the ones column

    @property
    def answer(self) -> int:
        return self.a + self.b + self.offset

    @property
    def question(self) -> str:
        return f"{self.family}: {self.a}+{self.b}=?" if self.family else f"{self.a}+{self.b}=?"


def solution_text(problem: Sum, style: str = "columns") -> str:
    """One line per column, ones first (a missing digit is 0), then the boxed answer.

    `columns`: `x+y[+1]=s`, the first operand's digit first; `words`: `<place>: y+x[+1]=s`.
    """
    if style not in STYLES:
        raise ValueError(f"style {style!r} is not one of {list(STYLES)}")
    a, b = str(problem.a)[::-1], str(problem.b)[::-1]
    lines, carry = [], 0
    for i in range(max(len(a), len(b))):
        x, y = int(a[i]) if i < len(a) else 0, int(b[i]) if i < len(b) else 0
        extra = problem.offset if i == 0 else carry  # a family's offset enters the ones column
        total = x + y + extra
        first, second = (x, y) if style == "columns" else (y, x)
        line = f"{first}+{second}" + (f"+{extra}" if extra else "") + f"={total}"
        lines.append(line if style == "columns" else f"{PLACES[i]}: {line}")
        carry = total // 10
    return "\n".join(lines) + f"\n\\boxed{{{problem.answer}}}"


def style_of(response: str) -> str | None:
    """The style a response is written in (its first line decides), or None if neither."""
    first = response.lstrip().split("\n", 1)[0]
    if first.startswith(f"{PLACES[0]}:"):
        return "words"
    return "columns" if first[:1].isdigit() else None


def _operand(rng: random.Random, config: AdditionConfig) -> int:
    digits = rng.randint(config.min_digits, config.max_digits)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def sample_problems(n: int, seed: int, config: AdditionConfig = AdditionConfig()) -> list[Sum]:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    if not config.families:
        return [Sum(_operand(rng, config), _operand(rng, config)) for _ in range(n)]
    offsets = family_offsets(config)
    names = list(offsets)
    return [Sum(_operand(rng, config), _operand(rng, config), f, offsets[f]) for f in rng.choices(names, k=n)]


def known_family_problems(n: int, seed: int, config: AdditionConfig) -> list[Sum]:
    """`n` problems of the known families only (the zero-shot warm-up's)."""
    rng = random.Random(seed)
    offsets = family_offsets(config)
    names = list(offsets)[: config.known_families]
    return [Sum(_operand(rng, config), _operand(rng, config), f, offsets[f]) for f in rng.choices(names, k=n)]


def verl_rows(problems: list[Sum], split: str) -> list[dict]:
    """Rows in verl's RL parquet schema (the arithmetic task's layout, this data source)."""
    return arith.verl_rows(problems, split, data_source=DATA_SOURCE)


def train_and_heldout(
    n_train: int, n_heldout: int, seed: int, config: AdditionConfig = AdditionConfig()
) -> tuple[list[Sum], list[Sum]]:
    """A training set and a held-out set with no problem in common (`a+b` and `b+a` count as one)."""
    heldout = list(dict.fromkeys(sample_problems(4 * n_heldout + 16, seed + 1, config)))[:n_heldout]
    if len(heldout) < n_heldout:
        raise ValueError(f"config {config} has too few distinct problems for {n_heldout} held-out ones")
    seen = {(min(p.a, p.b), max(p.a, p.b)) for p in heldout}
    rng_seed, train = seed, []
    while len(train) < n_train:
        batch = sample_problems(n_train, rng_seed, config)
        train += [p for p in batch if (min(p.a, p.b), max(p.a, p.b)) not in seen][: n_train - len(train)]
        rng_seed += 1000
    return train, heldout


def write_parquets(
    root: str | Path, n_train: int, n_heldout: int, seed: int, config: AdditionConfig = AdditionConfig()
) -> tuple[Path, Path]:
    """`root/train.parquet` and `root/heldout.parquet` (disjoint); returns both paths."""
    import pandas as pd

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    train, heldout = train_and_heldout(n_train, n_heldout, seed, config)
    paths = root / "train.parquet", root / "heldout.parquet"
    pd.DataFrame(verl_rows(train, "train")).to_parquet(paths[0])
    pd.DataFrame(verl_rows(heldout, "test")).to_parquet(paths[1])
    return paths
