"""A tiny code task: short stdin/stdout Python programs, judged in the sandbox on hidden tests.

Two families, each stated by the expression to print:

    Read a and b. Print a*b+3.          ->  a,b=map(int,input().split())
                                            print(a*b+3)
    Read a list x. Print max(x)+4.      ->  x=list(map(int,input().split()))
                                            print(max(x)+4)

The answer is a fenced ```python block; the reward is the sandbox's verdict on 4 hidden tests
generated from the statement (1 for AC, else 0). Problems are the sandbox's LiveCodeBench stdin
format (`judge=livecodebench`, `kind=stdio`, the shape `xrpo_verl.data.code_sets` writes) and
rows carry it in `extra_info["problem"]` with `ground_truth` = its id, as the converters do.
Problems with the same behaviour (`a+b+3`, `b+a+3`) count as one, so train and held-out sets
share no program. The tiny model's warm-up (`xrpo_verl.lab.tiny_model`, task `code`) teaches
the pattern partly: sampled programs pass on some problems, never on others.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

DATA_SOURCE = "code/tiny"
PAIR_READ = "a,b=map(int,input().split())"
LIST_READ = "x=list(map(int,input().split()))"
OPS = ("+", "-", "*")
LIST_FUNCS = ("sum", "max", "min", "len")
TAIL_OPS = ("%", "//")
TESTS_PER_PROBLEM = 4
TIME_LIMIT_S = 2.0
MEMORY_MB = 256
# Bump when statements, solutions or tests change: the tiny model's cache key includes it.
CODE_FORMAT = 1


@dataclass(frozen=True)
class CodeConfig:
    """Which tiny code problems exist (the corpus of the warm-up and of the RL sets)."""

    max_constant: int = 9
    """constants 1..max_constant in `a*b+3`-style expressions and `max(x)+c` (0 too for lists)"""
    tail_ops: tuple[str, ...] = ()
    """operators of the hard tail (`%`, `//`): pair problems `a%c+b`, `b//c*a`, ... (c in 2..max_constant)"""
    tail_share: float = 0.0
    """share of the tail in the warm-up's problems (`sample_problems`): rare there, so rarely solved after"""

    def __post_init__(self):
        if not 1 <= self.max_constant <= 99:
            raise ValueError(f"max_constant must be in [1, 99], got {self.max_constant}")
        if not set(self.tail_ops) <= set(TAIL_OPS):
            raise ValueError(f"tail_ops must be among {TAIL_OPS}, got {self.tail_ops}")
        if not 0 <= self.tail_share < 1 or (self.tail_share and not self.tail_ops):
            raise ValueError(f"tail_share must be in [0, 1), and > 0 only with tail_ops; got {self.tail_share}")


@dataclass(frozen=True)
class CodeProblem:
    family: str
    """'pair' (read a and b) or 'list' (read a line of integers x)"""
    expr: str
    """the Python expression to print, over a, b or x; `*sorted(x)` prints the items"""

    @property
    def id(self) -> str:
        return f"tiny/{self.family}/{self.expr}"

    @property
    def question(self) -> str:
        if self.family == "pair":
            return f"Read a and b. Print {self.expr}."
        return f"Read a list x. Print {self.expr}."

    @property
    def code(self) -> str:
        return f"{PAIR_READ if self.family == 'pair' else LIST_READ}\nprint({self.expr})"

    @property
    def answer(self) -> str:
        """The reference response (what the warm-up teaches)."""
        return solution_text(self)


def solution_text(problem: CodeProblem) -> str:
    return f"```python\n{problem.code}\n```"


def _evaluate(problem: CodeProblem, values: list[int]) -> str:
    """Expected stdout for one input: our own generated expression, evaluated here (trusted)."""
    env = {"sum": sum, "max": max, "min": min, "len": len, "sorted": sorted}
    if problem.family == "pair":
        env.update(a=values[0], b=values[1])
    else:
        env["x"] = values
    if problem.expr.startswith("*"):  # print(*items): the items separated by spaces
        return " ".join(map(str, eval(problem.expr[1:], {"__builtins__": {}}, env))) + "\n"
    return f"{eval(problem.expr, {'__builtins__': {}}, env)}\n"


def _inputs(problem: CodeProblem, k: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    if problem.family == "pair":
        return [[rng.randint(-9, 20), rng.randint(-9, 20)] for _ in range(k)]
    return [[rng.randint(0, 20) for _ in range(rng.randint(2, 6))] for _ in range(k)]


def problem_dict(problem: CodeProblem, tests_per_problem: int = TESTS_PER_PROBLEM) -> dict:
    """The sandbox problem (LiveCodeBench stdin format) with hidden tests drawn from the statement."""
    seed = zlib.crc32(problem.id.encode())
    tests = [
        {"input": " ".join(map(str, values)) + "\n", "output": _evaluate(problem, values)}
        for values in _inputs(problem, tests_per_problem, seed)
    ]
    return {
        "id": problem.id,
        "judge": "livecodebench",
        "kind": "stdio",
        "fn_name": None,
        "tests": tests,
        "time_limit_s": TIME_LIMIT_S,
        "memory_mb": MEMORY_MB,
        "checker": None,
    }


def all_problems(config: CodeConfig = CodeConfig()) -> list[CodeProblem]:
    """Every problem once per behaviour (probed on fixed inputs), in a fixed order."""
    candidates = []
    for c in range(1, config.max_constant + 1):
        for o1 in OPS:
            for o2 in OPS:
                for x, y, z in (("a", "b", c), ("b", "a", c), ("a", c, "b"), (c, "a", "b")):
                    candidates.append(CodeProblem("pair", f"{x}{o1}{y}{o2}{z}"))
    for f in LIST_FUNCS:
        candidates += [CodeProblem("list", f"{f}(x)" + (f"+{c}" if c else "")) for c in range(config.max_constant + 1)]
    candidates += [CodeProblem("list", "*sorted(x)"), CodeProblem("list", "*x[::-1]")]
    # the tail comes last, so the common problems keep their order and a tail problem that behaves
    # like a common one counts as the common one
    for op in config.tail_ops:
        for c in range(2, config.max_constant + 1):
            for o2 in OPS:
                candidates += [CodeProblem("pair", f"a{op}{c}{o2}b"), CodeProblem("pair", f"b{op}{c}{o2}a")]
    probes = {"pair": _inputs(CodeProblem("pair", ""), 8, 0), "list": _inputs(CodeProblem("list", ""), 8, 0)}
    seen, out = set(), []
    for p in candidates:
        signature = (p.family, tuple(_evaluate(p, v) for v in probes[p.family]))
        if signature not in seen:
            seen.add(signature)
            out.append(p)
    return out


def sample_problems(n: int, seed: int, config: CodeConfig = CodeConfig()) -> list[CodeProblem]:
    """`n` problems drawn with replacement (the warm-up's and the tokenizer's corpus): uniformly, or
    with the tail at `config.tail_share` and the rest uniformly."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    pool = all_problems(config)
    rng = random.Random(seed)
    if not config.tail_ops:
        return [rng.choice(pool) for _ in range(n)]
    tail = [p for p in pool if in_tail(p)]
    common = [p for p in pool if not in_tail(p)]
    return [rng.choice(tail if rng.random() < config.tail_share else common) for _ in range(n)]


def in_tail(problem: CodeProblem) -> bool:
    """Whether `problem` is one of the hard tail's (`CodeConfig.tail_ops`)."""
    return any(op in problem.expr for op in TAIL_OPS)


def train_and_heldout(
    n_heldout: int, seed: int, config: CodeConfig = CodeConfig()
) -> tuple[list[CodeProblem], list[CodeProblem]]:
    """All problems split in two disjoint sets: `n_heldout` held out, the rest for training."""
    pool = all_problems(config)
    if not 0 < n_heldout < len(pool):
        raise ValueError(f"n_heldout must be in (0, {len(pool)}), got {n_heldout}")
    random.Random(seed).shuffle(pool)
    return pool[n_heldout:], pool[:n_heldout]


def planted_problems() -> list[CodeProblem]:
    """Problems whose hidden tests contradict their statement (`a+b+1` stated, `a+b+2` tested).

    Every program that does what the statement says gets WA on them: the end-to-end test plants
    them to check that a wrong program is scored 0 however plausible it looks.
    """
    return [CodeProblem("pair", "a+b+1"), CodeProblem("list", "max(x)")]


def planted_problem_dict(problem: CodeProblem) -> dict:
    honest = problem_dict(problem)
    tests = [{"input": t["input"], "output": f"{int(t['output']) + 1}\n"} for t in honest["tests"]]
    return {**honest, "id": f"planted/{problem.id}", "tests": tests}


def verl_rows(problems: list[CodeProblem], split: str, planted: bool = False) -> list[dict]:
    """Rows in verl's RL parquet schema, shaped like `xrpo_verl.data.schema.code_row`'s."""
    from sandbox import Problem

    rows = []
    for i, p in enumerate(problems):
        problem = planted_problem_dict(p) if planted else problem_dict(p)
        Problem.from_dict(problem)  # validated as the converters do
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": p.question}],
                "ability": "code",
                "reward_model": {"style": "rule", "ground_truth": problem["id"]},
                "extra_info": {
                    "index": i,
                    "split": split,
                    "id": problem["id"],
                    "question": p.question,
                    "problem": json.dumps(problem, sort_keys=True),
                },
            }
        )
    return rows


def write_parquets(
    root: str | Path, n_heldout: int, seed: int, config: CodeConfig = CodeConfig(), n_train: int | None = None
) -> tuple[Path, Path]:
    """`root/train.parquet` (the first `n_train` training problems; None: all) and `root/heldout.parquet`."""
    import pandas as pd

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    train, heldout = train_and_heldout(n_heldout, seed, config)
    paths = root / "train.parquet", root / "heldout.parquet"
    pd.DataFrame(verl_rows(train[:n_train], "train")).to_parquet(paths[0])
    pd.DataFrame(verl_rows(heldout, "test")).to_parquet(paths[1])
    return paths
