"""Start-up validation of trainer mode `xrpo` on configs composed by Hydra from verl's own ppo_trainer."""

import os

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from xrpo_verl.config import ExTraConfig, XRPOConfig
from xrpo_verl.verl_adapters.config import (
    AGENT_LOOP_MANAGER,
    CONFIG_DIR,
    check_estimator_pairing,
    read_method_configs,
    validate_trainer_config,
)


@pytest.fixture(scope="module")
def compose_cfg():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):

        def _compose(*overrides):
            return compose(config_name="xrpo_trainer", overrides=list(overrides))

        yield _compose


def test_yaml_composes_with_verl_and_holds_the_dataclass_defaults(compose_cfg):
    cfg = compose_cfg()
    assert cfg.trainer.v1.trainer_mode == "xrpo"
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class == AGENT_LOOP_MANAGER
    assert "ppo_mini_batch_size" in cfg.actor_rollout_ref.actor  # verl's own tree is there
    assert OmegaConf.to_container(cfg.algorithm.xrpo) == XRPOConfig().to_dict()
    assert OmegaConf.to_container(cfg.algorithm.extra) == ExTraConfig().to_dict()
    s = validate_trainer_config(cfg, check_embedder=False)
    assert s.use_sharpening and s.use_novelty and s.use_planner and s.use_icl and s.use_prefix


def test_overrides_reach_the_dataclasses(compose_cfg):
    cfg = compose_cfg(
        "algorithm.xrpo.planner.n_avg=8",
        "algorithm.xrpo.planner.n_base=4",
        "actor_rollout_ref.rollout.n=8",
        "algorithm.extra.novelty.placement=after_norm",
    )
    xrpo, extra = read_method_configs(cfg.algorithm)
    assert (xrpo.planner.n_avg, xrpo.planner.n_base, extra.novelty.placement) == (8, 4, "after_norm")


def test_all_features_off_is_plain_grpo(compose_cfg):
    cfg = compose_cfg(
        "algorithm.adv_estimator=grpo",
        "algorithm.xrpo.planner.enable=false",
        "algorithm.xrpo.icl.enable=false",
        "algorithm.extra.prefix.enable=false",
    )
    s = validate_trainer_config(cfg, check_embedder=False)
    assert not (s.use_sharpening or s.use_novelty or s.use_planner or s.use_icl or s.use_prefix)


def test_icl_runs_with_uniform_allocation(compose_cfg):
    """Pins issue 11 point 5: ICL without the planner's priorities (the paper's ablation) is a valid run:
    the rounds stay, split evenly. The old code refused ICL whenever the planner did not allocate."""
    s = validate_trainer_config(compose_cfg("algorithm.xrpo.planner.allocation=uniform"), check_embedder=False)
    assert s.use_icl and s.xrpo.planner.allocation == "uniform"


@pytest.mark.parametrize(
    "engine, asked, runs",
    [
        ("vllm", "auto", "streaming"),
        ("sglang", "auto", "streaming"),
        ("hf", "auto", "phased"),
        ("vllm", "phased", "phased"),
        ("hf", "streaming", "streaming"),
    ],
)
def test_the_default_schedule_streams_on_continuous_batching_engines(compose_cfg, engine, asked, runs):
    """The yaml's default is auto; what the rounds read is the schedule it resolves to."""
    assert compose_cfg().algorithm.xrpo.planner.schedule == "auto"
    cfg = compose_cfg(f"actor_rollout_ref.rollout.name={engine}", f"algorithm.xrpo.planner.schedule={asked}")
    assert validate_trainer_config(cfg, check_embedder=False).xrpo.planner.schedule == runs


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["algorithm.adv_estimator=gae"], "does not support algorithm.adv_estimator='gae'"),
        (["trainer.v1.trainer_mode=sync"], "needs trainer.v1.trainer_mode='xrpo'"),
        (["algorithm.xrpo.planner.n_base=20"], "n_base <= n_avg"),  # budget smaller than the base phase
        (["actor_rollout_ref.rollout.n=8"], "must equal algorithm.xrpo.planner.n_avg=16"),
        (["+algorithm.xrpo.planner.nbase=4"], r"unknown key\(s\) \['nbase'\]"),
        (["algorithm.xrpo.sharpening.enable=false"], "sharpening.enable=false"),
        (["algorithm.filter_groups.enable=true"], "filter_groups"),
        (["algorithm.use_kl_in_reward=true"], "use_kl_in_reward"),
        (["algorithm.xrpo.planner.enable=false"], "icl.enable=true needs the planner"),
        (["+trainer.v1.xrpo.parameter_sync_step=2"], "parameter_sync_step"),
        (["algorithm.xrpo.planner.selection=pilot_commit"], "needs algorithm.xrpo.planner.enable=false"),
        (
            [
                "algorithm.xrpo.planner.selection=pilot_commit",
                "algorithm.xrpo.planner.enable=false",
                "algorithm.xrpo.icl.enable=false",
                "algorithm.extra.prefix.enable=false",
                "algorithm.xrpo.planner.pilot_rollouts=16",
            ],
            r"pilot_rollouts=16 must lie in \[1, rollout.n = 16\)",
        ),
        (["algorithm.xrpo.planner.selection=greedy"], "selection"),
    ],
)
def test_bad_config_fails_at_start_up(compose_cfg, overrides, match):
    with pytest.raises(ValueError, match=match):
        validate_trainer_config(compose_cfg(*overrides), check_embedder=False)


def test_missing_embedder_is_a_start_up_error(compose_cfg, tmp_path):
    bad = tmp_path / "no_such_model"
    cfg = compose_cfg(f"algorithm.xrpo.embedder.model={bad}", f"algorithm.extra.embedder.model={bad}")
    with pytest.raises(ValueError, match="algorithm.xrpo.embedder.model=.*not a directory"):
        validate_trainer_config(cfg)
    cfg = compose_cfg(
        "algorithm.xrpo.embedder.model=some-org/not-cached-encoder", f"algorithm.extra.embedder.model={bad}"
    )
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE")}
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        with pytest.raises(ValueError, match="not in the local cache"):
            validate_trainer_config(cfg)
    finally:
        if env["HF_HUB_OFFLINE"] is None:
            del os.environ["HF_HUB_OFFLINE"]


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the refusal of a GPU this machine does not have"
)
@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_an_encoder_device_the_trainer_cannot_see_fails_at_start_up(compose_cfg, device):
    cfg = compose_cfg(f"algorithm.extra.embedder.device={device}")
    with pytest.raises(ValueError) as e:
        validate_trainer_config(cfg)
    msg = str(e.value)
    assert f"algorithm.extra.embedder.device='{device}'" in msg and "sees no CUDA device" in msg
    assert "set algorithm.extra.embedder.device=cpu" in msg  # what to change
    # only the encoders in use are checked: ICL off leaves algorithm.xrpo.embedder unread
    off = compose_cfg("algorithm.xrpo.embedder.device=cuda:3", "algorithm.xrpo.icl.enable=false")
    validate_trainer_config(off)
    # a machine that only composes the config (recipes/launch.py --check) skips the device
    validate_trainer_config(cfg, check_device=False)


def test_pairing_rule_alone():
    check_estimator_pairing("grpo", "sync")
    check_estimator_pairing("xrpo_extra", "xrpo")
    with pytest.raises(ValueError, match="allowed"):
        check_estimator_pairing("rloo", "xrpo")
