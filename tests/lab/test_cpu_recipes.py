"""The CPU recipes (xrpo_verl/lab/recipes) compose into the trainer config `launch` starts, and
each switches on exactly the parts its name says: the convergence study's ablations compare
these, so a recipe that silently kept a part on (or off) would mislabel a whole column."""

import pytest

from xrpo_verl.lab import launch

# recipe -> (planner, ICL, sharpening, novelty bonus, prefix regeneration)
PARTS = {
    "grpo": (False, False, False, False, False),
    "dapo": (False, False, False, False, False),
    "xrpo_planner": (True, False, False, False, False),
    "xrpo_planner_icl": (True, True, False, False, False),
    "xrpo": (True, True, True, False, False),
    "xrpo_r1": (True, True, True, False, False),
    "xrpo_r2": (True, True, True, False, False),
    "extra": (False, False, False, True, True),
    "extra_n": (False, False, False, True, False),
    "extra_r": (False, False, False, False, True),
    "xrpo_extra": (True, True, True, True, True),
    "xrpo_select": (True, True, True, False, False),
    "xrpo_bare_icl": (True, True, True, False, False),
    "xrpo_select_bare_icl": (True, True, True, False, False),
    "xrpo_no_icl": (True, False, True, False, False),
    "xrpo_floor": (True, False, True, False, False),
    "xrpo_bare_icl_novelty": (True, True, True, True, False),
    "pilot_commit": (False, False, False, False, False),
}


@pytest.mark.parametrize("name", sorted(PARTS))
def test_cpu_recipe_switches_on_the_parts_its_name_says(name):
    assert tuple(launch.recipe_parts(name).values()) == PARTS[name]
    if name not in ("grpo", "dapo", "pilot_commit"):
        assert launch.compose_recipe(name).algorithm.xrpo.planner.n_avg == 8  # compute-matched to GRPO's n


def test_xrpo_runs_one_planner_round_and_xrpo_r2_the_papers_two():
    one, two = launch.compose_recipe("xrpo"), launch.compose_recipe("xrpo_r2")
    assert (one.algorithm.xrpo.planner.rounds, two.algorithm.xrpo.planner.rounds) == (1, 2)
    two.algorithm.xrpo.planner.rounds = 1
    assert one == two  # nothing else differs
    assert launch.compose_recipe("xrpo_r1") == one  # the study's one-round records


def test_xrpo_floor_is_xrpo_without_icl_with_the_fail_floor_at_n_avg():
    floor, base = launch.compose_recipe("xrpo_floor"), launch.compose_recipe("xrpo_no_icl")
    assert (floor.algorithm.xrpo.planner.fail_floor, base.algorithm.xrpo.planner.fail_floor) == (8, 0)
    base.algorithm.xrpo.planner.fail_floor = 8
    assert floor == base  # nothing else differs


def test_icl_prompts_fit_the_prompt_budget_of_the_learning_setting():
    cfg = launch.compose_recipe("xrpo")
    # two worked 3-digit sums take ~210 tokens; the prompt and response must fit 256 positions
    assert cfg.data.max_prompt_length >= 200 and cfg.algorithm.xrpo.icl.max_example_tokens >= 33
    assert cfg.data.max_prompt_length + 48 <= 256


def test_dapo_recipe_is_grpo_with_verls_dynamic_sampling():
    run = launch.CpuRun("/model", "/train.parquet", "/val.parquet", "/out", steps=3, prompts_per_step=8, n=8)
    grpo = launch.trainer_command(run, launch.load_recipe("grpo"))
    dapo = launch.trainer_command(run, launch.load_recipe("dapo"))
    assert dapo[: len(grpo)] == grpo  # verl's own config, GRPO's settings, then the filter
    assert set(dapo[len(grpo) :]) == {"algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=reward"}


def test_the_study_arms_of_issue_46_differ_from_xrpo_only_where_their_names_say():
    """XRPO with prompt selection, with bare-prompt ICL (ICL rows trained without the examples,
    weighted by verl's truncated sequence IS weight), and with both."""
    base = launch.compose_recipe("xrpo")
    select, bare = launch.compose_recipe("xrpo_select"), launch.compose_recipe("xrpo_bare_icl")
    both = launch.compose_recipe("xrpo_select_bare_icl")
    assert base.algorithm.xrpo.planner.selection == "batch" and base.algorithm.xrpo.icl.mode == "with_icl"
    assert select.algorithm.xrpo.planner.selection == "history"
    assert (bare.algorithm.xrpo.icl.mode, bare.algorithm.rollout_correction.rollout_is) == ("strip_icl", "sequence")
    assert both.algorithm.xrpo.planner.selection == "history" and both.algorithm.xrpo.icl.mode == "strip_icl"
    select.algorithm.xrpo.planner.selection = "batch"
    assert select == base
    both.algorithm.xrpo.planner.selection = "batch"
    assert both == bare


def test_pilot_commit_is_grpo_in_the_xrpo_trainer_with_its_pilot_of_one_in_four():
    cfg = launch.compose_recipe("pilot_commit")
    p = cfg.algorithm.xrpo.planner
    assert (p.selection, p.pilot_rollouts, p.pilot_lower, p.pilot_upper) == ("pilot_commit", 2, 0.25, 0.25)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.trainer.v1.trainer_mode == "xrpo"


def test_the_cpu_recipes_keep_the_phased_schedule_of_their_records():
    from omegaconf import OmegaConf

    from xrpo_verl.verl_adapters.config import validate_trainer_config

    cfg = launch.compose_recipe("xrpo")
    for engine in ("hf", "vllm"):
        OmegaConf.update(cfg, "actor_rollout_ref.rollout.name", engine)
        assert validate_trainer_config(cfg, check_embedder=False).xrpo.planner.schedule == "phased"
