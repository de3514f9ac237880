"""Generated arithmetic: rows, scores, mixed difficulty."""

import pytest

from xrpo_verl.lab import arith


# ---- data and model ----------------------------------------------------------------------------
def test_arith_rows_and_score():
    problems = arith.sample_problems(50, seed=3)
    assert problems == arith.sample_problems(50, seed=3)
    assert all(0 <= p.a <= 12 and 0 <= p.b <= 12 and p.op in "+-" for p in problems)
    assert arith.Problem(7, "-", 9).answer == -2 and arith.Problem(7, "+", 9).question == "7+9=?"
    row = arith.verl_rows([arith.Problem(3, "+", 4)], "train")[0]
    assert row["prompt"] == [{"role": "user", "content": "3+4=?"}] and row["reward_model"]["ground_truth"] == "7"
    score = arith.compute_score
    assert score("xrpo_arith", "\\boxed{7}", "7")["score"] == 1.0
    assert score("xrpo_arith", "\\boxed{5} then \\boxed{-2}", "-2")["score"] == 1.0  # the last box counts
    assert score("xrpo_arith", "7", "7") == {"score": 0.0, "acc": 0.0, "formatted": 0.0}
    assert score("xrpo_arith", "\\boxed{x}", "7")["score"] == 0.0
    with pytest.raises(ValueError, match="integer"):
        score("xrpo_arith", "\\boxed{7}", "seven")
    with pytest.raises(ValueError, match="max_operand"):
        arith.ArithConfig(max_operand=0)
    with pytest.raises(ValueError, match="ops"):
        arith.ArithConfig(ops=("*",))


def test_mixed_problems_put_a_hard_one_at_every_kth_row(tmp_path):
    mixed = arith.mixed_problems(40, seed=5, hard_every=2)
    assert mixed == arith.mixed_problems(40, seed=5, hard_every=2)
    easy, hard = mixed[0::2], mixed[1::2]
    assert all(max(p.a, p.b) <= 12 for p in easy)
    assert all(max(p.a, p.b) <= 99 for p in hard) and max(max(p.a, p.b) for p in hard) > 12
    import pandas as pd

    rows = pd.read_parquet(arith.write_parquet(tmp_path / "m.parquet", 40, seed=5, split="train", hard_every=2))
    assert [r[0]["content"] for r in rows["prompt"]] == [p.question for p in mixed]
    with pytest.raises(ValueError, match="hard_every"):
        arith.mixed_problems(4, seed=5, hard_every=0)


# ---- the scorer is total: any response string gets a score, never an exception --------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

# Random text, and text built from the characters that matter to the parser, so boxes, signs and
# digits (ASCII and not) meet in every combination.
ANSWERISH = st.lists(st.sampled_from([*"\\boxed{}-+0123456789 .\n٩", "\\boxed{", "--"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(response=st.one_of(st.text(max_size=200), ANSWERISH), truth=st.integers(-(10**6), 10**6))
def test_score_of_any_string_is_zero_or_one(response, truth):
    result = arith.compute_score(arith.DATA_SOURCE, response, str(truth))
    assert result["score"] in (0.0, 1.0) and result["acc"] == result["score"]
    boxed = arith.boxed_answer(response)
    if boxed == str(truth):
        assert result["score"] == 1.0
    if result["score"] == 1.0:  # only a plain integer (leading zeros allowed) equal to the truth
        assert boxed.lstrip("-").isascii() and boxed.lstrip("-").isdigit() and int(boxed) == truth


def test_malformed_answers_score_zero_instead_of_raising():
    score = arith.compute_score
    # `--9` crashed a training run: `"--9".lstrip("-").isdigit()` passed and `int("--9")` raised.
    for answer in ("--9", "-", "+9", "9-", "٩", "9.0", " ", "1" * 5000):
        assert score("xrpo_arith", f"\\boxed{{{answer}}}", "9")["score"] == 0.0, answer
    assert score("xrpo_arith", "\\boxed{-9}", "-9")["score"] == 1.0
    assert score("xrpo_arith", "\\boxed{007}", "7")["score"] == 1.0  # leading zeros are still the integer
    assert score("xrpo_arith", None, "7")["score"] == 0.0
