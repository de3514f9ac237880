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


def decode_each_span(
    sources: Sequence,
    spans: Sequence[Span],
    decode: Callable[[list[int]], str],
    decode_spans: Callable[[Sequence, Sequence[Span]], list[str]] | None = None,
) -> list[str]:
    """The text of every span: in one call with `decode_spans` (a `span_decoder`), else `decode` one by one."""
    if decode_spans is not None:
        return decode_spans(sources, spans)
    return [decode(sources[s][a:b].tolist()) for s, a, b in spans]


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
        if not len(spans):
            return []
        span = np.asarray(spans, dtype=np.int64).reshape(-1, 3)  # (S, 3) source, start, end
        src, start, end = span.T
        size = np.array([len(x) for x in sources], dtype=np.int64)  # (sources,)
        bad = (src < 0) | (src >= len(sources))
        bad |= (start < 0) | (start > end) | (end > size[np.where(bad, 0, src)])
        if bad.any():
            s, a, b = span[int(np.argmax(bad))].tolist()
            raise ValueError(f"span {(s, a, b)} is not within source {s} of {len(sources[s])} tokens")
        # only the part of each source some span reads, [lo, hi), each token once
        read = start < end
        lo = np.full(len(sources), np.iinfo(np.int64).max)
        hi = np.zeros(len(sources), dtype=np.int64)
        np.minimum.at(lo, src[read], start[read])
        np.maximum.at(hi, src[read], end[read])
        used = np.flatnonzero(hi > 0)
        if used.size == 0:
            return [""] * len(span)
        parts = [np.asarray(sources[s][lo[s] : hi[s]], dtype=np.int64).reshape(-1) for s in used.tolist()]
        first = np.zeros(len(sources), dtype=np.int64)  # source -> place of its token lo in `ids`
        first[used] = np.cumsum([0] + [p.size for p in parts[:-1]])
        ids = np.concatenate(parts)  # (N,)
        if ids.min() < 0:
            raise ValueError(f"token ids must be >= 0, got {int(ids.min())}")
        ids = np.where(ids < self.unknown, ids, self.unknown)
        lengths = self.lengths[ids]
        after = np.cumsum(lengths)  # (N,) byte offset after each token
        # byte k of the buffer is blob[start of its token + its place in the token]
        index = np.int32 if int(after[-1]) < 2**31 else np.int64  # half the memory traffic of int64
        shift = (self.starts[ids] - (after - lengths)).astype(index)
        gather = np.repeat(shift, lengths) + np.arange(int(after[-1]), dtype=index)
        buf = self.blob[gather].tobytes()
        before = np.concatenate([[0], after])  # (N + 1,) byte offset before each token
        token = np.where(read, first[src] - lo[np.where(read, src, 0)], 0)  # span's token 0 in `ids`
        byte_from = before[np.where(read, token + start, 0)].tolist()  # an empty span reads [0, 0)
        byte_to = before[np.where(read, token + end, 0)].tolist()
        return [buf[x:y].decode("utf-8", errors="replace") for x, y in zip(byte_from, byte_to)]
