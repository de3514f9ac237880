"""The tiny code task: statements, hidden tests, splits and rows (judged in the real sandbox)."""

import json
import random

import pytest

from sandbox import Problem
from sandbox.backends.bwrap import bwrap_available
from xrpo_verl.lab import code_task
from xrpo_verl.lab.code_task import CodeProblem
from xrpo_verl.lab.tiny_model import TinyModelConfig
from xrpo_verl.rewards.code import CodeRewardConfig, compute_score
from xrpo_verl.rewards.routing import scorer_kind

needs_bwrap = pytest.mark.skipif(bwrap_available() is not None, reason=f"no bubblewrap: {bwrap_available()}")
BWRAP = CodeRewardConfig(backend="bwrap")


def test_statement_program_and_hidden_tests_by_hand():
    p = CodeProblem("pair", "a*b+3")
    assert p.question == "Read a and b. Print a*b+3."
    assert p.answer == "```python\na,b=map(int,input().split())\nprint(a*b+3)\n```"
    d = code_task.problem_dict(p)
    assert (d["id"], d["judge"], d["kind"]) == ("tiny/pair/a*b+3", "livecodebench", "stdio")
    assert len(d["tests"]) == code_task.TESTS_PER_PROBLEM
    for t in d["tests"]:
        a, b = map(int, t["input"].split())
        assert t["output"] == f"{a * b + 3}\n"
    Problem.from_dict(d)
    assert code_task.problem_dict(p) == d  # deterministic
    s = code_task.problem_dict(CodeProblem("list", "*sorted(x)"))
    for t in s["tests"]:
        assert t["output"] == " ".join(map(str, sorted(map(int, t["input"].split())))) + "\n"


def test_behaviour_duplicates_are_dropped_and_splits_are_disjoint():
    problems = code_task.all_problems()
    exprs = {p.expr for p in problems}
    assert "a+b+1" in exprs and "b+a+1" not in exprs and "a+1+b" not in exprs  # same program as a+b+1
    assert len(problems) == len(set(problems))
    train, heldout = code_task.train_and_heldout(32, seed=5)
    assert len(heldout) == 32 and len(train) + 32 == len(problems)
    assert not set(train) & set(heldout)


TAIL = code_task.CodeConfig(tail_ops=code_task.TAIL_OPS, tail_share=0.05)


def test_the_tail_adds_mod_and_floor_division_problems_and_leaves_the_rest_as_it_was():
    plain, tailed = code_task.all_problems(), code_task.all_problems(TAIL)
    assert tailed[: len(plain)] == plain and not any(map(code_task.in_tail, plain))
    tail = tailed[len(plain) :]
    assert all(map(code_task.in_tail, tail)) and {"a%2+b", "b//9*a"} <= {p.expr for p in tail}
    for t in code_task.problem_dict(CodeProblem("pair", "b//4*a"))["tests"]:
        a, b = map(int, t["input"].split())
        assert t["output"] == f"{b // 4 * a}\n"
    # the warm-up draws the tail at its share; without a tail, draws are what they always were
    draws = code_task.sample_problems(4000, seed=3, config=TAIL)
    assert 0.03 < sum(map(code_task.in_tail, draws)) / len(draws) < 0.07
    rng = random.Random(3)
    assert code_task.sample_problems(50, seed=3) == [rng.choice(plain) for _ in range(50)]
    with pytest.raises(ValueError, match="tail_share"):
        code_task.CodeConfig(tail_share=0.1)
    with pytest.raises(ValueError, match="tail_ops"):
        code_task.CodeConfig(tail_ops=("**",))


def test_planted_tests_contradict_the_statement():
    for p in code_task.planted_problems():
        honest, planted = code_task.problem_dict(p), code_task.planted_problem_dict(p)
        assert planted["id"] == "planted/" + honest["id"]
        for h, t in zip(honest["tests"], planted["tests"], strict=True):
            assert h["input"] == t["input"] and int(t["output"]) == int(h["output"]) + 1


def test_rows_follow_the_converters_shape_and_route_to_the_code_scorer(tmp_path):
    train, heldout = code_task.write_parquets(tmp_path, 8, seed=1, n_train=5)
    import pandas as pd

    rows = pd.read_parquet(train)
    assert len(rows) == 5 and len(pd.read_parquet(heldout)) == 8
    row = rows.iloc[0]
    problem = json.loads(row["extra_info"]["problem"])
    assert row["reward_model"]["ground_truth"] == problem["id"] == row["extra_info"]["id"]
    assert row["prompt"][0]["content"].startswith("Read ")
    assert scorer_kind(row["data_source"]) == "code"


def test_tokenizer_config_keeps_other_tasks_cache_keys():
    # the `code` field was added later: arith and addition models keep the keys of their caches
    # (which changed on purpose once since, when the build pinned the CPU kernels)
    assert TinyModelConfig().key == "ae5cc51e3fb4"
    assert TinyModelConfig(task="addition", sft_steps=200, sft_schedule_steps=600).key == "4c18b4ea8cab"
    # ...and the premise testbed's fields (styles, families, few-shot warm-up) too, at their defaults
    from xrpo_verl.lab import code_rl

    assert code_rl.MODEL.key == "72da08585662"
    # the hard tail's fields, at their defaults
    assert code_rl.MODEL.code == code_task.CodeConfig()
    # the code study's model (a fixed step count, before the stopping rule) keeps its key
    assert TinyModelConfig(task="code", vocab_size=512, sft_steps=165, sft_schedule_steps=600).key == "687647743790"
    assert TinyModelConfig(task="code").key != TinyModelConfig(task="code", vocab_size=500).key


SMALL = dict(task="code", vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
SMALL["intermediate_size"] = 64


def test_stopping_rule_is_checked():
    with pytest.raises(ValueError, match="sft_stop_at needs task 'code'"):
        TinyModelConfig(sft_stop_at=0.5)
    with pytest.raises(ValueError, match="sft_stop_at"):
        TinyModelConfig(task="code", sft_stop_at=1.5)
    assert TinyModelConfig(task="code", sft_stop_at=0.4).key != TinyModelConfig(task="code", sft_stop_at=0.5).key


def test_warm_up_stops_at_the_first_probe_that_reaches_the_target(monkeypatch):
    """The rule over a probe stubbed with a rising share (the real probe is below): probes start at
    half of sft_steps, every sft_probe_every steps, and the first at or over the target ends it."""
    from xrpo_verl.lab import tiny_model

    config = TinyModelConfig(**SMALL, sft_steps=20, sft_batch_size=4, sft_stop_at=0.5, sft_probe_every=3)
    shares = iter([0.1, 0.3, 0.5, 0.9])
    monkeypatch.setattr(tiny_model, "sampled_match_rate", lambda *a, **k: next(shares))
    tokenizer = tiny_model.build_tokenizer(config)
    model = tiny_model.build_model(config, tokenizer)
    probes = []
    losses = tiny_model.warm_up(model, tokenizer, config, log_every=0, probes=probes)
    assert probes == [(12, 0.1), (15, 0.3), (18, 0.5)]
    assert len(losses) == 18


def test_probe_samples_from_its_own_random_state():
    """The real probe: a share in [0, 1] (0 for an untrained model), the same on a second call,
    and the caller's torch random state untouched."""
    import torch

    from xrpo_verl.lab import tiny_model

    config = TinyModelConfig(**SMALL, sft_stop_at=0.5)
    tokenizer = tiny_model.build_tokenizer(config)
    model = tiny_model.build_model(config, tokenizer)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = tiny_model.sampled_match_rate(model, tokenizer, config, seed=4)
    assert torch.equal(torch.get_rng_state(), before)
    assert first == tiny_model.sampled_match_rate(model, tokenizer, config, seed=4) == 0.0


@needs_bwrap
def test_reference_programs_pass_and_planted_ones_fail_in_the_sandbox():
    for p in code_task.all_problems()[::37] + [CodeProblem("list", "*x[::-1]")]:
        result = compute_score(code_task.DATA_SOURCE, p.answer, None, {"problem": code_task.problem_dict(p)}, BWRAP)
        assert (result["verdict"], result["score"]) == ("AC", 1.0), p
    for p in code_task.planted_problems():
        planted = code_task.planted_problem_dict(p)
        result = compute_score(code_task.DATA_SOURCE, p.answer, None, {"problem": planted}, BWRAP)
        assert (result["verdict"], result["score"]) == ("WA", 0.0), p


def test_code_table_shows_verdicts_and_sandbox_time_per_step():
    from xrpo_verl.lab import code_rl

    metrics = {
        1: {"critic/score/mean": 0.25, "reward/verdict/AC": 4, "reward/verdict/WA": 10, "reward/verdict/CE": 2,
            "reward/sandbox/busy_s": 3.5, "timing_s/step": 14.0, "reward/sandbox/share": 0.25,
            "reward/sandbox/exclusive_share": 0.125, "reward/sandbox/memo_hits": 3},
        2: {"timing_s/step": 1.0},  # a validation-only line: no row
    }  # fmt: skip
    lines = code_rl.verdict_table(metrics).splitlines()
    assert len(lines) == 2
    assert lines[0].split() == [
        "step", "reward", *code_rl.VERDICT_COLUMNS, "memo", "sandbox", "s", "step", "s", "busy", "alone"
    ]  # fmt: skip
    assert lines[1].split() == ["1", "0.25", "4", "10", "0", "0", "2", "0", "0", "3", "3.50", "14.0", "25.0%", "12.5%"]


def test_code_summary_adds_the_runs_verdicts_and_sandbox_shares():
    """The demo's summary.json fields of the code task, summed over the run's steps."""
    from xrpo_verl.lab import code_rl

    metrics = {
        1: {"reward/verdict/AC": 4, "reward/verdict/WA": 10, "reward/sandbox/busy_s": 3.0,
            "reward/sandbox/exclusive_s": 1.0, "reward/sandbox/memo_hits": 3, "timing_s/step": 10.0},
        2: {"reward/verdict/AC": 6, "reward/sandbox/busy_s": 2.0, "timing_s/step": 10.0},
    }  # fmt: skip
    fields, line = code_rl.train_summary(metrics)
    assert fields["train_verdicts"] == {"AC": 10, "WA": 10, "TLE": 0, "RE": 0, "CE": 0, "SE": 0, "no_code": 0}
    assert fields["memo_hits"] == 3
    assert fields["sandbox_share_of_step"] == 0.25 and fields["sandbox_alone_share_of_step"] == 0.05
    assert line == "sandbox share of the step time: busy 25.0%, alone (no rollout generating) 5.0%"
    assert code_rl.train_summary({})[0]["sandbox_share_of_step"] == 0.0
