"""Math dataset converters: one `MathSet` per upstream dataset, all sharing `convert_math`.

Each set names its hub location and the upstream columns holding the question and the answer.
A record missing those columns, or whose answer cannot be extracted, raises `RowError` naming
the record: nothing is skipped. Output order is input order, so conversions are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm

from xrpo_verl.data.schema import DAPO_PREFIX, DAPO_SUFFIX, RowError, math_row
from xrpo_verl.data.sources import read_records
from xrpo_verl.rewards.extract import last_boxed


def _field(record: dict, names: tuple[str, ...], where: str):
    for name in names:
        if name in record and record[name] is not None:
            return record[name]
    raise RowError(f"{where}: none of the columns {list(names)} is present (has {sorted(record)})")


def _plain(value) -> str:
    """An answer cell as text: ints as digits, `$...$` math delimiters removed."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"answer must be text or a number, got {type(value).__name__}: {value!r:.80}")
    text = str(value).strip()
    if len(text) >= 2 and text[0] == "$" and text[-1] == "$":
        text = text.strip("$").strip()
    return text


def answer_from_column(names: tuple[str, ...]) -> Callable[[dict, str], str]:
    def get(record: dict, where: str) -> str:
        return _plain(_field(record, names, where))

    return get


def answer_after_hash(record: dict, where: str) -> str:
    """GSM8K: the solution ends with `#### 72`; thousands separators are dropped."""
    solution = _field(record, ("answer",), where)
    if "####" not in solution:
        raise RowError(f"{where}: GSM8K answer has no '####' line: {solution[-80:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def answer_from_boxed_solution(record: dict, where: str) -> str:
    """MATH train: the answer is the last \\boxed{} of the reference solution."""
    found = last_boxed(_field(record, ("solution",), where))
    if found.text is None:
        raise RowError(f"{where}: cannot take the answer from the solution: {found.reason}")
    return found.text


def answer_from_list(record: dict, where: str) -> str:
    """OlympiadBench: `final_answer` is a list of LaTeX strings; several answers are joined by ', '."""
    value = _field(record, ("final_answer", "answer"), where)
    items = value if isinstance(value, (list, tuple)) else [value]
    return ", ".join(_plain(v) for v in items)


def dapo_question(record: dict, where: str) -> str:
    """DAPO-Math-17k stores the question inside its own instruction; take it back out."""
    prompt = _field(record, ("prompt",), where)
    text = prompt[0]["content"] if isinstance(prompt, (list, tuple)) else prompt
    if not (text.startswith(DAPO_PREFIX) and text.endswith(DAPO_SUFFIX)):
        raise RowError(f"{where}: prompt does not have DAPO-Math-17k's instruction around the question")
    return text[len(DAPO_PREFIX) : -len(DAPO_SUFFIX)]


def dapo_answer(record: dict, where: str) -> str:
    return _plain(_field(record, ("reward_model",), where)["ground_truth"])


def question_from_column(names: tuple[str, ...]) -> Callable[[dict, str], str]:
    def get(record: dict, where: str) -> str:
        return _field(record, names, where)

    return get


@dataclass(frozen=True)
class MathSet:
    """One upstream math dataset."""

    repo: str
    """hub dataset id"""
    config: str | None
    """hub config name (None: default)"""
    split: str
    """hub split holding the data"""
    question: Callable[[dict, str], str]
    """upstream record -> question text"""
    answer: Callable[[dict, str], str]
    """upstream record -> ground-truth answer text"""
    id_column: str | None = None
    """upstream id column (None: the row index)"""


_Q = question_from_column(("problem", "question", "Problem", "Question"))
_A = answer_from_column(("answer", "Answer"))
MATH_SETS: dict[str, MathSet] = {
    "dapo_math_17k": MathSet("BytedTsinghua-SIA/DAPO-Math-17k", None, "train", dapo_question, dapo_answer),
    "math_train": MathSet("DigitalLearningGmbH/MATH-lighteval", "default", "train", _Q, answer_from_boxed_solution),
    "math500": MathSet("HuggingFaceH4/MATH-500", None, "test", _Q, _A, "unique_id"),
    "gsm8k": MathSet("openai/gsm8k", "main", "train", question_from_column(("question",)), answer_after_hash),
    "aime2024": MathSet("HuggingFaceH4/aime_2024", None, "train", _Q, _A, "id"),
    "aime2025": MathSet("math-ai/aime25", None, "test", _Q, _A, "id"),
    "amc23": MathSet("math-ai/amc23", None, "test", _Q, _A, "id"),
    "hmmt_feb_2025": MathSet("MathArena/hmmt_feb_2025", None, "train", _Q, _A, "problem_idx"),
    "brumo_2025": MathSet("MathArena/brumo_2025", None, "train", _Q, _A, "problem_idx"),
    "minerva": MathSet("math-ai/minervamath", None, "test", _Q, _A),
    "olympiadbench": MathSet("math-ai/olympiadbench", None, "test", _Q, answer_from_list, "id"),
}


def convert_records(
    name: str, records: list[dict], split: str, family: str, dedupe: bool = False, progress: bool = True
) -> tuple[list[dict], int]:
    """Convert upstream records of math set `name`; returns (rows, number of duplicates dropped).

    `dedupe` drops later copies of an identical (question, answer) pair (DAPO-Math-17k repeats
    each problem many times); the count is returned so callers can report it.
    """
    if name not in MATH_SETS:
        raise ValueError(f"unknown math set {name!r}; allowed: {sorted(MATH_SETS)}")
    spec = MATH_SETS[name]
    rows, seen, dropped = [], set(), 0
    for i, record in enumerate(tqdm(records, desc=name, disable=not progress, unit="row")):
        where = f"{name} record {i}"
        if not isinstance(record, dict):
            raise RowError(f"{where}: expected an object, got {type(record).__name__}")
        try:
            question, answer = spec.question(record, where), spec.answer(record, where)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if isinstance(exc, RowError):
                raise
            raise RowError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if dedupe:
            key = (question.strip(), answer.strip())
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
        row_id = str(record[spec.id_column]) if spec.id_column and spec.id_column in record else f"{name}-{i}"
        rows.append(math_row(name, split, i, row_id, question, answer, family))
    return rows, dropped


def convert_math(
    name: str, local_path: str | None = None, split: str | None = None, family: str = "qwen", dedupe: bool = False
) -> tuple[list[dict], int]:
    """Read math set `name` (local file, else hub) and convert it; see `convert_records`."""
    if name not in MATH_SETS:
        raise ValueError(f"unknown math set {name!r}; allowed: {sorted(MATH_SETS)}")
    spec = MATH_SETS[name]
    split = split or spec.split
    return convert_records(name, read_records(local_path, spec.repo, spec.config, split), split, family, dedupe)
