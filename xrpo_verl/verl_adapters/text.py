"""Token ids to text in one call for many sequences, as the tokenizer's own `decode` gives each.

`PreTrainedTokenizerFast.decode` converts its input element by element in Python before the Rust
decoder runs, which at thousands of long sequences a step costs more than the decoding itself;
the Rust tokenizer (`backend_tokenizer`) decodes a whole batch at once. A tokenizer that cleans up
tokenization spaces after decoding (transformers applies that with rules of its own) is decoded
one sequence at a time by its own `decode`, so the text is always the tokenizer's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def batch_decoder(tokenizer) -> Callable[[Sequence[Sequence[int]]], list[str]]:
    """texts = f(list of id lists), each equal to `tokenizer.decode(ids, skip_special_tokens=True)`."""
    backend = getattr(tokenizer, "backend_tokenizer", None)

    def one_by_one(seqs: Sequence[Sequence[int]]) -> list[str]:
        return [tokenizer.decode(list(s), skip_special_tokens=True) for s in seqs]

    def batched(seqs: Sequence[Sequence[int]]) -> list[str]:
        if getattr(tokenizer, "clean_up_tokenization_spaces", False):
            return one_by_one(seqs)
        ids = [s if isinstance(s, list) else [int(t) for t in s] for s in seqs]
        return list(backend.decode_batch(ids, skip_special_tokens=True))

    return one_by_one if backend is None else batched
