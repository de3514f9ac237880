"""verl's parquet row schema, the per-model-family answer-format instructions, and parquet output.

A row:
    data_source   "math/<set>" or "code/<set>"  (routes the xrpo reward manager)
    prompt        [{"role": "user", "content": question + the family's answer-format instruction}]
    ability       "math" | "code"
    reward_model  {"style": "rule", "ground_truth": str}   math: the answer; code: the problem id
    extra_info    {"index": int, "split": str, "id": str, "question": str,
                   "problem": JSON str of the sandbox problem (code only: tests, limits, checker)}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


class RowError(ValueError):
    """A source row that cannot be converted; the message names the dataset and row."""


@dataclass(frozen=True)
class PromptFamily:
    """How one model family is asked to format its answer."""

    math: str
    """math prompt template; `{question}` is replaced by the problem text"""
    code_stdio: str
    """code instruction for stdin/stdout problems"""
    code_functional: str
    """code instruction for function-call problems; {starter} is the starter code"""
    answer_format: str
    """the `MathRewardConfig.answer_formats` entry that reads this family's answers"""


_BOXED = "{question}\nPlease reason step by step, and put your final answer within \\boxed{}."
_STDIO = (
    "Write a Python 3 program that reads from standard input and writes to standard output. "
    "Put the complete program in a single ```python code block at the end of your response."
)
_FUNCTIONAL = (
    "Complete the following starter code. Put the complete solution in a single ```python code "
    "block at the end of your response.\n\n```python\n{starter}\n```"
)
DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
PROMPT_FAMILIES: dict[str, PromptFamily] = {
    # Qwen2.5(-Math) / Qwen3 chain-of-thought prompt.
    "qwen": PromptFamily(_BOXED, _STDIO, _FUNCTIONAL, "boxed"),
    # DeepSeek-R1 and its distills: the same instruction, no system prompt (DeepSeek's usage notes).
    "deepseek_r1": PromptFamily(_BOXED, _STDIO, _FUNCTIONAL, "boxed"),
    # Llama 3 instruct math-eval phrasing.
    "llama": PromptFamily(
        "{question}\nSolve the problem step by step. End with: Therefore, the final answer is: $\\boxed{answer}$.",
        _STDIO,
        _FUNCTIONAL,
        "boxed",
    ),
    # DAPO-Math-17k's own instruction ("Answer: $Answer" on the last line).
    "dapo": PromptFamily(DAPO_PREFIX + "{question}" + DAPO_SUFFIX, _STDIO, _FUNCTIONAL, "answer_line"),
}


def get_family(name: str) -> PromptFamily:
    if name not in PROMPT_FAMILIES:
        raise ValueError(f"unknown prompt family {name!r}; allowed: {sorted(PROMPT_FAMILIES)}")
    return PROMPT_FAMILIES[name]


def math_row(dataset: str, split: str, index: int, row_id: str, question: str, answer: str, family: str) -> dict:
    """One math row; raises RowError when the question or answer is empty."""
    where = f"{dataset} row {index} (id {row_id!r})"
    if not isinstance(question, str) or not question.strip():
        raise RowError(f"{where}: empty or non-text question: {question!r:.80}")
    if not isinstance(answer, str) or not answer.strip():
        raise RowError(f"{where}: empty or non-text answer: {answer!r:.80}")
    content = get_family(family).math.replace("{question}", question.strip())
    return {
        "data_source": f"math/{dataset}",
        "prompt": [{"role": "user", "content": content}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer.strip()},
        "extra_info": {"index": index, "split": split, "id": row_id, "question": question.strip()},
    }


def code_row(dataset: str, split: str, index: int, question: str, problem: dict, starter: str, family: str) -> dict:
    """One code row; the sandbox problem is validated with `sandbox.Problem.from_dict`."""
    from sandbox import Problem

    where = f"{dataset} row {index} (id {problem.get('id')!r})"
    try:
        Problem.from_dict(problem)
    except ValueError as exc:
        raise RowError(f"{where}: {exc}") from exc
    if not question.strip():
        raise RowError(f"{where}: empty question")
    fam = get_family(family)
    instruction = (
        fam.code_functional.format(starter=starter.strip()) if problem["kind"] == "functional" else fam.code_stdio
    )
    return {
        "data_source": f"code/{dataset}",
        "prompt": [{"role": "user", "content": f"{question.strip()}\n\n{instruction}"}],
        "ability": "code",
        "reward_model": {"style": "rule", "ground_truth": problem["id"]},
        "extra_info": {
            "index": index,
            "split": split,
            "id": problem["id"],
            "question": question.strip(),
            "problem": json.dumps(problem, sort_keys=True),
        },
    }


def write_parquet(rows: list[dict], path: str) -> str:
    """Write rows to parquet (directories created); returns the path."""
    import pandas as pd

    if not rows:
        raise ValueError(f"refusing to write an empty dataset to {path}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
