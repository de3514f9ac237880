"""Per-problem JSONL cache: one line per finished problem, appended and flushed as soon as it is scored.

A killed evaluation leaves at most one half-written last line; `load` drops it (and truncates the
file there), so the restart regenerates only that problem. `meta.json` pins the model and the
decoding; resuming with different settings is an error rather than a silent mix.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def check_meta(folder: Path, meta: dict) -> None:
    """Write meta.json on first use; on resume, raise if any setting differs."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "meta.json"
    if not path.exists():
        path.write_text(json.dumps(meta, indent=1, sort_keys=True))
        return
    old = json.loads(path.read_text())
    diff = {k: (old.get(k), meta.get(k)) for k in sorted(set(old) | set(meta)) if old.get(k) != meta.get(k)}
    if diff:
        raise ValueError(
            f"{folder} holds samples made with other settings {diff} (cached, requested); "
            "use a new --out folder or --overwrite"
        )


def load(path: Path) -> dict[str, dict]:
    """Finished problems by key. A torn last line (no newline: the write was cut) is dropped and
    cut from the file; a corrupt complete line is an error."""
    if not path.exists():
        return {}
    raw = path.read_bytes()
    *complete, tail = raw.split(b"\n")
    done: dict[str, dict] = {}
    for i, line in enumerate(complete):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path} line {i + 1} is corrupt ({exc}); delete the file to start over") from None
        done[record["key"]] = record
    if tail:
        with open(path, "r+b") as f:
            f.truncate(len(raw) - len(tail))
    return done


def append(path: Path, record: dict) -> None:
    """Append one finished problem and make it durable before moving on."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
