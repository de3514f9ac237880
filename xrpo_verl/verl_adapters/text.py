"""Token ids to text for many spans at once, each as the tokenizer's own `decode` gives it.

The novelty and prefix paths decode thousands of response tails a step, many of them overlapping
spans of one response (a hard prompt's candidate prefixes). Two ways, one result:

- a byte-level BPE tokenizer (GPT-2's scheme: Qwen, Llama-3, the lab's tiny models) whose decoder
  is exactly `decoders.ByteLevel` and that cleans up no tokenization spaces: its decode is "the
  bytes of every kept token, concatenated, read as UTF-8 with U+FFFD for each maximal invalid
  subpart" (the Rust `ByteLevel` decoder, `String::from_utf8_lossy`). So each token's bytes are
  looked up once in a table built from the tokenizer, each source is turned into bytes once with
  cumulative per-token byte offsets, and a span is the byte slice between its tokens' offsets,
  read with errors="replace" (the same substitution rule);
- any other tokenizer: the Rust tokenizer's `decode_batch` over the spans (`PreTrainedTokenizerFast.decode`
  converts its input element by element in Python first, which at this volume costs more than the
  decoding), or, when transformers cleans up tokenization spaces with rules of its own, the
  tokenizer's `decode` one span at a time.

`tests/verl_adapters/test_text.py` checks both against `tokenizer.decode(ids, skip_special_tokens=True)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Span = tuple[int, int, int]  # (source, start, end): the tokens sources[source][start:end]


def span_decoder(tokenizer) -> Callable[[Sequence, Sequence[Span]], list[str]]:
    """texts = f(sources, spans): texts[k] = tokenizer.decode(sources[s][a:b], skip_special_tokens=True)
    for spans[k] = (s, a, b); sources are token id sequences (lists, numpy or torch int arrays)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    table = _ByteTable.of(backend) if backend is not None else None

    def decode(sources: Sequence, spans: Sequence[Span]) -> list[str]:
        if table is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False):
            return table.decode(sources, spans)
        seqs = [[int(t) for t in sources[s][a:b]] for s, a, b in spans]
        if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
            return [tokenizer.decode(ids, skip_special_tokens=True) for ids in seqs]
        return list(backend.decode_batch(seqs, skip_special_tokens=True))

    decode.byte_level = table is not None  # for the tests: which way this tokenizer takes
    return decode


def batch_decoder(tokenizer) -> Callable[[Sequence], list[str]]:
    """texts = f(sequences), each equal to `tokenizer.decode(ids, skip_special_tokens=True)`."""
    spans = span_decoder(tokenizer)
    return lambda seqs: spans(seqs, [(i, 0, len(s)) for i, s in enumerate(seqs)])


def _byte_of_char() -> dict[str, int]:
    """GPT-2's reversible byte <-> printable character map, the one `decoders.ByteLevel` inverts."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in printable}
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + len(chars) - len(printable)
    return {chr(c): b for b, c in chars.items()}


class _ByteTable:
    """Every token's bytes as the `ByteLevel` decoder produces them, special tokens empty."""

    def __init__(self, pieces: list[bytes]) -> None:
        # one more entry, empty, for every id the tokenizer does not know (the Rust decode skips them)
        self.lengths = np.array([len(p) for p in pieces] + [0], dtype=np.int64)  # (V + 1,)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])  # (V + 1,) into blob
        self.blob = np.frombuffer(b"".join(pieces) or b"\0", dtype=np.uint8)
        self.unknown = len(pieces)

    @classmethod
    def of(cls, backend) -> _ByteTable | None:
        """The table of a pure byte-level tokenizer; None for any other decoder."""
        from tokenizers import decoders

        if type(backend.decoder) is not decoders.ByteLevel:
            return None
        byte_of = _byte_of_char()
        vocab = backend.get_vocab(with_added_tokens=True)
        # skip_special_tokens skips a token whose string is a special added token's (tokenizers' rule)
        special = {t.content for t in backend.get_added_tokens_decoder().values() if t.special}
        pieces = []
        for i in range(max(vocab.values(), default=-1) + 1):
            token = backend.id_to_token(i)
            if token is None or token in special:
                pieces.append(b"")
            elif all(c in byte_of for c in token):
                pieces.append(bytes(byte_of[c] for c in token))
            else:  # not byte-level text (an added token with a space, say): ByteLevel keeps it as UTF-8
                pieces.append(token.encode())
        return cls(pieces)

    def decode(self, sources: Sequence, spans: Sequence[Span]) -> list[str]:
        # only the part of each source some span reads: [lo, hi)
        lo: dict[int, int] = {}
        hi: dict[int, int] = {}
        for s, a, b in spans:
            if not 0 <= a <= b <= len(sources[s]):
                raise ValueError(f"span {(s, a, b)} is not within source {s} of {len(sources[s])} tokens")
            if a < b:
                lo[s], hi[s] = min(lo.get(s, a), a), max(hi.get(s, b), b)
        if not lo:
            return [""] * len(spans)
        order = list(lo)
        parts = [np.asarray(sources[s][lo[s] : hi[s]], dtype=np.int64).reshape(-1) for s in order]
        ids = np.concatenate(parts)  # (N,) every read token once
        if ids.size and ids.min() < 0:
            raise ValueError(f"token ids must be >= 0, got {int(ids.min())}")
        ids = np.where(ids < self.unknown, ids, self.unknown)
        lengths = self.lengths[ids]
        ends = np.cumsum(lengths)  # (N,) byte offset after each token
        # byte k of the buffer is blob[start of its token + its place in the token]
        gather = np.repeat(self.starts[ids] - (ends - lengths), lengths) + np.arange(int(ends[-1]))
        buf = self.blob[gather].tobytes()
        offsets = np.concatenate([[0], ends]).tolist()  # (N + 1,) byte offset before each token
        first = dict(zip(order, np.cumsum([0] + [p.size for p in parts[:-1]]).tolist()))  # source -> its first token
        out = []
        for s, a, b in spans:
            if a >= b:
                out.append("")
                continue
            k = first[s] - lo[s]
            out.append(buf[offsets[k + a] : offsets[k + b]].decode("utf-8", errors="replace"))
        return out
