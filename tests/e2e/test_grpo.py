"""verl's real V1 trainer (`python -m verl.trainer.main_ppo`) on CPU with the `hf` rollout:
2 GRPO steps, weight sync checked through verl's own rollout-vs-actor metrics, then a resume."""

import json
from pathlib import Path

import pytest
import torch

from xrpo_verl.local import launch

pytestmark = pytest.mark.slow


def read_metrics(path: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["step"]: row["data"] for row in rows}


@pytest.fixture(scope="module")
def grpo_run(tiny_model_dir, arith_data, tmp_path_factory):
    train, val = arith_data
    run = launch.CpuRun(
        str(tiny_model_dir), str(train), str(val), str(tmp_path_factory.mktemp("grpo")), steps=2, lr=1e-3, save_freq=1
    )
    result = launch.launch(run, "grpo", timeout_s=600)
    assert result.returncode == 0, result.stdout[-6000:]
    return run


def test_two_grpo_steps_complete_and_train(grpo_run):
    metrics = read_metrics(grpo_run.metrics_path)
    assert sorted(metrics) == [1, 2]
    for step in (1, 2):
        m = metrics[step]
        assert m["response_length/mean"] > 0
        assert 0.0 <= m["critic/score/mean"] <= 1.0
    # The warmed-up model solves some problems, so some group has reward variance and a gradient.
    assert max(metrics[s]["actor/grad_norm"] for s in (1, 2)) > 0


def test_rollout_weights_track_the_actor(grpo_run, tiny_model_dir):
    """verl compares the rollout's per-token probabilities with the actor's recomputation
    (`training/rollout_probs_diff_max`). At step 2 the actor has taken one optimizer step, so a
    rollout that missed the weight push would differ by the update itself (0.97 at this lr with
    the push disabled, see the negative control below); with the push, both run the same fp32 weights."""
    metrics = read_metrics(grpo_run.metrics_path)
    assert metrics[2]["training/rollout_probs_diff_max"] < 1e-4
    assert metrics[2]["training/rollout_actor_probs_pearson_corr"] > 0.9999
    # ...and the actor really moved: the step-2 checkpoint differs from the initial weights.
    from safetensors.torch import load_file

    initial = load_file(str(tiny_model_dir / "model.safetensors"))
    saved = torch.load(
        grpo_run.ckpt_dir / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False
    )
    name = "model.layers.0.self_attn.q_proj.weight"
    moved = saved[name].full_tensor() if hasattr(saved[name], "full_tensor") else saved[name]
    assert moved.shape == initial[name].shape
    assert (moved.float() - initial[name].float()).abs().max() > 1e-5


def test_checkpoint_written_and_resume_continues(grpo_run):
    ckpt = grpo_run.ckpt_dir
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    for step in (1, 2):
        assert (ckpt / f"global_step_{step}" / "actor" / "optim_world_size_1_rank_0.pt").exists()
        assert (ckpt / f"global_step_{step}" / "data.pt").exists()
    resumed = launch.launch(
        grpo_run, "grpo", extra=["trainer.total_training_steps=3", "trainer.resume_mode=auto"], timeout_s=600
    )
    assert resumed.returncode == 0, resumed.stdout[-6000:]
    assert "global_step_2" in resumed.stdout
    metrics = read_metrics(grpo_run.metrics_path)  # the file logger appends
    assert sorted(metrics) == [1, 2, 3]  # only step 3 ran after the resume
    assert metrics[3]["training/rollout_probs_diff_max"] < 1e-4  # restored weights reached the server
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_negative_control_without_weight_push_diverges(tiny_model_dir, arith_data, tmp_path):
    """Same run with the per-step push disabled (cpu_nosync_control.py): the step-2 metric must
    blow up, which shows the < 1e-4 bound above can fail."""
    train, val = arith_data
    run = launch.CpuRun(str(tiny_model_dir), str(train), str(val), str(tmp_path), steps=2, lr=1e-3)
    here = Path(__file__).parent
    result = launch.launch(
        run,
        "grpo",
        timeout_s=600,
        env_updates={
            "VERL_USE_EXTERNAL_MODULES": "xrpo_verl.local.register,cpu_nosync_control",
            "PYTHONPATH": str(here),
        },
    )
    assert result.returncode == 0, result.stdout[-6000:]
    metrics = read_metrics(run.metrics_path)
    assert metrics[1]["training/rollout_probs_diff_max"] < 1e-4  # the initial push still happened
    assert metrics[2]["training/rollout_probs_diff_max"] > 1e-2
