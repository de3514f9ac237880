"""Read upstream records from a local file or the Hugging Face hub, in the upstream column layout."""

from __future__ import annotations

import gzip
import json
import os


def read_local(path: str) -> list[dict]:
    """Records from .parquet, .jsonl(.gz) or .json(.gz) (a list, or {"data"/"cases"/"rows": [...]})."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such data file: {path}")
    name = path.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    opener = gzip.open if name.endswith(".gz") else open
    stem = name[:-3] if name.endswith(".gz") else name
    with opener(path, "rt", encoding="utf-8") as f:
        if stem.endswith(".jsonl"):
            records = []
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path} line {lineno} is not JSON: {exc}") from exc
            return records
        if stem.endswith(".json"):
            data = json.load(f)
            if isinstance(data, dict):
                key = next((k for k in ("data", "cases", "rows") if isinstance(data.get(k), list)), None)
                if key is None:
                    raise ValueError(f"{path}: a JSON object needs a list under 'data', 'cases' or 'rows'")
                data = data[key]
            return list(data)
    raise ValueError(f"unsupported data file {path!r}; allowed: .parquet, .jsonl, .json (optionally .gz)")


def read_hub(repo: str, config: str | None, split: str) -> list[dict]:
    """Records of one split of a hub dataset (needs network; tests use `read_local`)."""
    from datasets import load_dataset

    return load_dataset(repo, config, split=split).to_list()


def read_records(local_path: str | None, repo: str, config: str | None, split: str) -> list[dict]:
    """`local_path` when given, else the hub dataset `repo`/`config`/`split`."""
    return read_local(local_path) if local_path else read_hub(repo, config, split)
