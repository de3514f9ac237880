"""Report metrics from cached samples: hand-computed values, and the cache's resume rules."""

import json

import numpy as np
import pytest

from xrpo_verl.eval import cache
from xrpo_verl.eval.metrics_report import benchmark_metrics, markdown_table, report_ks, write_outputs


def _rec(key, accs, preds, texts=None, tokens=None):
    texts = texts or [f"answer {p} because {key} {i}" for i, p in enumerate(preds)]
    tokens = tokens or [10] * len(accs)
    return {
        "key": key,
        "samples": [
            {"text": t, "tokens": n, "score": a, "acc": a, "pred": p} for a, p, t, n in zip(accs, preds, texts, tokens)
        ],
    }


RECORDS = [
    _rec("a", [1, 1, 0, 1], ["3", "3", "4", "3"], tokens=[4, 8, 12, 16]),  # c = 3, majority "3" correct
    _rec("b", [0, 0, 1, 0], ["7", "7", "5", ""], tokens=[2, 2, 2, 2]),  # c = 1, majority "7" wrong
]


def test_report_ks_are_powers_of_two_up_to_k():
    assert report_ks(1) == [1]
    assert report_ks(16) == [1, 2, 4, 8, 16]
    assert report_ks(12) == [1, 2, 4, 8, 12]


def test_metrics_match_hand_computed_values():
    m = benchmark_metrics(RECORDS, k=4)
    assert m["pass@1"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    # pass@2: a: 1 - C(1,2)/C(4,2) = 1; b: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert m["pass@2"] == pytest.approx((1.0 + 0.5) / 2)
    assert m["pass@4"] == pytest.approx(1.0)
    assert m["cons@4"] == pytest.approx(0.5)
    assert m["mean_length"] == pytest.approx((4 + 8 + 12 + 16 + 8) / 8)
    assert 0 < m["self_bleu"] < 1 and m["logdet"] is None and m["problems"] == 2


def test_logdet_uses_the_given_embedder():
    eye = lambda texts: np.eye(len(texts), 8)  # orthonormal rows: log det(I + eps I) ~ 0 (the maximum)
    assert benchmark_metrics(RECORDS, k=4, embed=eye)["logdet"] == pytest.approx(4 * np.log1p(1e-6), abs=1e-9)
    same = lambda texts: np.ones((len(texts), 8))  # identical rows: a (near-)singular Gram matrix
    assert benchmark_metrics(RECORDS, k=4, embed=same)["logdet"] < -30


def test_too_few_samples_and_no_records_are_errors():
    with pytest.raises(ValueError, match="fewer than k = 8"):
        benchmark_metrics(RECORDS, k=8)
    with pytest.raises(ValueError, match="no finished problems"):
        benchmark_metrics([], k=4)


def test_outputs_are_written(tmp_path):
    results = {"bench": benchmark_metrics(RECORDS, k=4)}
    paths = write_outputs(results, tmp_path, "m")
    assert json.loads(paths["json"].read_text())["benchmarks"]["bench"]["pass@4"] == 1.0
    assert "| bench | 2 | 50.0 | 100.0 | 50.0 | 6.0 |" in markdown_table(results, "m")
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_cache_drops_a_torn_last_line_and_rejects_a_corrupt_one(tmp_path):
    path = tmp_path / "samples.jsonl"
    cache.append(path, {"key": "a", "x": 1})
    cache.append(path, {"key": "b", "x": 2})
    with open(path, "a") as f:
        f.write('{"key": "c", "x"')  # killed mid-write
    assert set(cache.load(path)) == {"a", "b"}
    assert path.read_text().endswith('"x": 2}\n')  # the torn tail is gone, appends stay valid
    cache.append(path, {"key": "c", "x": 3})
    assert cache.load(path)["c"]["x"] == 3
    path.write_text('{"key": "a"}\nnot json\n{"key": "b"}\n')
    with pytest.raises(ValueError, match="line 2 is corrupt"):
        cache.load(path)


def test_resuming_with_other_settings_is_an_error(tmp_path):
    cache.check_meta(tmp_path, {"model": "m", "k": 4})
    cache.check_meta(tmp_path, {"model": "m", "k": 4})  # same settings: fine
    with pytest.raises(ValueError, match=r"'k': \(4, 8\)"):
        cache.check_meta(tmp_path, {"model": "m", "k": 8})
