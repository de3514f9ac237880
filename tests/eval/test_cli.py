"""`python -m xrpo_verl.eval` end to end on CPU: a tiny random Qwen2 (built here, a few seconds),
a local parquet in verl's schema, our math scorer (math-verify), MiniLM for LogDet, resume."""

import json

import pandas as pd
import pytest

from xrpo_verl.eval.__main__ import build_parser, evaluate, main
from xrpo_verl.eval.benchmarks import load_benchmark
from xrpo_verl.eval.generate import HFGenerator, Sample, SamplingConfig, make_generator
from xrpo_verl.lab.tiny_model import TinyModelConfig, build_model, build_tokenizer

QUESTIONS = [("2+3=?", "5"), ("7-4=?", "3"), ("10+1=?", "11")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """Random-init 1-layer Qwen2 with the tiny model's BPE tokenizer (no warm-up: answers are noise)."""
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64, sft_steps=0)
    tok = build_tokenizer(cfg)
    path = tmp_path_factory.mktemp("tiny") / "model"
    build_model(cfg, tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture()
def bench(tmp_path):
    rows = [
        {
            "data_source": "math/arith",
            "prompt": [{"role": "user", "content": q}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a},
            "extra_info": {"index": i, "split": "test"},
        }
        for i, (q, a) in enumerate(QUESTIONS)
    ]
    path = tmp_path / "arith.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _args(model, bench, out, *extra):
    return build_parser().parse_args(
        [
            "--model",
            model,
            "--bench",
            bench,
            "--out",
            str(out),
            "--k",
            "4",
            "--max-new-tokens",
            "6",
            "--backend",
            "hf",
            "--temperature",
            "1.0",
            "--top-p",
            "1.0",
            *extra,
        ]
    )


class CountingHF(HFGenerator):
    """The real transformers generator, counting the problems it is asked for."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.problems = 0

    def generate(self, messages, seeds):
        self.problems += len(messages)
        return super().generate(messages, seeds)


class Scripted:
    """Fake generator with fixed answers: the real model cannot be made to answer on cue."""

    name = "hf"

    def __init__(self, answers):
        self.answers = answers

    def generate(self, messages, seeds):
        return [[Sample(f"The answer is \\boxed{{{a}}}", 3) for a in self.answers[m[0]["content"]]] for m in messages]


def test_tiny_model_run_writes_all_outputs_and_resumes_without_redoing_problems(tiny_model, bench, tmp_path):
    sampling = SamplingConfig(k=4, temperature=1.0, top_p=1.0, max_new_tokens=6)
    gen = CountingHF(tiny_model, sampling)
    first = evaluate(_args(tiny_model, bench, tmp_path / "a", "--limit", "2"), gen)
    assert gen.problems == 2 and first["arith"]["problems"] == 2
    cache_file = tmp_path / "a" / "arith" / "samples.jsonl"
    with open(cache_file, "a") as f:
        f.write('{"key": "2", "fingerp')  # a kill in the middle of writing problem 3
    full = evaluate(_args(tiny_model, bench, tmp_path / "a"), gen)
    assert gen.problems == 3  # only the third problem was generated again
    m = full["arith"]
    assert m["problems"] == 3 and 0 < m["mean_length"] <= 6
    assert 0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= 1
    assert m["self_bleu"] is not None and m["logdet"] <= 4 * 1e-6  # real MiniLM embeddings
    records = [json.loads(line) for line in cache_file.read_text().splitlines()]
    assert [r["key"] for r in records] == ["0", "1", "2"] and all(len(r["samples"]) == 4 for r in records)
    for name in ("results.json", "results.md", "results.png"):
        assert (tmp_path / "a" / name).stat().st_size > 0
    # Per-problem seeds: a fresh uninterrupted run draws the very same samples.
    gen_fresh = CountingHF(tiny_model, sampling)
    evaluate(_args(tiny_model, bench, tmp_path / "b", "--no-logdet"), gen_fresh)
    fresh = [json.loads(line) for line in (tmp_path / "b" / "arith" / "samples.jsonl").read_text().splitlines()]
    assert [s["text"] for r in fresh for s in r["samples"]] == [s["text"] for r in records for s in r["samples"]]


def test_scores_come_from_the_math_scorer(bench, tmp_path):
    answers = {"2+3=?": ["5", "5", "6", "5"], "7-4=?": ["4", "4", "3", "x"], "10+1=?": ["11"] * 4}
    res = evaluate(_args("unused", bench, tmp_path, "--no-logdet"), Scripted(answers))["arith"]
    # c = 3, 1, 4 of n = 4
    assert res["pass@1"] == pytest.approx((3 + 1 + 4) / 12)
    assert res["pass@2"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert res["cons@4"] == pytest.approx(2 / 3)  # majority 5 right, 4 wrong, 11 right


def test_bad_inputs_name_the_problem(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="unknown benchmark 'aime2023'"):
        load_benchmark("aime2023")
    bad = tmp_path / "bad.parquet"
    pd.DataFrame([{"data_source": "math/x", "prompt": [{"role": "user", "content": "q"}]}]).to_parquet(bad)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['reward_model'\]"):
        load_benchmark(str(bad))
    shards = tmp_path / "global_step_5" / "actor"
    shards.mkdir(parents=True)
    (shards / "model_world_size_8_rank_0.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="sharded verl FSDP checkpoint; merge it first"):
        make_generator(str(shards), SamplingConfig(), "hf")
    with pytest.raises(ValueError, match="unknown generation backend 'tgi'"):
        make_generator(str(shards), SamplingConfig(), "tgi")
    assert main(["--model", str(shards), "--bench", str(bad), "--out", str(tmp_path / "o")]) == 2
