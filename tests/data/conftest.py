"""Shared records for the converter tests."""

import pytest

CHECKER = "import sys\nexp = open(sys.argv[2]).read().split()\ngot = open(sys.argv[3]).read().split()\nprint(1 if sorted(exp) == sorted(got) else 0)\n"


def _cf_record(pid, **over):
    record = {
        "id": pid, "contest_id": 1, "index": "A", "title": "Pair", "description": "Print a and b in any order.",
        "input_format": "Two integers.", "output_format": "Two integers.", "interaction_format": None, "note": None,
        "examples": [{"input": "1 2\n", "output": "1 2\n"}], "time_limit": 1.0, "memory_limit": 256.0, "input_mode": "stdio",
        "generated_checker": CHECKER, "official_tests": [{"input": "1 2\n", "output": "1 2\n"}, {"input": "3 4\n", "output": "3 4\n"}],
        "rating": 800, "tags": ["implementation"],
    }  # fmt: skip
    record.update(over)
    return record


@pytest.fixture
def cf_record():
    """Builder of an open-r1 style Codeforces record: `cf_record(pid, **overrides)`."""
    return _cf_record
