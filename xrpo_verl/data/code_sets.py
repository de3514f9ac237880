"""Code dataset converters: LiveCodeBench (code_generation_lite) and Codeforces (open-r1 layout).

Each output row carries the sandbox problem (tests, limits, checker) in `extra_info["problem"]`.
Problems that cannot be graded by our sandbox (Codeforces interactive or file-I/O problems, no
tests) are not converted; they are returned in `skipped` with the reason, never dropped silently.
A malformed record raises `RowError` naming it.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zlib

from tqdm import tqdm

from xrpo_verl.data.schema import RowError, code_row
from xrpo_verl.data.sources import read_local

# --- LiveCodeBench -------------------------------------------------------------------------------

LCB_REPO = "livecodebench/code_generation_lite"
LCB_FILES = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")
LCB_TIME_LIMIT_S = 6.0  # LiveCodeBench's default --timeout per test
LCB_MEMORY_MB = 1024  # LiveCodeBench sets no cap; the sandbox's default
TEST_SETS = ("public", "private", "all")


def lcb_files(version: str) -> tuple[str, ...]:
    """`release_vN`: cumulative files up to N (as LiveCodeBench's version_tag); `vN`: only release N's file."""
    allowed = [f"release_v{i}" for i in range(1, 7)] + ["release_latest"] + [f"v{i}" for i in range(1, 7)]
    if version not in allowed:
        raise ValueError(f"unknown LiveCodeBench version {version!r}; allowed: {allowed}")
    if version == "release_latest":
        return LCB_FILES
    n = int(version[-1])
    return LCB_FILES[:n] if version.startswith("release_") else (LCB_FILES[n - 1],)


class _StrOnlyUnpickler(pickle.Unpickler):
    """LiveCodeBench pickles a JSON *string*; refuse anything that would import code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: only a JSON string is expected")


def decode_lcb_tests(cell: str) -> list[dict]:
    """Test cases from a LiveCodeBench cell: plain JSON, or base64(zlib(pickle(JSON string)))."""
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        raw = zlib.decompress(base64.b64decode(cell.encode("utf-8")))
        return json.loads(_StrOnlyUnpickler(io.BytesIO(raw)).load())


def lcb_problem(record: dict, tests: str, where: str) -> dict:
    """The sandbox problem for one LiveCodeBench record."""
    if tests not in TEST_SETS:
        raise ValueError(f"tests {tests!r} is not one of {list(TEST_SETS)}")
    try:
        cases = []
        if tests in ("public", "all"):
            cases += decode_lcb_tests(record["public_test_cases"])
        if tests in ("private", "all"):
            cases += decode_lcb_tests(record["private_test_cases"])
        types = {c["testtype"] for c in cases}
        metadata = json.loads(record.get("metadata") or "{}")
    except (KeyError, TypeError, ValueError, zlib.error, pickle.UnpicklingError) as exc:
        raise RowError(f"{where}: cannot read its test cases: {type(exc).__name__}: {exc}") from exc
    if len(types) != 1 or not types <= {"stdin", "functional"}:
        raise RowError(f"{where}: expected one test type, stdin or functional; got {sorted(types)}")
    kind = "stdio" if types == {"stdin"} else "functional"
    return {
        "id": f"lcb/{record['question_id']}",
        "judge": "livecodebench",
        "kind": kind,
        "fn_name": metadata.get("func_name") if kind == "functional" else None,
        "tests": [{"input": c["input"], "output": c["output"]} for c in cases],
        "time_limit_s": LCB_TIME_LIMIT_S,
        "memory_mb": LCB_MEMORY_MB,
        "checker": None,
    }


def convert_lcb_records(
    records: list[dict], split: str, family: str, tests: str = "all", progress: bool = True
) -> list[dict]:
    rows = []
    for i, record in enumerate(tqdm(records, desc="livecodebench", disable=not progress, unit="problem")):
        where = f"livecodebench record {i} (question_id {record.get('question_id')!r})"
        if "question_id" not in record or "question_content" not in record:
            raise RowError(f"{where}: missing question_id or question_content (has {sorted(record)})")
        problem = lcb_problem(record, tests, where)
        rows.append(
            code_row(
                "livecodebench", split, i, record["question_content"], problem, record.get("starter_code") or "", family
            )
        )
    return rows


def read_lcb(version: str, local_dir: str | None) -> list[dict]:
    """Records of a LiveCodeBench version, from `local_dir` (holding test*.jsonl) or the hub."""
    records = []
    for name in lcb_files(version):
        if local_dir:
            path = os.path.join(local_dir, name)
        else:
            from huggingface_hub import hf_hub_download

            path = hf_hub_download(LCB_REPO, name, repo_type="dataset")
        records += read_local(path)
    return records


def convert_lcb(
    version: str = "release_v5",
    local_dir: str | None = None,
    family: str = "qwen",
    tests: str = "all",
    start_date: str | None = None,
    end_date: str | None = None,
) -> list[dict]:
    """LiveCodeBench problems of `version`, optionally only contests in [start_date, end_date] (ISO dates)."""
    records = read_lcb(version, local_dir)
    if start_date or end_date:
        lo, hi = start_date or "", end_date or "9999"
        records = [r for r in records if lo <= str(r.get("contest_date", ""))[:10] <= hi]
    return convert_lcb_records(records, "test", family, tests)


# --- Codeforces (open-r1/codeforces) -------------------------------------------------------------

CF_REPO = "open-r1/codeforces"

# open-r1's generated checkers print 1 (or 100) to accept; the sandbox accepts on exit code 0.
_CHECKER_ADAPTER = """\
import contextlib, io, sys
SOURCE = __SOURCE__
captured = io.StringIO()
with contextlib.redirect_stdout(captured):
    try:
        exec(compile(SOURCE, "open_r1_checker.py", "exec"), {"__name__": "__main__"})
    except SystemExit:
        pass
words = captured.getvalue().split()
sys.exit(0 if words and words[-1] in ("1", "100") else 1)
"""


def adapt_checker(source: str) -> dict:
    """Wrap an open-r1 checker (argv: input, expected, produced; prints 1/100 to accept) for the sandbox."""
    return {"language": "python", "code": _CHECKER_ADAPTER.replace("__SOURCE__", repr(source))}


def cf_statement(record: dict) -> str:
    parts = [f"# {record.get('title') or record['id']}", record.get("description") or ""]
    for title, key in (("Input", "input_format"), ("Output", "output_format"), ("Note", "note")):
        if record.get(key):
            parts.append(f"## {title}\n{record[key]}")
    for j, ex in enumerate(record.get("examples") or [], 1):
        parts.append(f"## Example {j}\nInput:\n```\n{ex['input']}\n```\nOutput:\n```\n{ex['output']}\n```")
    return "\n\n".join(p for p in parts if p.strip())


def _number(record: dict, key: str, where: str) -> float:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def cf_skip_reason(record: dict) -> str | None:
    if record.get("interaction_format"):
        return "interactive"
    if (record.get("input_mode") or "stdio") != "stdio":
        return f"input_mode {record.get('input_mode')!r}"
    if not record.get("official_tests"):
        return "no official tests"
    return None


def convert_cf_records(records: list[dict], split: str, family: str, progress: bool = True) -> tuple[list[dict], dict]:
    """Returns (rows, skipped) where skipped maps a reason to the problem ids it excluded."""
    rows, skipped = [], {}
    for i, record in enumerate(tqdm(records, desc="codeforces", disable=not progress, unit="problem")):
        where = f"codeforces record {i} (id {record.get('id')!r})"
        if "id" not in record:
            raise RowError(f"{where}: missing 'id' (has {sorted(record)})")
        reason = cf_skip_reason(record)
        if reason:
            skipped.setdefault(reason, []).append(record["id"])
            continue
        try:
            problem = {
                "id": f"cf/{record['id']}",
                "judge": "codeforces",
                "kind": "stdio",
                "fn_name": None,
                "tests": [{"input": t["input"], "output": t["output"]} for t in record["official_tests"]],
                "time_limit_s": _number(record, "time_limit", where),
                "memory_mb": int(_number(record, "memory_limit", where)),
                "checker": adapt_checker(record["generated_checker"]) if record.get("generated_checker") else None,
            }
        except (KeyError, TypeError) as exc:
            raise RowError(f"{where}: {type(exc).__name__}: {exc}") from exc
        rows.append(code_row("codeforces", split, i, cf_statement(record), problem, "", family))
    return rows, skipped


def convert_cf(split: str = "test", local_path: str | None = None, family: str = "qwen") -> tuple[list[dict], dict]:
    from xrpo_verl.data.sources import read_records

    return convert_cf_records(read_records(local_path, CF_REPO, "default", split), split, family)
