"""The convergence study's bookkeeping (studies/convergence_study.py): the numbers RESULTS.md
reports come from these functions, so they are checked on hand-computed cases."""

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from xrpo_verl.lab import launch

_spec = importlib.util.spec_from_file_location(
    "convergence_study", Path(__file__).resolve().parents[1] / "studies" / "convergence_study.py"
)
study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(study)

VAL = "val-core/xrpo_addition/reward/acc/mean@4"
PASS = "val-core/xrpo_addition/reward/acc/best@4/mean"


def test_val_curve_counts_rollouts_and_places_the_first_validation_at_step_0():
    metrics = {
        1: {VAL: 0.30, PASS: 0.6},  # verl's validation before training, logged under step 1 alone
        **{s: {"critic/score/mean": 0.4, study.ROLLOUTS_MEAN: 8.0} for s in range(2, 4)},
    }
    metrics[3].update({VAL: 0.42, PASS: 0.7})
    curve = study.val_curve(metrics, prompts=8, n=8)
    assert curve == [(0, 0, 0.30, 0.6), (3, 2 * 64, 0.42, 0.7)]
    assert study.steps_to_target(curve, 0.4) == 3 and study.steps_to_target(curve, 0.5) is None


def test_cost_to_target_sums_rollouts_and_step_seconds_up_to_the_crossing():
    curve = [(0, 0, 0.3, None), (2, 128, 0.45, None), (4, 300, 0.55, None)]
    assert study.cost_to_target(curve, [1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == (300, 10.0)
    assert study.cost_to_target(curve, [1.0] * 5, 0.6) is None
    assert study.median_ci([None, None]) == "never"
    assert study.median_ci([300.0, 300.0, 300.0]) == "300 [300, 300]"
    assert study.median_ci([100.0, None, None]).startswith("never")  # two of three never got there
    assert study.upper_median([20.0, 30.0]) == 30.0  # an even count takes a value the runs had, not 25
    assert study.upper_median([10.0, 40.0, 20.0]) == 20.0


def test_val_curve_counts_the_groups_dapo_generated_and_dropped():
    evicted, surplus = study.DAPO_DROPPED
    metrics = {s: {"critic/score/mean": 0.4} for s in (1, 2)}
    metrics[1].update({evicted: 11.0, surplus: 1.0})  # 8 trained + 12 dropped groups of n = 8
    metrics[2].update({evicted: 3.0, VAL: 0.5})
    curve = study.val_curve(metrics, prompts=8, n=8)
    assert curve == [(2, 20 * 8 + 11 * 8, 0.5, None)]


def test_val_curve_counts_every_rollout_pilot_commit_generated():
    """Pilot-Commit logs the step's rollouts itself: its untrained pilots count, n_q is not used."""
    metrics = {s: {"critic/score/mean": 0.4, study.PC_ROLLOUTS: 96.0} for s in (1, 2)}
    metrics[2][VAL] = 0.5
    assert study.val_curve(metrics, prompts=8, n=8) == [(2, 192, 0.5, None)]


def test_the_multi_epoch_testbed_is_the_testbed_over_fewer_prompts_for_more_steps():
    from xrpo_verl.lab import addition, testbed

    epochs = study.base_setting("testbed_epochs")
    assert (epochs.n_train, epochs.steps) == (128, 64)
    assert epochs.steps * epochs.prompts_per_step == 4 * epochs.n_train  # four epochs of GRPO
    assert epochs == study.replace(testbed.SETTING, n_train=128, steps=64)  # the model and sizes unchanged
    # the same held-out sums as the testbed's: one measurement for both protocols
    _, held = addition.train_and_heldout(128, 100, epochs.data_seed, epochs.model.addition)
    _, held_c = addition.train_and_heldout(4096, 100, epochs.data_seed, epochs.model.addition)
    assert held == held_c


def test_versus_pairs_methods_with_grpo_on_the_same_seed():
    after = lambda *xs: [{"mean@4": {"mean": x}} for x in xs]  # noqa: E731
    summary = {
        "grpo": {"seeds": [0, 1, 2], "after": after(0.40, 0.50, 0.45)},
        "xrpo": {"seeds": [2, 0, 1], "after": after(0.55, 0.46, 0.50)},  # +0.10, +0.06, 0.00
        "extra": {"seeds": [3], "after": after(0.9)},  # no shared seed: not compared
    }
    found = study.versus(summary, "grpo", "mean@4")
    mean, low, high, n = found["xrpo"]
    assert n == 3 and mean == pytest.approx(0.16 / 3)
    assert low <= mean <= high and low >= 0.0 - 1e-12 and high <= 0.10 + 1e-12
    assert "extra" not in found and "grpo" not in found


def test_bootstrap_intervals_bracket_the_estimate():
    mean, low, high = study.bootstrap([0.1, 0.2, 0.3, 0.4])
    assert mean == pytest.approx(0.25) and 0.1 <= low < mean < high <= 0.4
    median, low, high = study.bootstrap([10, 20, 20, 60], np.median)
    assert median == 20 and low <= 20 <= high


def test_parts_report_says_off_for_a_part_the_method_lacks():
    series = {"xrpo/icl/triggers": [2.0, 1.0], "xrpo/icl/flips": [0.0, 0.5], "actor/entropy": [0.1, 0.3]}
    summary = {
        "xrpo": {"series_run_means": series},
        "extra": {"series_run_means": {**series, "xrpo/icl/triggers": [0.0, 0.0]}},
    }
    from xrpo_verl.lab.launch import PARTS

    parts = {"xrpo": {p: p in ("planner", "icl") for p in PARTS}, "extra": dict.fromkeys(PARTS, False)}
    rows = [line.split(" | ") for line in study.parts_report(summary, parts).splitlines()[2:]]
    xrpo, extra = ({c: v for c, v in zip([c[0] for c in study.PART_COLUMNS], row[1:])} for row in rows)
    assert xrpo["ICL prompts"] == "1.50" and xrpo["ICL flips"] == "0.250" and xrpo["entropy"] == "0.200"
    assert xrpo["rollouts/prompt min–max"] == "—"  # on, but not logged
    assert extra["ICL prompts"] == "off" and extra["entropy"] == "0.200"


def test_check_model_refuses_runs_of_another_model(tmp_path, monkeypatch):
    """Records made from one build must not gain runs of another (a CPU that builds differently)."""
    import json
    from dataclasses import replace

    from xrpo_verl.lab import learning_setting, tiny_model

    monkeypatch.setenv("XRPO_VERL_CACHE", str(tmp_path / "cache"))
    tiny = tiny_model.TinyModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, sft_steps=1, sft_batch_size=2)
    setting = replace(learning_setting.LearningSetting(), model=tiny)
    out = tmp_path / "study"
    out.mkdir()
    study.check_model(out, setting)  # first run: records the model
    recorded = json.loads((out / "model.json").read_text())
    assert recorded["key"] == tiny.key and len(recorded["weights_sha256"]) == 64
    study.check_model(out, setting)  # the same model: accepted
    (out / "model.json").write_text(json.dumps({**recorded, "weights_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="another model"):
        study.check_model(out, setting)


def test_base_setting_selects_the_testbed_model():
    from xrpo_verl.lab import learning_setting, testbed

    assert study.base_setting("testbed") == testbed.SETTING
    assert study.base_setting("learning") == learning_setting.LearningSetting()
    assert testbed.SETTING.model.key != learning_setting.MODEL.key
    from xrpo_verl.lab import code_rl

    assert study.base_setting("code_tail") == code_rl.TAIL
    # every setting the study offers has its title on the plot
    assert {study.base_setting(name).model.key for name in study.PLOT_TITLES} == {
        s.model.key for s in (learning_setting.LearningSetting(), testbed.SETTING, code_rl.CodeSetting(), code_rl.TAIL)
    }
    # the testbed's two styles fit its response budget: a 3-digit sum in 'words' with room to spare
    from xrpo_verl.lab import addition

    text = addition.solution_text(addition.Sum(999, 999), "words")
    assert len(text) < testbed.SETTING.max_response_length


def test_a_seed_run_now_joins_the_records_made_before_the_lab_moved(tmp_path):
    """A record of set C names the arithmetic scorer at its old path (`xrpo_verl.local.arith`); the
    same configuration run now names `xrpo_verl.lab.arith`, and must still be accepted beside it."""
    record = Path(__file__).resolve().parents[1] / "studies/records/convergence_testbed_c/grpo/seed0"
    old = launch.read_command(record)
    assert "reward.custom_reward_function.path=pkg://xrpo_verl.local.arith" in old
    grpo = tmp_path / "convergence_testbed_c" / "grpo"
    _finished(grpo / "seed0", old)
    reward = {t.partition("=")[0]: t for t in launch.ARITH_REWARD}
    now = [
        reward.get(t.partition("=")[0], t).replace("grpo/seed0/", "grpo/seed5/").replace("data.seed=0", "data.seed=5")
        for t in old
    ]
    assert "reward.custom_reward_function.path=pkg://xrpo_verl.lab.arith" in now
    study.check_command(grpo / "seed5", now)
    changed = [t.replace("lr=3e-05", "lr=1e-04") for t in now]
    with pytest.raises(SystemExit, match="actor_rollout_ref.actor.optim.lr"):
        study.check_command(grpo / "seed5", changed)  # the old records still refuse another configuration
    assert study.current_module_paths("VERL_USE_EXTERNAL_MODULES=xrpo_verl.local.register") == (
        "VERL_USE_EXTERNAL_MODULES=xrpo_verl.cpu.register"
    )
    assert study.current_module_paths("xrpo_verl/local/learning.py") == "xrpo_verl/lab/learning_setting.py"


def test_family_split_pairs_changes_within_each_kind():
    spec = importlib.util.spec_from_file_location(
        "testbed_families", Path(__file__).parents[1] / "studies" / "testbed_families.py"
    )
    fam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fam)
    parts = fam.split_changes([0.5, 1.0, 0.0, 0.25], [0.5, 0.75, 0.5, 0.25], [False, False, True, True])
    q, before, after, change, se = parts["known"]
    assert (q, before, after, change) == (2, 0.75, 0.625, -0.125)
    assert se == pytest.approx(0.125)  # differences (0, -0.25): sd 0.177, / sqrt(2)
    assert parts["unknown"][:4] == (2, 0.125, 0.375, 0.25)


def test_checkpoint_curve_takes_pass_at_k_from_problems_any_sample_solved():
    metrics = {s: {"critic/score/mean": 0.4, study.ROLLOUTS_MEAN: 8.0} for s in range(1, 5)}
    points = {
        0: {"mean@4": {"mean": 0.25, "per_problem": [0.0, 0.5, 0.0, 0.5]}},
        2: {"mean@4": {"mean": 0.5, "per_problem": [0.25, 0.75, 0.0, 1.0]}},
        4: {"mean@4": {"mean": 0.75, "per_problem": [1.0, 1.0, 0.0, 1.0]}},
    }
    curve = study.checkpoint_curve(metrics, points, prompts=8, n=8, k=4)
    assert curve == [(0, 0, 0.25, 0.5), (2, 128, 0.5, 0.75), (4, 256, 0.75, 0.75)]


def test_curve_area_averages_the_curve_over_a_rollout_budget_by_trapezoids():
    curve = [(0, 0, 0.4, None), (5, 320, 0.5, None), (10, 640, 0.6, None)]
    # budget 480: 320 rollouts at mean 0.45, then 160 up to the interpolated 0.55 at mean 0.525
    assert study.curve_area(curve, 480) == pytest.approx((320 * 0.45 + 160 * 0.525) / 480)
    assert study.curve_area(curve, 640) == pytest.approx(0.5)
    assert study.curve_area(curve, 700) is None  # the run stopped short of the budget


def test_paired_with_skips_seeds_whose_value_is_missing():
    summary = {"grpo": {"seeds": [0, 1, 2]}, "xrpo": {"seeds": [1, 0, 2]}, "extra": {"seeds": [0, 1]}}
    values = {"grpo": [0.5, 0.4, None], "xrpo": [0.45, 0.6, 0.9], "extra": [0.5, None]}
    found = study.paired_with(summary, "grpo", values)
    assert found["xrpo"][0] == pytest.approx((0.05 + 0.10) / 2) and found["xrpo"][3] == 2  # seed 2: no GRPO value
    assert "extra" not in found  # one seed left


def _finished(run_dir: Path, command: list[str]) -> None:
    run_dir.mkdir(parents=True)
    launch.write_command(run_dir, command)
    (run_dir / "done.json").write_text("{}")


def test_a_seed_joins_only_the_runs_of_its_own_configuration(tmp_path):
    def command(run_dir, *settings, python="/a/python"):
        return [python, "-m", "verl.trainer.main_ppo", f"data.train_files={run_dir}/data/train.parquet", *settings]

    xrpo = tmp_path / "xrpo"
    _finished(xrpo / "seed0", command(xrpo / "seed0", "planner.rounds=2", "data.seed=0"))
    _finished(xrpo / "seed1", command(xrpo / "seed1", "planner.rounds=2", "data.seed=1"))
    (xrpo / "seed2").mkdir()  # an unfinished run's leftovers are not a record
    (xrpo / "seed2" / "command.txt").write_text("/a/python \\\n  planner.rounds=7\n")
    # another interpreter, its own paths and data order: the same configuration
    study.check_command(xrpo / "seed3", command(xrpo / "seed3", "planner.rounds=2", "data.seed=3", python="/b/py"))
    with pytest.raises(SystemExit, match=r"differ: \['planner.rounds=1'\]"):
        study.check_command(xrpo / "seed3", command(xrpo / "seed3", "planner.rounds=2", "planner.rounds=1"))
    study.check_command(tmp_path / "new" / "seed0", command(tmp_path / "new" / "seed0", "planner.rounds=1"))
    # the CPU recipes now name the phased schedule that the default ran on hf before `auto`
    hf, phased = "actor_rollout_ref.rollout.name=hf", "algorithm.xrpo.planner.schedule=phased"
    cpu = tmp_path / "xrpo_cpu"
    _finished(cpu / "seed0", command(cpu / "seed0", "planner.rounds=2", "data.seed=0", hf))
    study.check_command(cpu / "seed1", command(cpu / "seed1", "planner.rounds=2", phased, hf))
    with pytest.raises(SystemExit, match="schedule=streaming"):
        study.check_command(cpu / "seed1", command(cpu / "seed1", "planner.rounds=2", hf, "x.schedule=streaming"))
    vllm = tmp_path / "xrpo_vllm"  # a vLLM record without a schedule ran phased before auto, streams after
    _finished(vllm / "seed0", command(vllm / "seed0", "planner.rounds=2", "actor_rollout_ref.rollout.name=vllm"))
    with pytest.raises(SystemExit, match="schedule=phased"):
        study.check_command(
            vllm / "seed1", command(vllm / "seed1", "planner.rounds=2", phased, "actor_rollout_ref.rollout.name=vllm")
        )


def test_a_training_run_keeps_the_other_methods_in_the_sets_summary(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"settings": {"methods": ["grpo", "dapo"]}}))
    args = argparse.Namespace(out=str(tmp_path), methods=["xrpo", "grpo"], report_only=False)
    assert study.summarized_methods(args) == ["grpo", "dapo", "xrpo"]
    args.report_only = True  # the report names what it covers
    assert study.summarized_methods(args) == ["xrpo", "grpo"]
    (tmp_path / "summary.json").unlink()
    args.report_only = False
    assert study.summarized_methods(args) == ["xrpo", "grpo"]


def test_hard_families_learned_counts_the_families_that_started_below_and_ended_above():
    """a and b start hard (below 0.25), c does not; a ends learned, b stays unlearned, and c's level
    is never counted."""
    families = ["a", "a", "b", "b", "c", "c"]
    before = [0.0, 0.25, 0.25, 0.0, 0.5, 1.0]
    after = [0.75, 0.5, 0.25, 0.25, 0.0, 0.0]
    assert study.hard_families_learned(before, after, families) == (1, 2)
    assert study.hard_families_learned(before, before, families) == (0, 2)


def test_tail_report_splits_the_held_out_problems_into_the_tail_and_the_rest():
    """Code with a hard tail: every tail problem at 0.5 and the rest at 0.25 after GRPO, the tail
    0.25 higher with the other method on both seeds; before, all at 0."""
    from xrpo_verl.lab import code_rl, code_task

    tail = np.array([code_task.in_tail(p) for p in code_rl.heldout_problems(code_rl.TAIL)])
    assert 0 < tail.sum() < len(tail)
    grpo = list(np.where(tail, 0.5, 0.25))
    floor = list(np.where(tail, 0.75, 0.25))
    summary = {
        "grpo": {"seeds": [0, 1], "after_per_problem": [{"mean@16": grpo}] * 2},
        "xrpo_floor": {"seeds": [0, 1], "after_per_problem": [{"mean@16": floor}] * 2},
    }
    before = {"mean@16": {"per_problem": [0.0] * len(tail)}}
    args = argparse.Namespace(setting="code_tail", k=16, n_eval=None)
    lines = study.tail_report(summary, before, args).splitlines()
    assert f"the tail's {tail.sum()} problems" in lines[0] and "tail 0.000, rest 0.000" in lines[0]
    assert lines[3] == "| grpo | 2 | 0.500 | — | 0.250 | — |"
    assert lines[4] == "| xrpo_floor | 2 | 0.750 | +0.250 [+0.250, +0.250] | 0.250 | +0.000 [+0.000, +0.000] |"
