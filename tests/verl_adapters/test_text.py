"""One batched decode gives exactly what the tokenizer's own decode gives per sequence."""

import numpy as np
from transformers import AutoTokenizer

from xrpo_verl.lab import testbed, tiny_model
from xrpo_verl.verl_adapters.text import batch_decoder


def test_batch_decode_equals_the_tokenizers_decode_special_tokens_included():
    tok = AutoTokenizer.from_pretrained(tiny_model.build(testbed.MODEL, verbose=False))
    rng = np.random.default_rng(0)
    specials = [i for i in tok.all_special_ids if i is not None]
    seqs = [rng.integers(0, len(tok), size=int(n)).tolist() + specials[:1] for n in rng.integers(1, 300, size=40)]
    seqs.append(np.array(seqs[0]))  # arrays too, as the prefix path passes them
    got = batch_decoder(tok)(seqs)
    assert got == [tok.decode(list(s), skip_special_tokens=True) for s in seqs]
    tok.clean_up_tokenization_spaces = True  # the tokenizer's own clean-up rules, whatever they do
    assert batch_decoder(tok)(seqs) == [tok.decode(list(s), skip_special_tokens=True) for s in seqs]
