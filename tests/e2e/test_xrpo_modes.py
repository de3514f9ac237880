"""`xrpo` and `xrpo_extra` train through verl's real trainer (`python -m verl.trainer.main_ppo`,
`hf` rollout, tiny model), and every exploration signal acts in a real run; `grpo` is test_grpo.py,
`extra` runs on the code task in test_code_rl.py.

Runs are shared between assertions (a launch costs about a minute on 2 cores). The xrpo_extra run
trains 4 steps of 8 prompts over a set of 16, so every prompt is visited twice (2 epochs): half easy
(the warmed-up model samples ~40% right), half hard (operands to 99, always failed). Easy successes
fill the ICL corpus at step 1; hard all-fail groups trigger ICL and queue ExTra prefixes. Every
signal is on, and verl's rollout correction computes token IS weights. The run stops after step 3
(`trainer.total_training_steps=3`: verl's loop ends there, as a killed run would after its step-3
checkpoint) and is resumed to 4; the resumed step must start from the saved ICL corpus, novelty
memory, guided queue and counters. The xrpo run trains with ExTra's signals off, which must then
log exactly 0.
"""

import json
import pickle
from pathlib import Path

import pytest

from xrpo_verl.lab import arith, launch
from xrpo_verl.lab.launch import read_metrics
from xrpo_verl.planner import round_budgets

pytestmark = pytest.mark.slow

STEPS, PROMPTS, TRAIN_SET = 4, 8, 16
PREFIX_PER_STEP = 2  # xrpo_verl/lab/recipes/_xrpo_cpu.yaml: algorithm.extra.prefix.per_step
IS_WEIGHTS = "algorithm.rollout_correction.rollout_is=token"
STREAMING = "algorithm.xrpo.planner.schedule=streaming"
ICL_ALWAYS = "algorithm.xrpo.icl.gate=always"  # the paper's ICL: every all-fail prompt, so ICL surely acts


def state(run: launch.CpuRun, step: int) -> dict:
    return pickle.loads((run.ckpt_dir / f"global_step_{step}" / "xrpo" / "state.pkl").read_bytes())


@pytest.fixture(scope="module")
def mixed_data(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mixed")
    train = arith.write_parquet(root / "train.parquet", TRAIN_SET, seed=21, split="train", hard_every=2)
    val = arith.write_parquet(root / "val.parquet", 8, seed=22, split="test")
    return train, val


def train(recipe, model_dir, data, out_dir, *, prompts, steps=2, save_freq=-1, extra=()):
    run = launch.CpuRun(
        str(model_dir),
        str(data[0]),
        str(data[1]),
        str(out_dir),
        steps=steps,
        save_freq=save_freq,
        prompts_per_step=prompts,
    )
    result = launch.launch(run, recipe, list(extra), timeout_s=900)
    assert result.returncode == 0, result.stdout[-6000:]
    return run, read_metrics(run.metrics_path)


@pytest.fixture(scope="module")
def xrpo_extra(tiny_model_dir, mixed_data, tmp_path_factory):
    """Every feature on, a checkpoint each step; stopped after step 3, then resumed to 4.

    Returns (run, metrics of steps 1-3, state saved at 3, the resumed launch's stdout, metrics 1-4)."""
    out = tmp_path_factory.mktemp("xrpo_extra")
    first = [IS_WEIGHTS, ICL_ALWAYS]
    run, before = train(
        "xrpo_extra", tiny_model_dir, mixed_data, out, prompts=PROMPTS, steps=STEPS - 1, save_freq=1, extra=first
    )
    saved = state(run, STEPS - 1)
    extra = [*first, f"trainer.total_training_steps={STEPS}", "trainer.resume_mode=auto"]
    result = launch.launch(run, "xrpo_extra", extra, timeout_s=900)
    assert result.returncode == 0, result.stdout[-6000:]
    metrics = read_metrics(run.metrics_path)
    print(
        "\n"
        + json.dumps(
            {s: {k: v for k, v in m.items() if k.startswith(("xrpo/", "rollout_corr/"))} for s, m in metrics.items()},
            indent=0,
            sort_keys=True,
        )
    )
    return run, before, saved, result.stdout, metrics


@pytest.fixture(scope="module")
def xrpo_run(tiny_model_dir, mixed_data, tmp_path_factory):
    """XRPO with the paper's two rounds, streamed, and the earned ICL gate (the xrpo_extra run covers
    the phased schedule and the paper's always-ICL)."""
    return train("xrpo_r2", tiny_model_dir, mixed_data, tmp_path_factory.mktemp("xrpo"), prompts=4, extra=[STREAMING])


def _total(metrics, key):
    return sum(m[key] for m in metrics.values())


def test_xrpo_extra_trains_two_epochs_with_planner_and_weight_sync(xrpo_extra):
    _, _, _, _, metrics = xrpo_extra
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert STEPS * PROMPTS >= 2 * TRAIN_SET  # every prompt visited twice
    for m in metrics.values():
        assert m["response_length/mean"] > 0
        assert m["training/rollout_probs_diff_max"] < 1e-4
        assert 0.0 < m["xrpo/time_share/plugin"] < 1.0
        assert "rollout_corr/rollout_is_mean" in m  # verl's rollout correction ran for our estimator
        # compute-matched: B * n_avg rollouts over the B - guided base prompts, n_base = 2 each
        assert m["xrpo/round_1/step_rollouts"] == m["xrpo/prompts/base"] * 2
        # phased: every round waits, so the engine drains; the peak is at least the base phase
        assert m["xrpo/gen/in_flight_peak"] >= m["xrpo/prompts/base"] * 2 and 0 < m["xrpo/gen/occupancy"] <= 1
    # the planner gave prompts different rollout counts
    assert any(m["xrpo/alloc/n_q/max"] > m["xrpo/alloc/n_q/min"] for m in metrics.values())


def test_guided_rows_have_masked_prefixes_chosen_by_entropy(xrpo_extra):
    """Counted by the trainer from the step's own batch: response tokens with response_mask 0."""
    _, _, _, _, metrics = xrpo_extra
    assert metrics[1]["xrpo/prefix/guided_rows"] == 0  # nothing queued before step 1
    m = metrics[2]
    assert m["xrpo/guided/injected"] > 0  # hard prompts of step 1 came back as guided prompts
    assert m["xrpo/prefix/guided_rows"] == m["xrpo/guided/rollouts"] > 0
    assert m["xrpo/prefix/masked_prefix_tokens"] >= 2 * m["xrpo/prefix/guided_rows"]  # >= 2 tokens each
    for m in metrics.values():
        assert m["xrpo/prefix/guided_rows_masked"] == m["xrpo/prefix/guided_rows"]  # every guided row
        assert m["xrpo/prefix/masked_tokens_other_rows"] == 0  # nothing masked elsewhere
        assert m["xrpo/prefix/smoothing_tied"] == 0  # the smoothing never collapsed to a tie
    assert (
        _total(metrics, "xrpo/guided/queued") > 0 and max(m["xrpo/prefix/candidates/max"] for m in metrics.values()) > 1
    )
    # chosen by entropy over real alternatives: the smoothed argmin agrees with the raw one here. On
    # this task the first step copies the question (lowest entropy), so it is also the shortest;
    # tests/verl_adapters/test_prefixes.py pins a choice that is not the shortest.
    assert _total(metrics, "xrpo/prefix/chosen_lowest_raw") > 0


def test_icl_triggers_on_all_fail_prompts_with_whole_solutions(xrpo_extra, xrpo_run):
    """Step 1 has an empty corpus; once it holds successes, all-fail (hard) prompts get ICL prompts.
    Hard prompts are beyond the tiny model, so flips stay 0 here; they are counted all the same.
    Step 1 itself may bring no success (its few normal prompts all failing happens about 1% of
    the time), so the corpus is checked before each step, not assumed full after step 1."""
    _, _, _, _, m_xe = xrpo_extra
    _, m_x = xrpo_run
    assert m_xe[1]["xrpo/icl/triggers"] == 0  # the corpus is empty when step 1's prompts are decided
    assert max(m["xrpo/icl/corpus_size"] for m in m_xe.values()) > 0
    for m in (*m_xe.values(), *m_x.values()):
        assert m["xrpo/icl/fallback_no_fit"] == 0  # the rendered prompts fit the rollout's prompt cap
    filled = [s for s in range(2, STEPS + 1) if m_xe[s - 1]["xrpo/icl/corpus_size"] > 0]
    assert filled and all(m_xe[s]["xrpo/icl/fallback_no_examples"] == 0 for s in filled)
    assert _total(m_xe, "xrpo/icl/triggers") > 0
    assert _total(m_xe, "xrpo/icl/examples_whole") > 0  # whole verified solutions, answer included


def test_sharpening_raises_every_correct_response_less_likely_than_its_group(xrpo_extra):
    """Sharpening acts only on a correct response of a mixed group that is less likely than its
    group's mean. This model rarely writes one (its correct answers are near-identical and likelier
    than its wrong ones), so a short run may hold none: the test checks that every one it holds got
    a bonus, and that the likelihoods sharpening reads are live. Its size at scale is in
    benchmarks/RESULTS.md (convergence study, parts table)."""
    _, _, _, _, metrics = xrpo_extra
    for m in metrics.values():
        assert m["xrpo/sharpening/bonus_rows"] >= m["xrpo/sharpening/eligible_rows"]
    assert max(m["xrpo/sharpening/seq_logp_spread"] for m in metrics.values()) > 0
    if _total(metrics, "xrpo/sharpening/eligible_rows") > 0:
        assert max(m["xrpo/sharpening/bonus_share"] for m in metrics.values()) > 0


def test_novelty_is_scored_from_the_first_visit_and_gated_by_correctness(xrpo_extra):
    """Step 1 sees every prompt for the first time: the memory is empty and the siblings are the
    reference set, so responses already score. On this task a prompt's correct responses are the
    same text ("3+4\\n=7\\n\\boxed{7}"), so their novelty is ~0 and the bonus has nothing to rank;
    `correct_distinct` logs how many correct responses differed from their siblings. The bonus's
    scale is pinned by tests/verl_adapters/test_estimators.py."""
    _, _, _, _, metrics = xrpo_extra
    assert metrics[1]["xrpo/novelty/mean_all"] > 0
    for m in metrics.values():
        assert 0.0 <= m["xrpo/novelty/bonus_share"] <= 1.0
        assert m["xrpo/novelty/memory_prompts"] > 0


def test_resume_restores_the_plugin_state(xrpo_extra):
    run, before, saved, stdout, after = xrpo_extra
    last = STEPS - 1
    assert f"global_step_{last}" in stdout
    assert sorted(before) == list(range(1, STEPS))  # the first launch stopped after step 3
    final = state(run, STEPS)
    # ICL corpus: a corpus rebuilt from scratch would hold none of steps 1-3's successes
    corpus = set(saved["components"]["corpus"]["ids"])
    assert len(corpus) == before[last]["xrpo/icl/corpus_size"] > 0
    assert corpus <= set(final["components"]["corpus"]["ids"])
    assert after[STEPS]["xrpo/icl/corpus_size"] >= len(corpus)
    # novelty memory: every saved prompt key is still there
    assert set(saved["components"]["novelty"]["memory"]) <= set(final["components"]["novelty"]["memory"])
    # guided queue: step 4 injected exactly what the saved queue allowed (an empty queue would give 0)
    queued = saved["components"]["guided_queue"]["items"]
    assert len(queued) > 0
    assert after[STEPS]["xrpo/guided/injected"] == min(PREFIX_PER_STEP, len(queued))
    # counters continue from the saved values, and equal the per-step metrics summed over the run
    for counter, metric in (("guided_injected", "xrpo/guided/injected"), ("icl_triggers", "xrpo/icl/triggers")):
        assert final["counters"][counter] == saved["counters"][counter] + after[STEPS][metric]
        assert final["counters"][counter] == _total(after, metric)
    assert final["counters"]["icl_flips"] == _total(after, "xrpo/icl/flips")
    assert after[STEPS]["training/rollout_probs_diff_max"] < 1e-4  # restored weights reached the server


NOVELTY_KEYS = ("xrpo/novelty/bonus_rows", "xrpo/novelty/bonus_share", "xrpo/novelty/positive_correct")
PREFIX_KEYS = ("xrpo/guided/queued", "xrpo/prefix/hard_prompts", "xrpo/prefix/candidates/max", "xrpo/guided/injected")


def test_xrpo_trains_two_steps_with_the_planners_budgets(xrpo_run):
    """4 prompts can all have zero-variance groups (equal priorities, equal counts), so unequal
    counts are asserted on the xrpo_extra run; here the streaming rounds hand out the step's budget
    (a round's unspent share passes to the next, so only the sum is fixed)."""
    _, metrics = xrpo_run
    assert sorted(metrics) == [1, 2]
    budgets = round_budgets(4, 4, 2, 2)  # B=4, n_avg=n=4, n_base=n/2, R=2 (launch.xrpo_sizes, xrpo_r2.yaml)
    for m in metrics.values():
        assert m["xrpo/round_1/rollouts"] + m["xrpo/round_2/rollouts"] == sum(budgets[1:])
        assert 0 <= m["xrpo/streaming/released_at_close"] <= m["xrpo/round_2/rollouts"]
        assert m["timing_s/xrpo_streaming"] > 0 and "timing_s/xrpo_round_1" not in m  # no phased barrier
        assert 0 < m["xrpo/round_0/back_s"] <= m["xrpo/round_2/back_s"]
        assert m["xrpo/gen/in_flight_peak"] >= budgets[0]
        # the earned ICL gate: both arms keep at least gate_min_share of the all-fail prompts
        assert 0.1 <= m["xrpo/icl/gate_share"] <= 0.9
        assert m["response_length/mean"] > 0 and m["training/rollout_probs_diff_max"] < 1e-4
        assert m["xrpo/prefix/guided_rows"] == 0  # ExTra off
        # switched off here (estimator `xrpo`, prefix.enable=false): exactly zero, not missing
        assert all(m[k] == 0 for k in NOVELTY_KEYS + PREFIX_KEYS), {k: m.get(k) for k in NOVELTY_KEYS + PREFIX_KEYS}
        assert m["xrpo/alloc/n_q/mean"] == 4
    assert metrics[1]["xrpo/icl/gate_share"] == pytest.approx(0.5, abs=1e-6)  # no data yet: a fair coin
    # the hard prompts are all-fail, so some round rollouts went to one arm or the other
    assert _total(metrics, "xrpo/icl/icl_rollouts") + _total(metrics, "xrpo/icl/zero_shot_rollouts") > 0


SELECTION = ["algorithm.xrpo.planner.selection=history", "algorithm.xrpo.planner.candidates=2"]
FAIL_FLOOR = 4  # = n_avg: a prompt with no success after its n_base = 2 base rollouts keeps GRPO's 4


@pytest.fixture(scope="module")
def selection_run(tiny_model_dir, mixed_data, tmp_path_factory):
    """The planner with selection=history: 4 steps fetch 2 x 4 candidates each from the 16 prompts
    (two epochs of candidates), so the second epoch meets prompts with a record; half of them are the
    hard, always-failed ones. The planner's fail floor is on too (the `xrpo_floor` recipe's floor, on
    a run whose hard prompts are sure to fail their base rollouts)."""
    out = tmp_path_factory.mktemp("selection")
    extra = [*SELECTION, f"algorithm.xrpo.planner.fail_floor={FAIL_FLOOR}"]
    return train("xrpo_planner", tiny_model_dir, mixed_data, out, prompts=4, steps=4, save_freq=4, extra=extra)


def test_selection_trains_the_candidates_most_likely_to_give_mixed_groups(selection_run):
    run, metrics = selection_run
    assert sorted(metrics) == [1, 2, 3, 4]
    for m in metrics.values():
        assert m["xrpo/select/candidates"] == 8 and m["xrpo/prompts/base"] == 4
        assert m["xrpo/select/recorded"] == 4  # every trained prompt's bare rollouts are folded in
        assert m["xrpo/select/score_trained"] >= m["xrpo/select/score_passed_over"]
        assert m["xrpo/alloc/n_q/mean"] == 4  # the budget is GRPO's: B x n
        assert 0 <= m["xrpo/groups/mixed"] <= 4
    assert metrics[1]["xrpo/select/trained_with_record"] == 0  # nothing is known at the first step
    # the second epoch: candidates with a record, the all-fail ones ranked below the prior
    late = [metrics[s] for s in (3, 4)]
    assert sum(m["xrpo/select/trained_with_record"] for m in late) > 0
    assert any(m["xrpo/select/score_trained"] > m["xrpo/select/score_passed_over"] for m in late)
    saved = state(run, 4)["components"]["prompt_selector"]
    assert len(saved["keys"]) == metrics[4]["xrpo/select/prompts_tracked"] <= TRAIN_SET
    assert saved["capacity"] == TRAIN_SET and saved["half_life"] == TRAIN_SET / 4  # one epoch at 4 a step
    assert float(saved["successes"].sum() + saved["failures"].sum()) > 0


def test_the_fail_floor_tops_up_the_prompts_without_a_success(selection_run):
    """The floor's top-up comes out of the planner's round, never on top of GRPO's budget, and at most
    F - n_base a prompt; the hard prompts fail their base rollouts, so some steps pay it."""
    _, metrics = selection_run
    round_budget = sum(round_budgets(4, 4, 2, 2)[1:])  # B=4, n_avg=4, n_base=2, R=2 (_xrpo_cpu.yaml)
    for m in metrics.values():
        assert 0 <= m["xrpo/alloc/fail_floor_rollouts"] <= min(round_budget, 4 * (FAIL_FLOOR - 2))
        assert m["xrpo/alloc/n_q/mean"] == 4
    assert _total(metrics, "xrpo/alloc/fail_floor_rollouts") > 0


@pytest.fixture(scope="module")
def pilot_commit_run(tiny_model_dir, mixed_data, tmp_path_factory):
    """Pilot-Commit at n = 4: pilots of 3 rollouts, a prompt passes with one or two successes of three and
    gets 1 more. Half the prompts are never solved, so a pass needs pilots to spare: up to 30 of them."""
    out = tmp_path_factory.mktemp("pilot_commit")
    extra = ["algorithm.xrpo.planner.pilot_rollouts=3", "algorithm.xrpo.planner.pilot_max_rounds=30"]
    return train("pilot_commit", tiny_model_dir, mixed_data, out, prompts=4, steps=2, extra=extra)


def test_pilot_commit_trains_b_committed_groups_and_discards_the_failed_pilots(pilot_commit_run):
    _, metrics = pilot_commit_run
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert m["xrpo/prompts/base"] == 4  # B committed prompts
        assert m["xrpo/pc/passes"] >= 2  # the first pass only pilots
        assert m["xrpo/pc/piloted"] == 4 * (m["xrpo/pc/passes"] - 1) or m["xrpo/pc/piloted"] == 4 * m["xrpo/pc/passes"]
        assert m["xrpo/pc/rollouts"] == 3 * m["xrpo/pc/piloted"] + 4 * 1
        assert m["xrpo/pc/untrained_groups"] == m["xrpo/pc/piloted"] - 4
        # only committed groups are trained, and a pilot of one or two successes in three makes every one mixed
        assert m["xrpo/groups/mixed"] == 4 and m["xrpo/groups/mixed_rollout_share"] == 1.0
