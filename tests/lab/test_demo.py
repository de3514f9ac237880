"""The demo's progress line and before/after arithmetic (no training here: see tests/e2e)."""

import io
from types import SimpleNamespace

import pytest

from xrpo_verl.lab import cli, demo, launch, learning_setting, testbed


def test_verl_console_line_is_parsed_after_a_ray_prefix():
    line = "(TaskRunner pid=42) step:7 - critic/score/mean:0.375 - actor/pg_loss:-0.01 - note:abc\n"
    assert launch.parse_step_line(line) == (7, {"critic/score/mean": 0.375, "actor/pg_loss": -0.01})
    assert launch.parse_step_line("no metrics here") is None
    assert launch.parse_step_line("step:x - a:1") is None


def test_progress_prints_step_reward_and_what_each_part_did():
    out = io.StringIO()
    progress = demo.Progress(total=20, n=8, stream=out, every=10)
    progress(
        "step:1 - critic/score/mean:0.25 - xrpo/alloc/n_q/min:4 - xrpo/alloc/n_q/max:12 - xrpo/icl/flips:2"
        " - xrpo/icl/zero_shot_flips:1 - xrpo/novelty/bonus_share:0.04 - xrpo/guided/rollouts:8"
        " - xrpo/guided/success_rate:0.25"
    )
    progress("INFO some library warning")  # not shown
    for step in range(2, 10):
        progress(f"step:{step} - critic/score/mean:0.5 - xrpo/icl/flips:1 - xrpo/novelty/bonus_share:0.02")
    progress("step:10 - critic/score/mean:0.5")  # a GRPO-like step: no part on
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # steps 1 and 10 (not a terminal: one line every 10 steps)
    assert "step   1/20" in lines[0] and "reward 0.25" in lines[0] and "rollouts/prompt 4-12" in lines[0]
    assert "ICL flips   2 (zero-shot 1)" in lines[0] and "novelty 4.0% of |A|" in lines[0]
    assert "guided 2/8" in lines[0]
    assert (
        "rollouts/prompt 8" in lines[1] and "ICL" not in lines[1] and "last 10: 0.47" in lines[1]
    )  # (0.25 + 9 x 0.5) / 10
    assert progress.flips == 10 and progress.novelty == pytest.approx([0.04] + [0.02] * 8)


def test_progress_shows_only_the_parts_the_recipe_has_on():
    out = io.StringIO()
    progress = demo.Progress(total=2, n=8, stream=out, every=1, parts=launch.recipe_parts("xrpo"))
    progress(
        "step:1 - critic/score/mean:0.5 - xrpo/alloc/n_q/min:4 - xrpo/alloc/n_q/max:12 - xrpo/icl/flips:1"
        " - xrpo/novelty/bonus_share:0.0 - xrpo/guided/rollouts:0"
    )
    line = out.getvalue()
    assert "rollouts/prompt 4-12" in line and "ICL flips   1" in line
    assert "novelty" not in line and "guided" not in line  # logged as zeros, but off in xrpo


def test_progress_held_back_shows_only_the_latest_step_when_released():
    """While the demo prints the accuracy before training, step lines wait; the latest one follows."""
    out = io.StringIO()
    progress = demo.Progress(total=20, n=8, stream=out, every=1)
    progress.hold()
    for step in (1, 2):
        progress(f"step:{step} - critic/score/mean:0.5")
    assert out.getvalue() == ""
    progress.release()
    progress("step:3 - critic/score/mean:0.75")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "step   2/20" in lines[0] and "step   3/20" in lines[1]


def test_paired_change_and_its_standard_error():
    before = learning_setting.accuracy([0.0, 0.5, 0.5, 1.0])
    after = learning_setting.accuracy([0.5, 0.5, 1.0, 1.0])
    delta, se = learning_setting.paired_change(before.per_problem, after.per_problem)
    assert delta == pytest.approx(0.25)
    assert se == pytest.approx((1 / 12) ** 0.5 / 2)  # diffs (.5, 0, .5, 0): sample variance 1/12


def test_code_task_flag_is_parsed(monkeypatch):
    seen = {}
    monkeypatch.setattr(demo, "run", lambda task, recipe, seed, out: seen.update(task=task, recipe=recipe) or 0)
    assert cli.main(["demo", "--task", "code", "--sandbox", "docker", "--steps", "3"]) == 0
    task = seen["task"]
    assert (task.name, task.setting.backend, task.setting.steps, seen["recipe"]) == ("code", "docker", 3, "xrpo")
    assert cli.main(["demo", "--steps", "4"]) == 0
    assert (seen["task"].name, seen["task"].setting.steps, seen["recipe"]) == ("addition", 4, "grpo")
    assert cli.main(["demo", "--task", "testbed"]) == 0
    assert (seen["task"].name, seen["task"].setting.model.key, seen["recipe"]) == ("testbed", testbed.MODEL.key, "xrpo")


def test_code_task_xrpo_settings_go_to_our_recipes_only():
    """`make demo TASK=code` with `--recipe grpo` runs verl's own config, where setting
    `algorithm.xrpo.*` is a Hydra error."""
    task = demo.TASKS["code"](SimpleNamespace(sandbox="bwrap", steps=None, lr=None))
    assert demo.run_overrides(task, "grpo", 3) == ["data.seed=3"]
    assert demo.run_overrides(task, "xrpo", 3) == ["data.seed=3", "algorithm.xrpo.icl.max_example_tokens=48"]
