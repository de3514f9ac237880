"""Every GPU recipe composes with verl's Hydra schema and passes verl's and our start-up checks on CPU.

The overrides come from the same files the launch scripts read (`recipes/launch.py`), so what is
checked here is exactly what `bash recipes/<family>/run_<method>.sh` would launch.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("recipes_launch", ROOT / "recipes" / "launch.py")
launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launch)

RECIPES = launch.available_recipes()
MODELS = launch.available_models()
SCRIPTS = sorted((ROOT / "recipes").glob("[!c]*/run_*.sh")) + sorted((ROOT / "recipes" / "code").glob("run_*.sh"))
# adv_estimator, config_name, policy loss and DAPO filtering each recipe must end up with
EXPECTED = {
    "grpo": ("grpo", "ppo_trainer", "vanilla", False),
    "dapo": ("grpo", "ppo_trainer", "vanilla", True),
    "gspo": ("grpo", "ppo_trainer", "gspo", False),
    "xrpo": ("xrpo", "xrpo_trainer", "vanilla", False),
    "xrpo_gspo": ("xrpo", "xrpo_trainer", "gspo", False),
    "extra": ("extra", "xrpo_trainer", "vanilla", False),
    "xrpo_extra": ("xrpo_extra", "xrpo_trainer", "vanilla", False),
    "pilot_commit": ("grpo", "xrpo_trainer", "vanilla", False),
}
_CACHE: dict = {}


def composed(recipe: str, model: str):
    key = (recipe, model)
    if key not in _CACHE:
        resolved = launch.resolve(recipe, model, environ={"HOME": "/home/ci"})
        _CACHE[key] = (resolved, launch.compose(resolved))
    return _CACHE[key]


def test_the_recipe_set_is_complete():
    assert {r for r in RECIPES if r.startswith("math/")} == {f"math/{m}" for m in EXPECTED}
    assert {"code/grpo", "code/xrpo", "code/xrpo_extra"} <= set(RECIPES)
    assert set(MODELS) == {"qwen3_1.7b", "qwen2.5_7b_instruct", "llama3.2_3b"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_script_states_its_hardware_and_launches_a_known_recipe(script):
    text = script.read_text()
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert re.search(r"^# Hardware: .+", text, re.M), f"{script} does not state its hardware"
    found = re.search(r"launch\.py\"? (\S+) --model", text)
    assert found and found.group(1) in RECIPES, f"{script} launches an unknown recipe"
    assert script.name == f"run_{found.group(1).split('/')[1]}.sh"


def test_every_recipe_has_a_script():
    launched = {f"{s.parent.name}/{s.stem.removeprefix('run_')}" for s in SCRIPTS}
    assert launched == set(RECIPES)


@pytest.mark.parametrize("model", MODELS)
def test_model_files_state_hardware_matching_their_gpu_count(model):
    resolved, cfg = composed("math/grpo", model)
    m = re.match(r"(\d+) nodes? x (\d+) GPUs?", resolved["hardware"])
    assert m, f"{model}: hardware {resolved['hardware']!r} does not start with 'N node(s) x M GPUs'"
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (int(m.group(1)), int(m.group(2)))


# Every recipe with the default model, and every other model with one recipe per trainer config
# and family: a model file adds the same overrides to every recipe, so this covers each line
# of every file while keeping CI at ~16 compositions.
CASES = [(r, "qwen3_1.7b") for r in RECIPES] + [
    (r, m) for m in MODELS if m != "qwen3_1.7b" for r in ("math/grpo", "math/xrpo_extra", "code/xrpo")
]


@pytest.mark.parametrize("recipe, model", CASES)
def test_recipe_composes_and_passes_start_up_checks(recipe, model):
    resolved, cfg = composed(recipe, model)
    launch.validate(cfg)  # verl's validate_config + dataclass conversion + our trainer/reward checks
    method = recipe.split("/")[1]
    estimator, config_name, loss_mode, filtering = EXPECTED[method]
    assert (cfg.algorithm.adv_estimator, resolved["config_name"]) == (estimator, config_name)
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == loss_mode
    assert bool(cfg.algorithm.filter_groups.enable) == filtering
    assert cfg.actor_rollout_ref.model.path == resolved["env"]["MODEL_PATH"]
    assert "${" not in " ".join(resolved["overrides"]).replace("${oc.", "")  # every placeholder filled
    # no row widens another (issue 23): packed rows in token-budget micro-batches, every pass
    arr = cfg.actor_rollout_ref
    assert arr.model.use_remove_padding and arr.actor.use_dynamic_bsz
    assert arr.rollout.log_prob_use_dynamic_bsz and arr.ref.log_prob_use_dynamic_bsz


@pytest.mark.parametrize("family", ["math", "code"])
def test_methods_are_compute_matched_within_a_family(family):
    """Same prompts per step and the same rollouts per prompt (n = n_avg) for every method."""
    budgets = set()
    for recipe in (r for r in RECIPES if r.startswith(family)):
        _, cfg = composed(recipe, "qwen3_1.7b")
        n = cfg.actor_rollout_ref.rollout.n
        if "xrpo" in cfg.algorithm:
            assert cfg.algorithm.xrpo.planner.n_avg == n
            if cfg.algorithm.extra.prefix.enable:  # guided prompts replace rows and get n suffixes
                assert cfg.algorithm.extra.prefix.n_suffix == n
        budgets.add((cfg.data.train_batch_size, n, cfg.data.max_response_length))
    assert len(budgets) == 1, f"{family} recipes differ in (prompts, n, max length): {budgets}"


def test_a_misspelt_key_fails_composition():
    resolved = launch.resolve("math/grpo", "qwen3_1.7b", ["actor_rollout_ref.actor.clip_ratio_hgh=0.3"])
    with pytest.raises(ConfigCompositionException, match="clip_ratio_hgh"):
        launch.compose(resolved)


@pytest.mark.parametrize(
    "override, match",
    [
        ("+actor_rollout_ref.actor.clip_ratio_hgh=0.3", "outside verl's schema"),
        ("+algorithm.xrpo.planner.nbase=4", "outside verl's schema"),
        ("trainer.nnodes", "not of the form key=value"),
    ],
)
def test_unsafe_or_malformed_overrides_are_rejected(override, match):
    with pytest.raises(ValueError, match=match):
        launch.resolve("math/xrpo", "qwen3_1.7b", [override])


def test_misspelt_free_form_and_method_keys_fail_validation():
    resolved = launch.resolve("code/grpo", "qwen3_1.7b", ["+reward.reward_kwargs.code.reward_mod=fraction"])
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['reward_mod'\]"):
        launch.validate(launch.compose(resolved))
    resolved = launch.resolve("math/xrpo", "qwen3_1.7b", ["actor_rollout_ref.rollout.n=8"])
    with pytest.raises(ValueError, match="must equal algorithm.xrpo.planner.n_avg"):
        launch.validate(launch.compose(resolved))


def test_placeholders_come_from_the_environment_and_unknown_ones_fail(tmp_path):
    resolved = launch.resolve("math/grpo", "llama3.2_3b", environ={"HOME": "/h", "DATA_DIR": "/d", "STEPS": "7"})
    assert "data.train_files=/d/dapo_math_17k.parquet" in resolved["overrides"]
    assert "trainer.total_training_steps=7" in resolved["overrides"]
    default = launch.resolve("math/grpo", "llama3.2_3b", environ={"HOME": "/h"})["overrides"]
    # nested default; HOME is left to OmegaConf, resolved by the process that reads the path
    assert "data.train_files=${oc.env:HOME}/data/xrpo/llama/dapo_math_17k.parquet" in default
    with pytest.raises(ValueError, match=r"placeholder \$\{NOPE\} has no value"):
        launch.substitute("x=${NOPE}", {}, "test")
    assert launch.substitute("x=${oc.env:HOME}", {}, "test") == "x=${oc.env:HOME}"  # OmegaConf's, left alone


def test_bad_recipe_files_and_names_fail(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("overides: [a=b]\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['overides'\]"):
        launch.resolve(str(bad), "qwen3_1.7b")
    with pytest.raises(ValueError, match="unknown model variant 'gpt5'"):
        launch.resolve("math/grpo", "gpt5")
    with pytest.raises(ValueError, match="does not exist"):
        launch.resolve("math/grpoo", "qwen3_1.7b")


XRPO_RECIPES = [
    r for r in RECIPES if launch.resolve(r, "qwen3_1.7b", environ={"HOME": "/h"})["config_name"] == "xrpo_trainer"
]


@pytest.mark.parametrize("recipe", XRPO_RECIPES)
def test_gpu_recipes_name_the_encoder_device_and_a_trainer_without_that_gpu_refuses(recipe):
    """No GPU recipe leaves the encoder's device to the auto choice (docs/algorithms.md, section 7)."""
    import torch

    from xrpo_verl.verl_adapters.config import _embedder_configs, validate_trainer_config

    _, cfg = composed(recipe, "qwen3_1.7b")
    assert cfg.algorithm.xrpo.embedder.device == cfg.algorithm.extra.embedder.device == "cuda"
    if torch.cuda.is_available():
        return
    if not _embedder_configs(validate_trainer_config(cfg, check_embedder=False, check_device=False)):
        validate_trainer_config(cfg)  # no part of it encodes (Pilot-Commit): no GPU to ask for
        return
    # what the trainer's start-up (XrpoTrainer.__init__) does in a TaskRunner that sees no GPU
    with pytest.raises(ValueError, match=r"embedder.device='cuda': .*sees no CUDA device.*embedder.device=cpu"):
        validate_trainer_config(cfg)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if r.startswith("code/")])
def test_code_recipes_judge_on_the_sandbox_service(recipe):
    _, cfg = composed(recipe, "qwen3_1.7b")
    code = cfg.reward.reward_kwargs.code
    assert code.backend == "remote" and list(code.url) == ["http://127.0.0.1:8080"]


def test_a_launch_stops_in_one_line_when_the_sandbox_service_is_down(capsys, monkeypatch):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("SANDBOX_URLS", f"[{dead}]")
    monkeypatch.setattr(launch.os, "execv", lambda *a: pytest.fail("launched although the service is down"))
    assert launch.main(["code/grpo"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and dead in err and "recipes/code/start_sandbox.sh" in err


def test_our_switches_reach_every_ray_process_and_paths_resolve_where_read(monkeypatch):
    """A cluster started with `ray start` does not pass the launching shell's environment to its workers:
    the switches travel in the job's runtime_env, merged as verl's main_ppo merges it."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    environ = {"HOME": "/launch/home", "XRPO_ROUND_TIMEOUT_S": "900", "HF_HUB_OFFLINE": "1"}
    cfg = launch.compose(launch.resolve("math/xrpo", "qwen3_1.7b", environ=environ))
    env_vars = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env).env_vars
    assert env_vars.XRPO_ROUND_TIMEOUT_S == "900" and env_vars.HF_HUB_OFFLINE == "1"
    assert "TRANSFORMERS_OFFLINE" not in env_vars  # only what the launching shell set
    monkeypatch.setenv("HOME", "/trainer/home")  # the TaskRunner's node
    assert (
        OmegaConf.to_container(cfg.data, resolve=True)["train_files"] == "/trainer/home/data/xrpo/dapo_math_17k.parquet"
    )
    with pytest.raises(ValueError, match="cannot travel"):
        launch.runtime_env_overrides({"XRPO_ROUND_TIMEOUT_S": "9'0"})


def test_gpu_smoke_modes_compose_with_what_the_gpu_recipes_use(tmp_path):
    """scripts/gpu_smoke.sh needs a GPU; its commands (DRY_RUN=1) compose and pass the start-up checks here."""
    import shlex
    import subprocess
    import sys

    env = {**os.environ, "DRY_RUN": "1", "MODEL": "/models/tiny", "OUT": str(tmp_path), "PY": sys.executable}
    script = launch.RECIPE_ROOT.parent / "scripts" / "gpu_smoke.sh"
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=300, check=True)
    commands = [shlex.split(line) for line in out.stdout.splitlines() if "verl.trainer.main_ppo" in line]
    assert len(commands) == 6, out.stdout + out.stderr
    for argv in commands:
        args = argv[argv.index("verl.trainer.main_ppo") + 1 :]
        config_dir, config_name = args[args.index("--config-path") + 1], args[args.index("--config-name") + 1]
        cfg = launch.compose({"config_dir": config_dir, "config_name": config_name, "overrides": args[4:]})
        launch.validate(cfg)
        assert cfg.reward.reward_manager.name == "xrpo" and list(cfg.reward.reward_kwargs.math_sources) == [
            "xrpo_arith"
        ]
        assert cfg.actor_rollout_ref.model.use_remove_padding and cfg.actor_rollout_ref.actor.use_dynamic_bsz
        assert cfg.algorithm.xrpo.embedder.device == cfg.algorithm.extra.embedder.device == "cuda"
