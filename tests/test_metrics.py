"""Evaluation metrics against brute-force combinatorics and hand-computed values."""

import itertools
import math

import numpy as np
import pytest

from xrpo_verl.metrics import bleu4, cons_at_k, logdet_diversity, mean_length, pass_at_k, self_bleu


def test_pass_at_k_matches_brute_force_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(range(n), k))
                brute = sum(any(i < c for i in s) for s in subsets) / len(subsets)  # first c are correct
                assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12)
    assert pass_at_k(32, 8, 1) == pytest.approx(8 / 32)
    assert pass_at_k(100, 1, 10) == pytest.approx(1 - math.comb(99, 10) / math.comb(100, 10))


def test_cons_at_k_majority_with_first_occurrence_ties():
    answers = [" 4", "5", "4 ", None, "5"]
    # "4" and "5" both have 2 votes after stripping: "4" occurs first
    assert cons_at_k(answers, lambda a: a.strip() == "4")
    assert not cons_at_k(answers, lambda a: a.strip() == "5")
    assert cons_at_k(answers, [True, False, True, False, False])
    assert cons_at_k(["7", "7", "3"], [False, False, True]) is False
    assert cons_at_k([None, None], lambda a: True) is False


def test_bleu4_hand_values():
    assert bleu4("a b c d".split(), ["a b c d".split()]) == pytest.approx(1.0)
    # p1 = 4/5, p2 = 2/4, p3 = 1/3, p4 = 0 -> 0.1/2 (method1); BP = 1
    got = bleu4("a b c d e".split(), ["a b c x e".split()])
    assert got == pytest.approx((0.8 * 0.5 * (1 / 3) * 0.05) ** 0.25)
    # short hypothesis: p3 = p4 = 0.1/1; BP = exp(1 - 3/2)
    assert bleu4("a b".split(), ["a b c".split()]) == pytest.approx(math.exp(-0.5) * (0.1 * 0.1) ** 0.25)
    assert bleu4("x y".split(), ["a b".split()]) == 0.0  # no unigram match


def test_self_bleu_identical_is_one_and_disjoint_is_zero():
    assert self_bleu(["the cat sat down", "the cat sat down", "the cat sat down"]) == pytest.approx(1.0)
    assert self_bleu(["a b c d", "e f g h"]) == 0.0
    mixed = self_bleu(["the cat sat on the mat", "the cat sat on a rug", "dogs run fast in parks"])
    assert 0.0 < mixed < 1.0


def test_logdet_orthonormal_max_and_duplicates_collapse():
    assert logdet_diversity(np.eye(3)) == pytest.approx(3 * math.log1p(1e-6))
    e = 1e-6
    assert logdet_diversity(np.array([[1.0, 0], [2.0, 0]])) == pytest.approx(math.log(2 * e + e * e), rel=1e-6)
    assert logdet_diversity(np.array([[1.0, 0.1], [0.1, 1.0]])) > logdet_diversity(np.array([[1.0, 0.1], [1.0, 0.2]]))


def test_mean_length():
    assert mean_length([10, 20, 30]) == 20.0


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: pass_at_k(4, 5, 1), "c <= n"),
        (lambda: pass_at_k(4, 2, 0), "k <= n"),
        (lambda: cons_at_k([], [True]), "at least one"),
        (lambda: cons_at_k(["a"], [True, False]), "labels"),
        (lambda: self_bleu(["one"]), "at least 2"),
        (lambda: logdet_diversity(np.zeros((2, 3))), "zero row"),
        (lambda: mean_length([]), "non-empty"),
    ],
)
def test_bad_input_raises(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()
