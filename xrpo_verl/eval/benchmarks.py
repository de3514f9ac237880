"""Benchmarks as rows in verl's RL parquet schema: by name through our converters, or a local parquet.

A spec is one of:
    NAME              a math set of `xrpo_verl.data.math_sets.MATH_SETS` (from the hub), or
                      livecodebench / codeforces (our code converters)
    NAME=PATH         the same converter on a local upstream file (offline clusters)
    PATH.parquet      rows already in verl's schema (`python -m xrpo_verl.data ...` output)
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")
CODE_BENCHMARKS = ("livecodebench", "codeforces")


@dataclass(frozen=True)
class Problem:
    """One benchmark problem."""

    key: str  # stable id within the benchmark (cache key)
    data_source: str
    messages: list  # chat messages [{"role", "content"}]
    ground_truth: object
    extra_info: dict

    @property
    def fingerprint(self) -> str:
        """Hash of what the answer depends on, so a cache never mixes two versions of a problem."""
        blob = json.dumps([self.data_source, self.messages, str(self.ground_truth)], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def problems_from_rows(rows: list[dict], where: str) -> list[Problem]:
    """verl rows -> Problems; a row missing a required column raises naming it."""
    out, seen = [], set()
    for i, row in enumerate(rows):
        missing = [c for c in REQUIRED_COLUMNS if c not in row or row[c] is None]
        if missing:
            raise ValueError(f"{where} row {i} lacks column(s) {missing}; verl's schema needs {list(REQUIRED_COLUMNS)}")
        messages = row["prompt"]
        messages = [dict(m) for m in (messages.tolist() if hasattr(messages, "tolist") else messages)]
        if not messages or not all("role" in m and "content" in m for m in messages):
            raise ValueError(f"{where} row {i}: prompt must be a non-empty list of chat messages with role/content")
        extra = dict(row.get("extra_info") or {})
        key = str(extra.get("id", extra.get("index", i)))
        if key in seen:
            key = f"{key}#{i}"
        seen.add(key)
        reward_model = row["reward_model"]
        out.append(Problem(key, str(row["data_source"]), messages, reward_model["ground_truth"], extra))
    if not out:
        raise ValueError(f"{where} holds no problems")
    return out


def bench_name(spec: str) -> str:
    """Short name used for output folders and tables."""
    name = spec.split("=", 1)[0]
    return os.path.splitext(os.path.basename(name))[0] if name.endswith(".parquet") else name


def load_benchmark(spec: str, family: str = "qwen") -> list[Problem]:
    """Rows of a benchmark spec (see module docstring)."""
    from xrpo_verl.data.math_sets import MATH_SETS

    name, _, local = spec.partition("=")
    if name.endswith(".parquet") and not local:
        if not os.path.isfile(name):
            raise ValueError(f"benchmark file {name!r} does not exist")
        import pyarrow.parquet as pq

        return problems_from_rows(pq.read_table(name).to_pylist(), name)
    if name in MATH_SETS:
        from xrpo_verl.data.math_sets import convert_math

        rows, _ = convert_math(name, local or None, None, family)
    elif name == "livecodebench":
        from xrpo_verl.data.code_sets import convert_lcb

        rows = convert_lcb(local_dir=local or None, family=family)
    elif name == "codeforces":
        from xrpo_verl.data.code_sets import convert_cf

        rows, _ = convert_cf("test", local or None, family)
    else:
        known = sorted(MATH_SETS) + list(CODE_BENCHMARKS)
        raise ValueError(
            f"unknown benchmark {spec!r}; use a .parquet path in verl's schema or one of {known} "
            "(NAME=LOCAL_FILE reads the upstream file offline)"
        )
    return problems_from_rows(rows, spec)
