"""selection=history: the selector keys prompts, keeps the likeliest mixed groups, records the bare
prompt's rollouts, survives a checkpoint, and its memory is set by the dataset."""

import numpy as np
import pytest

from xrpo_verl.config import ExTraConfig, XRPOConfig
from xrpo_verl.verl_adapters.config import PluginSettings
from xrpo_verl.verl_adapters.selection import PromptSelector
from xrpo_verl.verl_adapters.state import PluginState


def test_a_prompt_seen_mixed_beats_an_unseen_one_which_beats_one_seen_all_fail():
    sel = PromptSelector(10, half_life=8.0)
    sel.record(["mixed"] * 8 + ["fail"] * 8, [True, False] * 4 + [False] * 8, step=1)
    rng = np.random.default_rng(0)
    keys = ["fail", "new", "mixed"]
    assert sel.choose(keys, 1, step=2, n=8, rng=rng).tolist() == [2]
    assert sel.choose(keys, 2, step=2, n=8, rng=rng).tolist() == [1, 2]
    given = sel.scores(keys, step=2, n=8)  # the trainer scores once and passes them in
    assert sel.choose(keys, 2, step=2, n=8, rng=rng, score=given).tolist() == [1, 2]
    # long after, the all-fail record has decayed and "fail" ranks with an unseen prompt again
    late = sel.scores(keys, step=400, n=8)
    assert late[0] == pytest.approx(late[1], abs=1e-4)


def test_a_prompt_twice_among_the_candidates_is_kept_once_while_others_remain():
    sel = PromptSelector(10, half_life=8.0)
    sel.record(["a"] * 4, [True, False, True, False], step=0)
    picked = sel.choose(["a", "b", "a", "c"], 3, step=1, n=4, rng=np.random.default_rng(0))
    assert picked.tolist() == [0, 1, 3]


def test_record_counts_each_prompts_rollouts_once_per_step():
    sel = PromptSelector(4, half_life=1e9)
    assert sel.record(["x", "y", "x", "x"], [True, False, False, True], step=3) == 2
    a, b = sel.history.posterior(np.array([sel.slots["x"], sel.slots["y"]]), step=3)
    assert a.tolist() == [2.5, 0.5] and b.tolist() == [1.5, 1.5]


def test_more_distinct_prompts_than_the_dataset_is_an_error():
    sel = PromptSelector(2, half_life=4.0)
    sel.record(["a", "b"], [True, False], step=0)
    with pytest.raises(ValueError, match="seen 2 distinct prompts"):
        sel.scores(["c"], step=1, n=4)


def _settings(selection="history", half_life=0.0):
    xrpo = XRPOConfig.from_dict({"planner": {"selection": selection, "history_half_life": half_life}})
    return PluginSettings(xrpo=xrpo, extra=ExTraConfig(), adv_estimator="xrpo", norm_adv_by_std=True, rollout_n=16)


def test_the_plugin_state_builds_it_only_for_history_and_sizes_it_by_the_dataset(hash_encoder):
    off = PluginState(_settings("batch"), embedder_factory=lambda cfg: hash_encoder)
    off.build_prompt_selector(1000, 8)
    assert off.prompt_selector is None
    on = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    on.build_prompt_selector(1000, 8)
    assert on.prompt_selector.capacity == 1000
    assert on.prompt_selector.half_life == 125.0  # one epoch at 8 prompts a step
    h = on.prompt_selector.history
    assert h.successes.nbytes + h.failures.nbytes + h.last_step.nbytes == 1000 * 12


def test_it_resumes_exactly_from_a_checkpoint_folder(tmp_path, hash_encoder):
    a = PluginState(_settings(half_life=6.0), embedder_factory=lambda cfg: hash_encoder)
    a.build_prompt_selector(50, 4)
    a.prompt_selector.record(["p", "q", "q"], [True, True, False], step=2)
    a.save(str(tmp_path / "global_step_2"))
    b = PluginState(_settings(half_life=6.0), embedder_factory=lambda cfg: hash_encoder)
    b.build_prompt_selector(50, 4)
    b.load(str(tmp_path / "global_step_2"))
    keys = ["p", "q", "r"]
    np.testing.assert_array_equal(b.prompt_selector.scores(keys, 5, 8), a.prompt_selector.scores(keys, 5, 8))
    assert b.prompt_selector.slots == a.prompt_selector.slots
    c = PluginState(_settings(half_life=7.0), embedder_factory=lambda cfg: hash_encoder)
    c.build_prompt_selector(50, 4)
    with pytest.raises(ValueError, match="half-life"):
        c.load(str(tmp_path / "global_step_2"))


def test_a_version_3_checkpoint_resumes_with_an_empty_history(tmp_path, hash_encoder):
    a = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    a.build_prompt_selector(50, 4)
    old = a.state_dict()
    old["version"] = 3
    del old["components"]["prompt_selector"]
    old["components"]["prompt_selector"] = None
    b = PluginState(_settings(), embedder_factory=lambda cfg: hash_encoder)
    b.build_prompt_selector(50, 4)
    b.load_state_dict(old)
    assert len(b.prompt_selector) == 0
