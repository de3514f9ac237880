"""The CPU recipes (xrpo_verl/local/recipes) compose into the trainer config `launch` starts, and
each switches on exactly the parts its name says: the convergence study's ablations compare
these, so a recipe that silently kept a part on (or off) would mislabel a whole column."""

import pytest

from xrpo_verl.local import launch

# recipe -> (planner, ICL, sharpening, novelty bonus, prefix regeneration)
PARTS = {
    "xrpo_planner": (True, False, False, False, False),
    "xrpo_planner_icl": (True, True, False, False, False),
    "xrpo": (True, True, True, False, False),
    "extra": (False, False, False, True, True),
    "xrpo_extra": (True, True, True, True, True),
}


def composed(name: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    run = launch.CpuRun("/model", "/train.parquet", "/val.parquet", "/out", steps=3, prompts_per_step=8, n=8)
    cmd = launch.trainer_command(run, launch.load_recipe(name))
    config_dir, config_name = cmd[cmd.index("--config-path") + 1], cmd[cmd.index("--config-name") + 1]
    overrides = cmd[cmd.index("--config-name") + 2 :]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=config_name, overrides=overrides)


@pytest.mark.parametrize("name", sorted(PARTS))
def test_cpu_recipe_switches_on_the_parts_its_name_says(name):
    from xrpo_verl.verl_adapters.config import validate_trainer_config

    settings = validate_trainer_config(composed(name), check_embedder=False)
    found = (
        settings.use_planner,
        settings.use_icl,
        settings.use_sharpening,
        settings.use_novelty,
        settings.use_prefix,
    )
    assert found == PARTS[name]
    assert settings.xrpo.planner.n_avg == 8  # compute-matched to GRPO's n


def test_icl_prompts_fit_the_prompt_budget_of_the_learning_setting():
    cfg = composed("xrpo")
    # two worked 3-digit sums take ~210 tokens; the prompt and response must fit 256 positions
    assert cfg.data.max_prompt_length >= 200 and cfg.algorithm.xrpo.icl.max_example_tokens >= 33
    assert cfg.data.max_prompt_length + 48 <= 256
