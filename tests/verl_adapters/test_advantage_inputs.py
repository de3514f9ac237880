"""Inputs of our estimators that the trainer computes from the batch."""

import torch
from omegaconf import OmegaConf

from xrpo_verl.verl_adapters.advantage_inputs import rollout_correction


def test_rollout_correction_weights_for_our_estimators_are_verls():
    """Our estimators replace verl's `_compute_advantage`, which is where verl computes the
    rollout-correction IS weights and rejection mask, so the trainer runs the same verl function:
    token IS weights are exp(old - rollout) truncated at the threshold, 0 outside the mask."""
    cfg = OmegaConf.create({"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": None})
    old = torch.tensor([[-1.0, -2.0, -1.0], [-0.5, -0.5, -3.0]])
    rollout = torch.tensor([[-1.5, -1.0, -1.0], [-0.5, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    w, new_mask, metrics = rollout_correction(cfg, old, rollout, mask)
    want = torch.clamp(torch.exp(old - rollout), max=2.0) * mask
    assert torch.allclose(w * mask, want, atol=1e-6)
    assert torch.equal(new_mask, mask) and "rollout_corr/rollout_is_mean" in metrics
    off, _, _ = rollout_correction(OmegaConf.create({"rollout_is": None}), old, rollout, mask)
    assert off is None  # verl's default: metrics only, no weights


def _success_view(lengths, correct, kinds, keys):
    from xrpo_verl.verl_adapters.batch_view import BatchView

    b, t = len(lengths), max(lengths)
    rm = torch.zeros(b, t)
    rm[:, 0] = torch.tensor(correct, dtype=torch.float32)
    return BatchView(
        uids=keys,
        keys=keys,
        kinds=kinds,
        raw_prompts=[[{"role": "user", "content": f"question {k}"}] for k in keys],
        responses=[torch.arange(n) % 50 + 40 for n in lengths],
        prompts=None,
        entropy=None,
        mask=torch.ones(b, t),
        rm_scores=rm,
        old_log_probs=torch.zeros(b, t),
        valid=torch.ones(b, dtype=torch.bool),
        acc=rm[:, 0].clone(),
    )


def test_the_corpus_takes_per_prompt_the_first_success_it_could_show(hash_encoder):
    """One example per prompt: its first correct, unguided row no longer than the longest solution an
    ICL prompt shows. A longer success would never be shown and, under keep=recent, would push the
    prompt's showable one out of the corpus; a prompt with only long successes is counted."""
    from transformers import AutoTokenizer

    from xrpo_verl import icl as icl_lib
    from xrpo_verl.lab import testbed, tiny_model
    from xrpo_verl.verl_adapters.advantage_inputs import corpus_successes
    from xrpo_verl.verl_adapters.text import span_decoder

    tok = AutoTokenizer.from_pretrained(tiny_model.build(testbed.MODEL, verbose=False))
    view = _success_view(
        lengths=[30, 9, 7, 5, 12, 40, 3],
        correct=[1, 1, 1, 0, 1, 1, 1],
        kinds=["base", "round", "base", "base", "guided", "icl", "base"],
        keys=["a", "a", "a", "b", "b", "c", "d"],
    )

    def text(i):
        return f"question {view.keys[i]}"

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=True)

    got, too_long = corpus_successes(view, text, decode, 7, max_tokens=10)
    # a: row 0 is too long, row 1 is the first showable; b: only a guided success; c: only a long
    # (ICL-row) success; d: row 6
    assert [(e.prompt_id, e.num_tokens, e.step) for e in got] == [("a", 9, 7), ("d", 3, 7)]
    assert [e.response_text for e in got] == [decode(view.responses[1].tolist()), decode(view.responses[6].tolist())]
    assert [e.prompt_text for e in got] == ["question a", "question d"]
    assert too_long == 1  # c; a had a showable one
    batched, _ = corpus_successes(view, text, decode, 7, max_tokens=10, decode_spans=span_decoder(tok))
    assert batched == got
    everything, none_long = corpus_successes(view, text, decode, 7, max_tokens=100)
    assert [(e.prompt_id, e.num_tokens) for e in everything] == [("a", 30), ("c", 40), ("d", 3)] and none_long == 0
    # kept under keep=recent, a later long success would have replaced the showable one
    corpus = icl_lib.ICLCorpus(hash_encoder, keep="recent")
    corpus.add_many(got)
    corpus.add_many(corpus_successes(_success_view([30], [1], ["base"], ["a"]), text, decode, 8, max_tokens=10)[0])
    assert [e.num_tokens for e in corpus.examples("a")] == [9]
