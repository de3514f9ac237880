"""Column addition with a scratchpad: hand-checked solutions, disjoint held-out set, scoring."""

import numpy as np
import pytest

from xrpo_verl.lab import addition, arith, learning_setting, tiny_model


def test_solution_writes_one_column_per_line_with_carries():
    assert addition.solution_text(addition.Sum(347, 285)) == "7+5=12\n4+8+1=13\n3+2+1=6\n\\boxed{632}"
    # a missing digit is 0; a final carry makes the answer one digit longer
    assert addition.solution_text(addition.Sum(95, 7)) == "5+7=12\n9+0+1=10\n\\boxed{102}"
    assert addition.solution_text(addition.Sum(3, 4)) == "3+4=7\n\\boxed{7}"
    for p in addition.sample_problems(200, seed=1):
        text = addition.solution_text(p)
        assert arith.compute_score(addition.DATA_SOURCE, text, str(p.answer))["score"] == 1.0
        assert text.count("\n") == max(len(str(p.a)), len(str(p.b)))


def test_operand_lengths_cover_the_configured_range():
    problems = addition.sample_problems(500, seed=2, config=addition.AdditionConfig(min_digits=2, max_digits=4))
    lengths = {len(str(x)) for p in problems for x in (p.a, p.b)}
    assert lengths == {2, 3, 4}
    with pytest.raises(ValueError, match="min_digits"):
        addition.AdditionConfig(min_digits=3, max_digits=2)


def test_heldout_set_shares_no_problem_with_training(tmp_path):
    train, heldout = addition.train_and_heldout(3000, 100, seed=11)
    assert len(train) == 3000 and len(heldout) == len(set(heldout)) == 100
    key = lambda p: (min(p.a, p.b), max(p.a, p.b))  # noqa: E731  (a+b and b+a are one problem)
    assert not {key(p) for p in train} & {key(p) for p in heldout}
    # small operand ranges have overlaps to remove: with one digit there are only 55 problems
    small_train, small_heldout = addition.train_and_heldout(200, 20, seed=3, config=addition.AdditionConfig(1, 1))
    assert not {key(p) for p in small_train} & {key(p) for p in small_heldout}
    import pandas as pd

    paths = addition.write_parquets(tmp_path, 64, 16, seed=11)
    rows = [pd.read_parquet(p) for p in paths]
    assert [len(r) for r in rows] == [64, 16]
    assert rows[1]["reward_model"][0]["ground_truth"] == str(heldout[0].answer)


def test_learning_model_config_selects_the_addition_task():
    config = learning_setting.MODEL
    assert config.task == "addition" and config.key != tiny_model.TinyModelConfig().key
    p = config.sample_problems(1, seed=0)[0]
    assert isinstance(p, addition.Sum) and config.solution_text(p) == addition.solution_text(p)
    # the arith model's cache key did not change when the task field was added (it changed on
    # purpose once since, when the build pinned the CPU kernels)
    assert tiny_model.TinyModelConfig().key == "ae5cc51e3fb4"
    with pytest.raises(ValueError, match="task"):
        tiny_model.TinyModelConfig(task="chess")


def test_accuracy_standard_error_is_over_problems():
    acc = learning_setting.accuracy([0.0, 1.0, 0.5, 0.5])
    assert acc.mean == 0.5 and acc.never == 1 and acc.always == 1
    assert acc.se == pytest.approx((1 / 6) ** 0.5 / 2)  # sample variance of (0,1,.5,.5) is 1/6


def test_measurement_set_extends_the_heldout_set_without_training_problems():
    setting = learning_setting.LearningSetting(n_train=500, n_heldout=30, n_eval=120)
    train, heldout = addition.train_and_heldout(500, 30, setting.data_seed, setting.model.addition)
    measured = learning_setting.heldout_problems(setting, setting.n_eval)
    key = lambda p: (min(p.a, p.b), max(p.a, p.b))  # noqa: E731
    assert measured[:30] == heldout  # verl's in-run validation set comes first, unchanged
    assert len({key(p) for p in measured}) == 120  # distinct, a+b and b+a counted once
    assert not {key(p) for p in measured} & {key(p) for p in train}
    assert learning_setting.heldout_problems(setting) == heldout


def test_family_offsets_enter_the_ones_column_and_the_answer():
    config = addition.AdditionConfig(families=4, known_families=2)
    offsets = addition.family_offsets(config)
    assert list(offsets) == list(addition.FAMILY_NAMES[:4]) and all(1 <= c <= 9 for c in offsets.values())
    p = addition.Sum(347, 285, "zork", 3)
    assert p.question == "zork: 347+285=?" and p.answer == 635
    assert addition.solution_text(p) == "7+5+3=15\n4+8+1=13\n3+2+1=6\n\\boxed{635}"
    assert addition.solution_text(p, "words") == "ones: 5+7+3=15\ntens: 8+4+1=13\nhundreds: 2+3+1=6\n\\boxed{635}"
    # an offset can carry 2 out of the ones column; the last column's total holds any final carry
    assert addition.solution_text(addition.Sum(99, 9, "blip", 9)) == "9+9+9=27\n9+0+2=11\n\\boxed{117}"
    for q in addition.sample_problems(300, seed=4, config=config):
        assert q.offset == offsets[q.family]
        assert (
            arith.compute_score(addition.DATA_SOURCE, addition.solution_text(q, "words"), str(q.answer))["score"] == 1
        )
    known = addition.known_family_problems(100, seed=5, config=config)
    assert {q.family for q in known} == set(addition.FAMILY_NAMES[:2])
    with pytest.raises(ValueError, match="known_families"):
        addition.AdditionConfig(families=2, known_families=3)


def test_breadth_counts_problems_solved_styles_and_sameness_by_hand():
    a, b = addition.Sum(3, 4), addition.Sum(12, 30)
    cols, words = addition.solution_text(a, "columns"), addition.solution_text(a, "words")
    wrong = "3+4=8\n\\boxed{8}"
    unsure = "I cannot add these two numbers today"  # long enough to hold 4-grams
    texts = [[cols, words, wrong], [unsure, unsure, unsure]]
    found = learning_setting.breadth([a, b], texts, k=3, embed=lambda ts: np.eye(3)[: len(ts)] + 0.0)
    assert found["pass@3"].mean == 0.5  # a solved, b not
    assert found["mean@3"].per_problem == pytest.approx((2 / 3, 0.0))  # two of a's three samples are right
    assert found["both_styles"].mean == 0.5  # a's correct samples use both styles
    assert found["style_entropy"].mean == pytest.approx(1.0)  # one correct sample in each style
    # b's three texts are one text: Self-BLEU 1; a's share no 4-gram, only the smoothed floor
    assert found["self_bleu"].per_problem[1] == pytest.approx(1.0) and found["self_bleu"].per_problem[0] < 0.5
    assert found["logdet"].mean == pytest.approx(3 * np.log1p(1e-6))  # orthogonal rows: the maximum
    with pytest.raises(ValueError, match="exactly k = 3"):
        learning_setting.breadth([a], [[cols, words]], k=3)
