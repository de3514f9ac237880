"""math-verify in a worker process: one JSON request per stdin line, one JSON reply per stdout line.

Runs as `python -m xrpo_verl.rewards._verify_worker`. math-verify's own timeouts use
`signal.alarm`, which only works in a main thread, so they are disabled here; the parent kills
this process when a request runs past its deadline (`_verify_pool.VerifyPool`).

Request:  {"gold": str, "pred": str}
Reply:    {"status": "ok", "correct": bool, "pred_parsed": str}
          {"status": "bad_gold", "reason": str}      ground truth does not parse
          {"status": "no_parse", "reason": str}      prediction does not parse
          {"status": "error", "reason": str}         anything else (a bug: the caller raises)
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache


def wrap_latex(text: str) -> str:
    """Put bare answer text in math mode, so math-verify's LaTeX extractor sees all of it."""
    return text if ("$" in text or "\\boxed" in text) else f"${text}$"


@lru_cache(maxsize=4096)
def _parse_gold(gold: str):
    from math_verify import parse

    return parse(wrap_latex(gold), parsing_timeout=None)


def _has_expression(parsed: list) -> bool:
    # parse() falls back to returning the raw string; only a sympy object means it really parsed.
    return any(not isinstance(item, str) for item in parsed)


def handle(request: dict) -> dict:
    from math_verify import parse, verify

    gold = _parse_gold(request["gold"])
    if not _has_expression(gold):
        return {"status": "bad_gold", "reason": f"math-verify cannot parse ground truth {request['gold']!r}"}
    pred = parse(wrap_latex(request["pred"]), parsing_timeout=None)
    if not _has_expression(pred):
        return {"status": "no_parse", "reason": f"math-verify cannot parse answer {request['pred'][:200]!r}"}
    correct = verify(gold, pred, timeout_seconds=None)
    return {"status": "ok", "correct": bool(correct), "pred_parsed": str(pred[0])[:200]}


def main() -> None:
    import logging
    import os

    # Replies go to a private copy of stdout; anything a library prints lands on stderr instead.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.disable(logging.WARNING)  # math-verify warns on every call that its timeout is off
    import math_verify  # noqa: F401  (import before "ready" so start-up is not billed to a request)

    out.write('{"status": "ready"}\n')
    out.flush()
    for line in sys.stdin:
        try:
            reply = handle(json.loads(line))
        except Exception as exc:  # reported to the caller, which raises: never scored silently
            reply = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
