"""Output comparison rules: pure functions of (expected, produced) text.

Each returns None when the outputs match, else a short reason for the WA message.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def lcb_stdio(expected: str, produced: str) -> str | None:
    """LiveCodeBench `grade_stdio`: both outputs `.strip().split("\\n")`, equal line counts, and per
    stripped line either an exact match or equal whitespace-split `Decimal` lists (no epsilon)."""
    exp_lines, out_lines = expected.strip().split("\n"), produced.strip().split("\n")
    if len(exp_lines) != len(out_lines):
        return f"expected {len(exp_lines)} lines, got {len(out_lines)}"
    for i, (e, o) in enumerate(zip(exp_lines, out_lines)):
        e, o = e.strip(), o.strip()
        if e == o:
            continue
        ed, od = _decimals(e), _decimals(o)
        if ed is None or od is None or ed != od:
            return f"line {i + 1}: expected {e[:60]!r}, got {o[:60]!r}"
    return None


def _cf_tokens(text: str) -> list[list[str]]:
    # open-r1's normalisation: drop \r and blank lines, collapse whitespace, YES/NO case-insensitive.
    lines = []
    for line in text.replace("\r", "").split("\n"):
        toks = [t.upper() if t.lower() in ("yes", "no") else t for t in line.split()]
        if toks:
            lines.append(toks)
    return lines


def cf_diff(expected: str, produced: str) -> str | None:
    """Codeforces normalised diff: line-by-line token equality after `_cf_tokens`."""
    exp, out = _cf_tokens(expected), _cf_tokens(produced)
    for i, (e, o) in enumerate(zip(exp, out)):
        if e != o:
            return f"line {i + 1}: expected {' '.join(e)[:60]!r}, got {' '.join(o)[:60]!r}"
    if len(exp) != len(out):
        return f"expected {len(exp)} non-blank lines, got {len(out)}"
    return None


def lcb_functional(expected: str, produced: str) -> str | None:
    """LiveCodeBench `grade_call_based`: `json.loads(expected) == result`, tuples turned into lists.

    `produced` is the harness's JSON of the return value (JSON already turns tuples into lists).
    """
    try:
        want = json.loads(expected)
    except json.JSONDecodeError as e:
        raise ValueError(f"expected output is not JSON: {expected[:60]!r} ({e})") from None
    try:
        got = json.loads(produced)
    except json.JSONDecodeError:
        return f"return value is not JSON-serialisable: {produced[:60]!r}"
    if got != want:
        return f"expected {expected[:60]!r}, got {produced[:60]!r}"
    return None


COMPARATORS = {"livecodebench": lcb_stdio, "codeforces": cf_diff}
