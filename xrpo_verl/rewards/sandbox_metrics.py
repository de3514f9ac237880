"""The code reward's per-step metrics, from the rows' results (`result.ScoreResult` fields).

Apart from the scorer (`code.py`) so that the trainer, which logs them, and the scorer, which
fills the fields they read, both sit above them: the trainer never imports a scorer.
"""

from __future__ import annotations

from xrpo_verl.rewards.result import CODE_VERDICTS


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals: the wall time during which any call ran."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def exclusive_seconds(busy: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """Length of the union of `busy` outside the union of `others`: the time only `busy` ran."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(others):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    total, reach = 0.0, float("-inf")
    for start, end in sorted(busy):
        start = max(start, reach)
        if end <= start:
            continue
        reach = end
        total += end - start - sum(max(0.0, min(end, e) - max(start, s)) for s, e in merged)
    return total


def step_metrics(infos: list[dict], step_s: float = 0.0) -> dict[str, float]:
    """Per-step sandbox metrics from the rows' reward_extra_info (rows without a verdict are ignored).

    reward/verdict/<V>: code rows with verdict V (every V of `CODE_VERDICTS`, zeros included);
    reward/sandbox/memo_hits: rows that took the verdict of the same program judged for another row;
    reward/sandbox/runs: judge calls (retries included); reward/sandbox/retries: calls beyond the
    first; reward/sandbox/judge_s: seconds summed over rows; reward/sandbox/busy_s: wall time
    during which at least one call ran (union of the rows' [start, end]); reward/sandbox/share:
    busy_s / step_s (0 when step_s is 0). Where rows carry `received_at` and `generate_s` (the
    trainer adds the agent loop's generation time), reward/sandbox/exclusive_s: the part of busy_s
    during which no row was generating (each row generates over [received_at - generate_s,
    received_at]): the sandbox alone on the step's critical path; reward/sandbox/exclusive_share:
    that over step_s.
    """
    counts = dict.fromkeys(CODE_VERDICTS, 0)
    runs, judge_s, intervals, generating, hits = 0, 0.0, [], [], 0
    for info in infos:
        hits += int(float(info.get("memo_hit", 0.0) or 0.0))
        verdict = str(info.get("verdict", "") or "")
        if verdict:
            counts[verdict] = counts.get(verdict, 0) + 1
        attempts = int(info.get("attempts", 0) or 0)
        runs += attempts
        judge_s += float(info.get("sandbox_s", 0.0) or 0.0)
        if attempts:
            intervals.append((float(info["sandbox_start"]), float(info["sandbox_end"])))
        if info.get("received_at") and "generate_s" in info:
            end = float(info["received_at"])
            generating.append((end - float(info["generate_s"]), end))
    busy = busy_seconds(intervals)
    out = {f"reward/verdict/{v}": float(c) for v, c in counts.items()}
    out.update(
        {
            "reward/sandbox/runs": float(runs),
            "reward/sandbox/memo_hits": float(hits),
            "reward/sandbox/retries": float(runs - len(intervals)),
            "reward/sandbox/judge_s": judge_s,
            "reward/sandbox/busy_s": busy,
            "reward/sandbox/share": busy / step_s if step_s > 0 else 0.0,
        }
    )
    if generating:
        exclusive = exclusive_seconds(intervals, generating)
        out["reward/sandbox/exclusive_s"] = exclusive
        out["reward/sandbox/exclusive_share"] = exclusive / step_s if step_s > 0 else 0.0
    return out
