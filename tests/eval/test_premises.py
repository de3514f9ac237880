"""Premise probes (`xrpo_verl.eval.premises`): hand-computed figures, the sampler on a real Qwen2."""

import math

import numpy as np
import pytest

from xrpo_verl.eval import premises as P
from xrpo_verl.lab import addition, tiny_model


def _problem(pid: str, answer: str) -> P.Problem:
    return P.Problem(pid, f"q{pid}", lambda text, a=answer: float(text.strip().endswith(a)))


def _sample(text: str) -> P.Sample:
    return P.Sample(text, (), ())


def test_spread_counts_never_and_always_solved_problems():
    s = P.spread([0.0, 0.0, 0.25, 1.0, 0.5])
    assert (s.problems, s.never, s.always) == (5, 0.4, 0.2)
    assert s.mean == pytest.approx(0.35)
    with pytest.raises(ValueError):
        P.spread([])


def test_compare_arms_is_paired_per_prompt():
    c = P.compare_arms([0.5, 0.0, 0.25], [0.0, 0.0, 0.25])
    assert (c.prompts, c.arm_flips, c.control_flips) == (3, 2, 1)
    assert c.diff == pytest.approx(0.5 / 3)
    # differences (0.5, 0, 0): sample sd sqrt(1/12), SE sqrt(1/12)/sqrt(3) = 1/6
    assert c.diff_se == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        P.compare_arms([0.5], [])


def test_pass_at_k_is_the_unbiased_estimator():
    assert P.pass_at_k(8, 0, 8) == 0.0 and P.pass_at_k(8, 1, 8) == 1.0
    assert P.pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))  # 0.5
    with pytest.raises(ValueError):
        P.pass_at_k(4, 5, 2)


def test_styles_find_problems_only_one_style_solves_and_the_cost_of_collapse():
    """Two problems, four samples each. Problem a: columns solves 2 of 2, words 0 of 2; problem b:
    columns 0 of 2, words 1 of 2. Either style alone loses one problem's pass@k."""
    a, b = addition.Sum(347, 285), addition.Sum(95, 7)
    right = {s: {p: addition.solution_text(p, s) for p in (a, b)} for s in addition.STYLES}
    wrong = {s: {p: addition.solution_text(addition.Sum(p.a, p.b + 1), s) for p in (a, b)} for s in addition.STYLES}
    problems = [_problem("a", f"{{{a.answer}}}"), _problem("b", f"{{{b.answer}}}")]
    groups = [
        [_sample(right["columns"][a])] * 2 + [_sample(wrong["words"][a])] * 2,
        [_sample(wrong["columns"][b])] * 2 + [_sample(right["words"][b]), _sample(wrong["words"][b])],
    ]
    s = P.styles(problems, groups, addition.style_of, k=2)
    assert s.shares == {"columns": 2 / 3, "words": 1 / 3}
    assert s.entropy_bits == pytest.approx(-(2 / 3) * math.log2(2 / 3) - (1 / 3) * math.log2(1 / 3))
    assert s.only == {"columns": 1, "words": 1}
    # mix: a has 2 of 4 right -> 1 - C(2,2)/C(4,2) = 5/6; b 1 of 4 -> 1 - C(3,2)/C(4,2) = 1/2
    assert s.pass_at_k_mix == pytest.approx((5 / 6 + 1 / 2) / 2)
    # columns only: a 1.0, b 0.0; words only: a 0.0, b 1 - 0.5^2 = 0.75
    assert s.pass_at_k_collapsed == pytest.approx({"columns": 0.5, "words": 0.375})
    assert s.collapse_cost == pytest.approx((5 / 6 + 1 / 2) / 2 - 0.5)


def test_style_of_tells_the_two_addition_styles_apart():
    p = addition.Sum(347, 285)
    assert [addition.style_of(addition.solution_text(p, s)) for s in addition.STYLES] == list(addition.STYLES)
    assert addition.solution_text(p, "words") == "ones: 5+7=12\ntens: 8+4+1=13\nhundreds: 2+3+1=6\n\\boxed{632}"
    assert addition.style_of("the answer is 632") is None
    with pytest.raises(ValueError, match="style"):
        addition.solution_text(p, "roman")


def test_chosen_prefix_is_the_lowest_entropy_step_of_the_group():
    """Two failed samples over a 'digit, newline' vocabulary: the prefix ending at sample 1's first
    newline has the lowest mean entropy. Embeddings are orthogonal, so the smoothing (softmax of
    cos / 0.1) keeps each score nearly its own and the raw order decides (equal embeddings would tie
    every candidate)."""
    nl = 9
    groups = [
        [
            P.Sample("", (1, 2, nl, 3, nl, 4), (1.0, 1.0, 1.0, 1.0, 1.0, 1.0)),
            P.Sample("", (5, nl, 6, nl, 7), (0.2, 0.2, 2.0, 2.0, 2.0)),
        ],
        [P.Sample("", (1, 2, 3), (0.1, 0.1, 0.1))],  # no newline: no candidate
    ]

    def encode(texts):
        return np.eye(len(texts))

    chosen = P.chosen_prefixes(
        groups, {nl}, lambda ids: ",".join(map(str, ids)), encode, min_gap=1, max_candidates=15, max_len=None, tau=0.1
    )
    assert chosen == ["5,9", None]


def test_sampler_returns_k_samples_with_one_entropy_per_token_and_continues_prefixes():
    """A random-init Qwen2 of the tiny model's family (no warm-up: the sampler, not the model, is tested)."""
    import torch

    config = tiny_model.TinyModelConfig(task="addition", hidden_size=32, intermediate_size=64, num_layers=1)
    tok = tiny_model.build_tokenizer(config)
    torch.manual_seed(0)
    model = tiny_model.build_model(config, tok).eval()
    sampler = P.Sampler(model, tok, tiny_model.chat_prompt, max_new_tokens=6, chunk=4)
    groups = sampler.sample(["1+2=?", "33+4=?", "5+6=?"], k=3, prefixes=["", "7+", ""])
    assert [len(g) for g in groups] == [3, 3, 3]  # chunk 4 // k 3 = one prompt a call: 3 calls
    for g in groups:
        for s in g:
            assert len(s.token_ids) == len(s.entropies) <= 6
            assert all(0.0 <= h <= math.log(len(tok)) + 1e-4 for h in s.entropies)
            assert tok.eos_token_id not in s.token_ids
    # a random model spreads its mass: entropies near log |V|
    assert max(h for g in groups for s in g for h in s.entropies) > 0.5 * math.log(len(tok))


def test_forced_pass_at_k_counts_problems_with_any_success():
    assert P.forced_pass_at_k([0.0, 0.125, 1.0, 0.0]) == 0.5
    with pytest.raises(ValueError):
        P.forced_pass_at_k([])


def test_response_logprobs_match_a_token_by_token_forward_pass_and_reliance_is_their_difference():
    import torch

    config = tiny_model.TinyModelConfig(task="addition", hidden_size=32, intermediate_size=64, num_layers=1)
    tok = tiny_model.build_tokenizer(config)
    torch.manual_seed(0)
    model = tiny_model.build_model(config, tok).eval()
    prompts = [tiny_model.chat_prompt("1+2=?"), tiny_model.chat_prompt("Here are examples. 3+4=7. Now 1+2=?")]
    response = tok("3\n", add_special_tokens=False)["input_ids"]
    got = P.response_logprobs(model, tok, prompts, [response, response], chunk=1)
    for text, value in zip(prompts, got):  # by hand: one forward pass per prefix of the response
        ids = tok(text, add_special_tokens=False)["input_ids"]
        want = 0.0
        for t in range(len(response)):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids + response[:t]])).logits[0, -1]
            want += float(logits.float().log_softmax(-1)[response[t]])
        assert value == pytest.approx(want, abs=1e-4)
    r = P.hint_reliance([got[1], -1.0], [got[0], -3.5], [len(response), 2])
    assert r.successes == 2 and r.seq_mean == pytest.approx(((got[1] - got[0]) + 2.5) / 2)
    assert r.token_mean == pytest.approx(((got[1] - got[0]) + 2.5) / (len(response) + 2))
    assert P.hint_reliance([], [], []).successes == 0
