"""Spans decoded in one call give exactly what the tokenizer's own decode gives per sequence, on the
repository's byte-level tokenizers (the byte-table way) and on any other (the batched Rust way)."""

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from xrpo_verl.lab import testbed, tiny_model
from xrpo_verl.verl_adapters.text import span_decoder

UNICODE = ["héllo wörld", "naïve café", "数学题的答案是", "x² + y² = z²", "🙂 fine 🚀", "Ωmega ≤ ∞", "日本語 テキスト"]


def _unicode_bpe():
    """A byte-level BPE trained on text with multi-byte characters, so merged tokens hold whole and
    partial characters, with a special token and a non-special added token holding a space."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420, special_tokens=["<|end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(UNICODE * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")
    fast.add_tokens(["two words", "é!"])
    return fast


def _tokenizers():
    return {
        "tiny_model": AutoTokenizer.from_pretrained(tiny_model.build(tiny_model.TinyModelConfig(), verbose=False)),
        "testbed": AutoTokenizer.from_pretrained(tiny_model.build(testbed.MODEL, verbose=False)),
        "unicode_bpe": _unicode_bpe(),
    }


def _random_sources(tok, rng, count=60):
    """Token id arrays mixing merged tokens, raw bytes >= 0x80 (multi-byte characters cut anywhere,
    invalid UTF-8), special tokens, ids past the vocabulary, and encoded unicode text."""
    size = len(tok)
    specials = [i for i in tok.all_special_ids if i is not None]
    byte_ids = [tok.convert_tokens_to_ids(c) for c in pre_tokenizers.ByteLevel.alphabet()]
    byte_ids = [i for i in byte_ids if i is not None and i != tok.unk_token_id]
    out = []
    for n in rng.integers(1, 400, size=count):
        pool = np.concatenate(
            [
                rng.integers(0, size, size=n),
                rng.choice(byte_ids, size=n),
                rng.choice(specials, size=max(1, n // 20)),
                rng.integers(size, size + 50, size=max(1, n // 30)),  # a model's padded vocabulary
                tok.encode(" ".join(rng.choice(UNICODE, size=3)), add_special_tokens=False),
            ]
        )
        out.append(rng.permutation(pool)[: int(n) + 5])
    return out


@pytest.mark.parametrize("name", ["tiny_model", "testbed", "unicode_bpe"])
def test_spans_equal_the_tokenizers_decode(name):
    tok = _tokenizers()[name]
    decode = span_decoder(tok)
    assert decode.byte_level  # the byte-table way is the one tested here
    rng = np.random.default_rng(0)
    sources = _random_sources(tok, rng)
    spans = []
    for s, ids in enumerate(sources):
        for _ in range(8):  # overlapping spans of one source, cut at any token
            a, b = sorted(rng.integers(0, len(ids) + 1, size=2).tolist())
            spans.append((s, a, b))
    spans += [(s, 0, len(ids)) for s, ids in enumerate(sources)]  # every source whole
    want = [tok.decode(sources[s][a:b].tolist(), skip_special_tokens=True) for s, a, b in spans]
    assert any("\ufffd" in t for t in want) and any(ord(c) > 0x7FF for t in want for c in t)  # cut and whole
    assert decode(sources, spans) == want
    as_tensors = [torch.as_tensor(x) for x in sources]  # the novelty path passes torch rows
    assert decode(as_tensors, spans) == want


def test_other_tokenizers_take_the_batched_decode_with_the_same_texts():
    tok = _tokenizers()["unicode_bpe"]
    rng = np.random.default_rng(1)
    sources = _random_sources(tok, rng, count=20)
    spans = [(s, 0, len(x)) for s, x in enumerate(sources)] + [(s, 3, len(x) // 2) for s, x in enumerate(sources)]
    want = [tok.decode(sources[s][a:b].tolist(), skip_special_tokens=True) for s, a, b in spans]
    tok.backend_tokenizer.decoder = decoders.Sequence([decoders.ByteLevel()])  # not exactly ByteLevel
    decode = span_decoder(tok)
    assert not decode.byte_level and decode(sources, spans) == want
    tok.clean_up_tokenization_spaces = True  # the tokenizer's own clean-up rules, whatever they do
    assert span_decoder(tok)(sources, spans) == [
        tok.decode(sources[s][a:b].tolist(), skip_special_tokens=True) for s, a, b in spans
    ]


def test_a_span_past_its_source_is_refused():
    decode = span_decoder(_tokenizers()["testbed"])
    with pytest.raises(ValueError, match="not within source 0"):
        decode([[5, 6, 7]], [(0, 1, 4)])
    assert decode([[5, 6, 7], [8]], [(0, 2, 2), (1, 0, 1)])[0] == ""
