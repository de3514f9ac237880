"""Dataset converters on small local files written here in each upstream column layout.

The hub loaders are the same functions with `local_path=None`; no test touches the network.
"""

import base64
import json
import pickle
import zlib

import pandas as pd
import pytest

from xrpo_verl.data.__main__ import main as cli
from xrpo_verl.data.code_sets import convert_cf_records, convert_lcb, lcb_files
from xrpo_verl.data.math_sets import MATH_SETS, convert_math
from xrpo_verl.data.schema import DAPO_PREFIX, DAPO_SUFFIX, PROMPT_FAMILIES, RowError

Q = "What is $1+1$?"


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


# Upstream layouts: one (or two) records per dataset, with the answer each converter must recover.
UPSTREAM = {
    "math_train": ([{"problem": Q, "level": "Level 1", "type": "Algebra", "solution": "So $1+1=\\boxed{2}$."}], ["2"]),
    "math500": ([{"problem": Q, "solution": "...", "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 1, "unique_id": "test/algebra/1.json"}], ["\\frac{1}{2}"]),
    "gsm8k": ([{"question": Q, "answer": "1+1=<<1+1=2>>2\n#### 1,002"}], ["1002"]),
    "aime2024": ([{"id": 60, "problem": Q, "solution": "...", "answer": "204", "url": "u", "year": "2024"}], ["204"]),
    "aime2025": ([{"problem": Q, "answer": 70, "id": "0"}], ["70"]),
    "amc23": ([{"id": 0, "question": Q, "answer": 27.0, "url": "u"}], ["27.0"]),
    "hmmt_feb_2025": ([{"problem_idx": 1, "problem": Q, "answer": "$\\sqrt{2}$", "problem_type": ["Algebra"]}], ["\\sqrt{2}"]),
    "brumo_2025": ([{"problem_idx": 1, "problem": Q, "answer": "18"}], ["18"]),
    "minerva": ([{"question": Q, "answer": "7.5"}], ["7.5"]),
    "olympiadbench": ([{"id": 1606, "question": Q, "final_answer": ["$3$", "$4$"], "solution": ["..."]}], ["3, 4"]),
    "dapo_math_17k": (
        [{"data_source": "math_dapo", "prompt": [{"content": DAPO_PREFIX + Q + DAPO_SUFFIX, "role": "user"}], "ability": "MATH",
          "reward_model": {"ground_truth": "34", "style": "rule-lighteval/MATH_v2"}, "extra_info": {"index": "a1b2"}}] * 3,
        ["34"],
    ),
}  # fmt: skip


def test_every_math_set_has_an_upstream_fixture():
    assert set(UPSTREAM) == set(MATH_SETS)


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_math_converter_reads_upstream_layout(name, tmp_path):
    records, answers = UPSTREAM[name]
    path = tmp_path / f"{name}.parquet"
    pd.DataFrame(records).to_parquet(path)
    rows, dropped = convert_math(name, str(path), family="qwen", dedupe=True)
    assert dropped == len(records) - len(answers)  # only DAPO repeats its problems
    assert [r["reward_model"]["ground_truth"] for r in rows] == answers
    row = rows[0]
    assert row["data_source"] == f"math/{name}" and row["ability"] == "math"
    assert row["prompt"] == [
        {"role": "user", "content": Q + "\nPlease reason step by step, and put your final answer within \\boxed{}."}
    ]
    assert row["extra_info"]["index"] == 0 and row["extra_info"]["question"] == Q
    assert row["extra_info"]["split"] == MATH_SETS[name].split


def test_dapo_family_rebuilds_dapo_prompt_and_duplicates_are_kept_by_default(tmp_path):
    records, _ = UPSTREAM["dapo_math_17k"]
    path = write_jsonl(tmp_path / "dapo.jsonl", records)
    rows, dropped = convert_math("dapo_math_17k", path, family="dapo")
    assert dropped == 0 and len(rows) == 3
    assert rows[0]["prompt"][0]["content"] == records[0]["prompt"][0]["content"]
    assert PROMPT_FAMILIES["dapo"].answer_format == "answer_line"


@pytest.mark.parametrize(
    "name, record, message",
    [
        ("gsm8k", {"question": Q, "answer": "no final line"}, "record 1.*'####'"),
        ("math_train", {"problem": Q, "solution": "no box"}, "record 1.*no \\\\boxed"),
        ("math500", {"problem": Q, "solution": "x"}, "record 1.*columns \\['answer', 'Answer'\\]"),
        ("aime2025", {"problem": "  ", "answer": "3"}, "row 1.*empty or non-text question"),
        ("minerva", {"question": Q, "answer": None}, "record 1"),
        ("dapo_math_17k", {"prompt": [{"content": Q, "role": "user"}], "reward_model": {"ground_truth": "1"}}, "DAPO"),
    ],
)
def test_malformed_row_raises_naming_it(name, record, message, tmp_path):
    good = UPSTREAM[name][0][0]
    path = write_jsonl(tmp_path / "d.jsonl", [good, record])
    with pytest.raises(RowError, match=message):
        convert_math(name, path)


def test_conversion_is_deterministic_and_the_cli_writes_the_same_rows(tmp_path):
    records = [{"question": f"q{i}", "answer": f"w\n#### {i}"} for i in range(5)]
    path = write_jsonl(tmp_path / "gsm.jsonl", records)
    first, _ = convert_math("gsm8k", path)
    second, _ = convert_math("gsm8k", path)
    assert first == second
    out = tmp_path / "out" / "gsm.parquet"
    assert cli(["math", "gsm8k", "--local", path, "--out", str(out)]) == 0
    table = pd.read_parquet(out)
    assert list(table["reward_model"].map(lambda r: r["ground_truth"])) == [str(i) for i in range(5)]
    assert list(table.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]


# --- LiveCodeBench -------------------------------------------------------------------------------


def _compressed(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def lcb_record(qid, date, functional=False):
    if functional:
        public = [{"input": "1\n2", "output": "3", "testtype": "functional"}]
        private = [{"input": "5\n7", "output": "12", "testtype": "functional"}]
        meta = json.dumps({"func_name": "add"})
    else:
        public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
        private = [{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]
        meta = "{}"
    return {
        "question_title": "Add", "question_content": "Add two numbers.", "platform": "atcoder", "question_id": qid,
        "contest_id": "abc1", "contest_date": date, "starter_code": "class Solution:\n    def add(self, a, b):\n        " if functional else "",
        "difficulty": "easy", "public_test_cases": json.dumps(public), "private_test_cases": _compressed(private), "metadata": meta,
    }  # fmt: skip


def test_lcb_versions_are_cumulative_or_single():
    assert lcb_files("release_v2") == ("test.jsonl", "test2.jsonl")
    assert lcb_files("v3") == ("test3.jsonl",)
    with pytest.raises(ValueError, match="release_v1"):
        lcb_files("v9")


def test_lcb_reads_versions_decodes_private_tests_and_filters_dates(tmp_path):
    write_jsonl(tmp_path / "test.jsonl", [lcb_record("a1", "2023-05-01T00:00:00")])
    write_jsonl(tmp_path / "test2.jsonl", [lcb_record("b2", "2024-09-01T00:00:00", functional=True)])
    rows = convert_lcb("release_v2", str(tmp_path))
    assert [r["extra_info"]["id"] for r in rows] == ["lcb/a1", "lcb/b2"]
    stdio = json.loads(rows[0]["extra_info"]["problem"])
    assert stdio["kind"] == "stdio" and stdio["tests"] == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "5 7\n", "output": "12\n"},
    ]
    functional = json.loads(rows[1]["extra_info"]["problem"])
    assert functional["kind"] == "functional" and functional["fn_name"] == "add" and len(functional["tests"]) == 2
    assert "class Solution" in rows[1]["prompt"][0]["content"]  # starter code in the prompt
    assert rows[0]["data_source"] == "code/livecodebench" and rows[0]["ability"] == "code"

    assert [r["extra_info"]["id"] for r in convert_lcb("v2", str(tmp_path))] == ["lcb/b2"]
    recent = convert_lcb("release_v2", str(tmp_path), start_date="2024-01-01")
    assert [r["extra_info"]["id"] for r in recent] == ["lcb/b2"]
    public_only = convert_lcb("release_v1", str(tmp_path), tests="public")
    assert len(json.loads(public_only[0]["extra_info"]["problem"])["tests"]) == 1


def test_lcb_refuses_a_pickle_that_imports_code(tmp_path):
    record = lcb_record("evil", "2024-01-01")
    record["private_test_cases"] = base64.b64encode(zlib.compress(pickle.dumps(pickle.loads))).decode()
    write_jsonl(tmp_path / "test.jsonl", [record])
    with pytest.raises(RowError, match="'evil'.*refusing to unpickle"):
        convert_lcb("release_v1", str(tmp_path))


# --- Codeforces (open-r1 layout) -------------------------------------------------------------------


def test_codeforces_converts_checker_and_reports_what_it_excludes(cf_record):
    records = [
        cf_record("1/A"),
        cf_record("2/B", interaction_format="interact"),
        cf_record("3/C", input_mode="file"),
        cf_record("4/D", official_tests=[]),
    ]
    rows, skipped = convert_cf_records(records, "test", "qwen", progress=False)
    assert [r["extra_info"]["id"] for r in rows] == ["cf/1/A"]
    assert skipped == {"interactive": ["2/B"], "input_mode 'file'": ["3/C"], "no official tests": ["4/D"]}
    problem = json.loads(rows[0]["extra_info"]["problem"])
    assert problem["judge"] == "codeforces" and problem["memory_mb"] == 256 and problem["time_limit_s"] == 1.0
    assert problem["checker"]["language"] == "python" and "open_r1_checker" in problem["checker"]["code"]
    assert "## Example 1" in rows[0]["prompt"][0]["content"]


def test_codeforces_malformed_record_raises_naming_it(cf_record):
    with pytest.raises(RowError, match="'5/E'.*time_limit"):
        convert_cf_records([cf_record("5/E", time_limit=None)], "test", "qwen", progress=False)
    with pytest.raises(RowError, match="cf/6/F.*time_limit_s"):
        convert_cf_records([cf_record("6/F", time_limit=600.0)], "test", "qwen", progress=False)
