"""Trainer mode `xrpo`: verl 0.9.1's V1 sync trainer with XRPO/ExTra rollout rounds and advantages.

Select with `trainer.v1.trainer_mode=xrpo` (`xrpo_verl/hydra_config/xrpo_trainer.yaml`). A step,
in the order this file reads:

1. `prepare_step`, the rollouts: the dataloader's prompts get `n_base` rollouts each (rollout.n
   without the planner); queued ExTra guided prompts replace the batch's tail rows, each its own
   group of `n_suffix` suffix rollouts (agent loop `extra_prefix`). With the planner, R rounds
   follow (`xrpo_verl.planner.plan_round`): each hands out its share of the budget by Π_q over the
   rewards so far, as one batched submission under the same uids (new session ids); all-fail
   prompts get theirs from an ICL prompt of verified successes (agent loop `xrpo_icl`).
2. verl's own pipeline: replay buffer, `_balance_batch` (ours also sorts each mini-batch's rows by
   length, `micro_batches.py`, so that an ICL or guided row pads only rows as long as itself),
   old log-probs with token entropies, ...
3. `_compute_advantage`: our registered estimator with the inputs only this trainer has
   (sequence likelihoods, novelty, the variance gate), then the memories: successes into the ICL
   corpus, responses into the novelty memory (inside `novelty_scores`), prefixes of hard prompts
   into the guided queue for later steps.
4. verl's actor update; the plugin state is saved with verl's checkpoints and restored on resume.

The maths is in the pure modules; TransferQueue's layout in `trajectories.py`; the step's metrics
in `step_metrics.py`. See docs/multiround.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from xrpo_verl import icl as icl_lib
from xrpo_verl import planner
from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.rewards import code as code_reward
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters import step_metrics as M
from xrpo_verl.verl_adapters import trajectories as T
from xrpo_verl.verl_adapters.advantage_inputs import novelty_scores, rollout_correction, variance_gate
from xrpo_verl.verl_adapters.agent_loops import ICL_AGENT, PREFIX_AGENT, select_agent_loop_manager
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.config import TRAINER_MODE, validate_trainer_config
from xrpo_verl.verl_adapters.estimators import XrpoAdvantageInputs
from xrpo_verl.verl_adapters.micro_batches import padded_cuts, padding_share, sorted_within_blocks
from xrpo_verl.verl_adapters.prefixes import PrefixQueueResult, newline_token_ids, queue_prefixes
from xrpo_verl.verl_adapters.state import PluginState
from xrpo_verl.verl_adapters.verl_internals import check_verl


@dataclass
class _IclLog:
    """ICL seeding in one step: the sessions of all-fail prompts by arm, and every retrieval decision."""

    share: float  # probability that an all-fail prompt gets ICL this step (the gate's)
    sessions: dict[str, list[range]] = field(default_factory=dict)  # uid -> its ICL rollouts
    zero_shot: dict[str, list[range]] = field(default_factory=dict)  # uid -> its zero-shot rollouts while all-fail
    decisions: list[icl_lib.ICLDecision] = field(default_factory=list)


@register_trainer(TRAINER_MODE)
class XrpoTrainer(PPOTrainerSync):
    """`PPOTrainerSync` plus planner rounds, ICL seeding, prefix regeneration and our estimators."""

    def __init__(self, config: DictConfig):
        # Before any worker, dataset or server is built: a bad config or verl fails in seconds.
        check_verl()
        self.xrpo_settings = validate_trainer_config(config)
        select_agent_loop_manager(config)
        super().__init__(config)
        self.xrpo_state = PluginState(self.xrpo_settings)
        self._plugin_s = 0.0  # our own bookkeeping's share of the step, logged as xrpo/time_s/plugin
        self._newlines: set[int] | None = None  # built on first use (scans the vocabulary)
        self._step_rows: dict[str, dict] = {}  # uid -> dataset row submitted this step

    # verl's PPOTrainer takes the mode's *semantics* from `self.trainer_mode == "sync"` (the replay
    # buffer class, one dataloader fetch per step, no TransferQueue checkpoint, no prompt persistence)
    # and reads the configured name into it. An xrpo step is a sync step (every round of it is trained
    # in one update, with the same weights), so the name verl sees is "sync"; the configured name
    # `xrpo` selects this class (main_ppo's `get_trainer_cls`) and is validated at start-up.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, configured: str) -> None:
        if configured not in (TRAINER_MODE, "sync"):
            raise ValueError(f"XrpoTrainer runs trainer mode {TRAINER_MODE!r}, not {configured!r}")

    # ------------------------------------------------------------------ 1. rollouts
    def prepare_step(self) -> dict:
        self._plugin_s = 0.0
        with marked_timer("gen", self.timing_raw):
            return self._rollouts()

    def _rollouts(self) -> dict:
        s = self.xrpo_settings
        if s.xrpo.planner.selection == "pilot_commit":
            return self._pilot_commit()
        tic = time.perf_counter()
        rows, scalars, select_metrics = self._candidate_rows()
        default_agent = self.config.actor_rollout_ref.rollout.agent.default_agent_loop
        guided = self._pop_guided(len(rows))
        base_rows = rows[: len(rows) - len(guided)]
        n0 = s.xrpo.planner.n_base if s.use_planner else s.rollout_n
        base = [R.with_plugin_columns(r, kind="base", rollout_n=n0, agent_name=default_agent) for r in base_rows]
        submit = list(base)
        for gp, template in zip(guided, rows[len(base_rows) :], strict=True):
            submit.append(
                R.with_plugin_columns(
                    R.guided_row(template, gp.source_row, uid=gp.uid),
                    kind="guided",
                    rollout_n=s.extra.prefix.n_suffix,
                    agent_name=PREFIX_AGENT,
                    prefix_ids=gp.prefix_ids,
                    key=gp.original_prompt_id,
                )
            )
        self._step_rows = {r["uid"]: r for r in base}  # the source rows of guided prompts queued this step
        self._plugin_s += time.perf_counter() - tic
        ledger = T.RolloutLedger()
        in_flight = T.InFlight(ledger)
        with marked_timer("xrpo_round_0", self.timing_raw):
            self._submit(submit, scalars, ledger)
            if not (s.use_planner and s.xrpo.planner.schedule == "streaming"):
                T.wait_terminal({r["uid"] for r in submit}, on_poll=in_flight.sample)
        metrics = {"xrpo/prompts/base": float(len(base)), "xrpo/guided/injected": float(len(guided))}
        metrics.update(select_metrics)
        self.xrpo_state.counters["guided_injected"] += len(guided)
        if not s.use_icl:  # switched off: exactly zero
            metrics.update(M.icl_metrics([], 0, 0, 0))
            metrics.update(M.icl_gate_metrics(0.0, ArmCounts(), ArmCounts(), 0))
        if s.use_planner and s.xrpo.planner.schedule == "streaming":
            guided_uids = {r["uid"] for r in submit[len(base) :]}
            metrics.update(self._streaming_rounds(base, scalars, ledger, in_flight, default_agent, guided_uids))
        elif s.use_planner and s.xrpo.planner.rounds > 0:
            metrics.update(self._planner_rounds(base, scalars, ledger, in_flight, default_agent))
        metrics.update(in_flight.metrics())
        return metrics

    def _candidate_rows(self) -> tuple[list[dict], dict, dict]:
        """The step's prompts: the dataloader's B, or with selection=history the B of C*B candidates
        most likely to give a mixed group (`selection.PromptSelector`)."""
        s, b = self.xrpo_settings, int(self.config.data.train_batch_size)
        selector = self.xrpo_state.prompt_selector
        if selector is None:
            rows, scalars = R.to_rows(self._next_train_batch())
            return rows, scalars, {}
        p = s.xrpo.planner
        candidates, scalars = R.to_rows(self._next_train_batch(p.candidates * b))
        tic = time.perf_counter()
        keys = [R.prompt_key(r["raw_prompt"]) for r in candidates]
        n = p.n_avg if s.use_planner else s.rollout_n
        rng = np.random.default_rng([int(self.config.data.get("seed", 0) or 0), int(self.global_steps)])
        seen_before = np.array([k in selector.slots for k in keys])
        score = selector.scores(keys, self.global_steps, n)
        chosen = selector.choose(keys, b, self.global_steps, n, rng)
        self._plugin_s += time.perf_counter() - tic
        rows = [candidates[i] for i in chosen]
        return rows, scalars, M.selection_metrics(score, chosen, seen_before, len(selector))

    def _pilot_commit(self) -> dict:
        """Pilot-Commit (arXiv 2605.26606), the baseline, as its released code runs a step, within the step
        (docs/algorithms.md): each generation pass pilots B new prompts with k_e rollouts and commits
        rollout.n - k_e more to prompts whose pilot success rate lies in [lower, 1 - upper], until B
        prompts are committed; the rest (failed pilots, passed ones beyond B) leave TransferQueue untrained.
        """
        s, b = self.xrpo_settings, int(self.config.data.train_batch_size)
        p, agent = s.xrpo.planner, self.config.actor_rollout_ref.rollout.agent.default_agent_loop
        k_e = p.pilot_rollouts
        ledger = T.RolloutLedger()
        in_flight = T.InFlight(ledger)
        passed: list[dict] = []  # rows whose pilot passed, not yet committed
        committed: list[str] = []
        piloted: list[str] = []
        scalars: dict = {}
        passes = 0
        while len(committed) < b:
            if passes == p.pilot_max_rounds:
                raise RuntimeError(
                    f"Pilot-Commit committed {len(committed)} of {b} prompts in {passes} pilot batches "
                    "(algorithm.xrpo.planner.pilot_max_rounds); the data may be too hard or too easy for its filter"
                )
            passes += 1
            take, passed = passed[: b - len(committed)], passed[b - len(committed) :]
            submit = [
                R.with_plugin_columns(r, kind="round", rollout_n=s.rollout_n - k_e, agent_name=agent) for r in take
            ]
            pilots = []
            if len(committed) + len(take) < b:  # the next pilots go with these commits, as its code does
                rows, scalars = R.to_rows(self._next_train_batch())
                pilots = [R.with_plugin_columns(r, kind="base", rollout_n=k_e, agent_name=agent) for r in rows]
            self._submit(submit + pilots, scalars, ledger)
            T.wait_terminal({r["uid"] for r in submit + pilots}, on_poll=in_flight.sample)
            committed += [r["uid"] for r in take]
            tic = time.perf_counter()
            outcomes = ledger.outcomes([r["uid"] for r in pilots]) if pilots else {}
            for r in pilots:
                rate = float(np.mean([o.success for o in outcomes[r["uid"]]]))
                if p.pilot_lower <= rate <= 1 - p.pilot_upper:
                    passed.append(r)
            piloted += [r["uid"] for r in pilots]
            self._plugin_s += time.perf_counter() - tic
        dropped = set(piloted) - set(committed)
        T.clear_groups(dropped, T.listing(dropped))
        return {
            "xrpo/pc/passes": float(passes),
            "xrpo/pc/piloted": float(len(piloted)),
            "xrpo/pc/passed": float(len(committed) + len(passed)),
            "xrpo/pc/untrained_groups": float(len(dropped)),
            "xrpo/pc/rollouts": float(len(piloted) * k_e + b * (s.rollout_n - k_e)),
            "xrpo/prompts/base": float(len(committed)),
            **in_flight.metrics(),
        }

    def _planner_rounds(
        self, base: list[dict], scalars: dict, ledger: T.RolloutLedger, in_flight: T.InFlight, default_agent: str
    ) -> dict:
        """XRPO's phased allocation (§2.2): R rounds share B·(n_avg − n_base) rollouts by Π_q."""
        p = self.xrpo_settings.xrpo.planner
        uids = [r["uid"] for r in base]
        icl = self._icl_log()
        metrics: dict[str, float] = {}
        for r, budget in enumerate(planner.round_budgets(len(base), p.n_avg, p.n_base, p.rounds)[1:], start=1):
            tic = time.perf_counter()
            outcomes = ledger.outcomes(uids)
            plan = planner.plan_round([[o.reward for o in outcomes[u]] for u in uids], budget, p)
            submit = [
                self._round_row(row, k, outcomes[row["uid"]], ledger, icl, default_agent)
                for row, k in zip(base, plan.extra, strict=True)
                if k > 0
            ]
            self._plugin_s += time.perf_counter() - tic
            metrics.update(M.round_metrics(r, plan))
            if submit:
                with marked_timer(f"xrpo_round_{r}", self.timing_raw):
                    self._submit(submit, scalars, ledger)
                    T.wait_terminal({row["uid"] for row in submit}, on_poll=in_flight.sample)
        metrics.update(self._icl_outcome(icl, ledger))
        metrics.update(M.allocation_metrics([ledger.submitted[u] for u in uids]))
        return metrics

    def _streaming_rounds(
        self,
        base: list[dict],
        scalars: dict,
        ledger: T.RolloutLedger,
        in_flight: T.InFlight,
        default_agent: str,
        guided_uids: set[str],
    ) -> dict:
        """The same rounds, each prompt on its own (`planner.StreamingRounds`): a prompt's next round is
        decided and submitted as soon as its own rollouts are back, while the others still generate."""
        p = self.xrpo_settings.xrpo.planner
        uids = [r["uid"] for r in base]
        plan = planner.StreamingRounds(len(base), p)
        icl = self._icl_log()
        pending = set(uids) | guided_uids  # groups with rollouts in flight
        back_s = [0.0] * (p.rounds + 1)  # when the last rollout of round r came back
        t0 = progress = deadline = time.monotonic()  # progress: when a group last came back
        deadline += T.ROUND_TIMEOUT_S
        with marked_timer("xrpo_streaming", self.timing_raw):
            while pending:
                seen = T.listing(pending)
                in_flight.sample(seen)
                done = T.terminal(pending, seen)
                if not done:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{len(pending)} prompt groups did not finish (XRPO_ROUND_TIMEOUT_S)")
                    time.sleep(T.poll_delay(time.monotonic() - progress))
                    continue
                progress = time.monotonic()
                tic = time.perf_counter()
                pending -= done
                outcomes = ledger.outcomes(sorted(done & set(uids)), seen)
                submit = []
                for q, u in enumerate(uids):
                    if u not in outcomes:
                        continue
                    back_s[int(plan.round_of[q])] = time.monotonic() - t0  # the round just back
                    for q2, k in plan.back(q, [o.reward for o in outcomes[u]]).items():
                        known = outcomes.get(uids[q2]) or ledger.outcomes([uids[q2]])[uids[q2]]
                        submit.append(self._round_row(base[q2], k, known, ledger, icl, default_agent))
                self._plugin_s += time.perf_counter() - tic
                if submit:
                    self._submit(submit, scalars, ledger)
                    pending |= {row["uid"] for row in submit}
        if not plan.done:
            raise RuntimeError("streaming rounds ended with rollouts still to issue; a group came back twice")
        metrics = {f"xrpo/round_{r}/rollouts": float(n) for r, n in enumerate(plan.per_round) if r > 0}
        metrics.update({f"xrpo/round_{r}/back_s": t for r, t in enumerate(back_s)})
        metrics.update(self._icl_outcome(icl, ledger))
        metrics.update(M.allocation_metrics([ledger.submitted[u] for u in uids]))
        return metrics

    def _icl_log(self) -> _IclLog:
        gate = self.xrpo_state.icl_gate
        return _IclLog(share=gate.share() if gate is not None else 0.0)

    def _round_row(
        self, row: dict, k: int, outcomes: list[T.Outcome], ledger: T.RolloutLedger, icl: _IclLog, agent: str
    ) -> dict:
        """Prompt `row`'s k more rollouts: from an ICL prompt when it has no verified success yet and
        the ICL gate draws ICL for it (xrpo_verl/icl_gate.py; `gate=always` is the paper)."""
        # ICL's trigger (XRPO §2.3) is no verified success so far, not a reward of 0: a
        # partial-credit response does not solve the prompt
        u, s = row["uid"], self.xrpo_settings
        sessions = range(ledger.submitted[u], ledger.submitted[u] + k)
        decision = None
        if s.use_icl and not any(o.success for o in outcomes):
            if self.xrpo_state.icl_gate.use_icl(icl.share, self.global_steps, row[R.COL_PROMPT_KEY]):
                decision = self._icl_prompt(row)
                icl.decisions.append(decision)
            arm = icl.sessions if decision is not None and decision.text else icl.zero_shot
            arm.setdefault(u, []).append(sessions)
        icl_text = decision.text if decision is not None else ""
        return R.with_plugin_columns(
            row,
            kind="icl" if icl_text else "round",
            rollout_n=k,
            agent_name=ICL_AGENT if icl_text else agent,
            icl_prompt=icl_text,
            key=row[R.COL_PROMPT_KEY],
        )

    def _icl_outcome(self, icl: _IclLog, ledger: T.RolloutLedger) -> dict:
        """ICL's triggers and flips this step (a flip: a verified success among a prompt's ICL
        rollouts), the same for the zero-shot rollouts of all-fail prompts, and the gate's update."""
        if not self.xrpo_settings.use_icl:
            return {}
        final = ledger.outcomes(sorted(set(icl.sessions) | set(icl.zero_shot)))

        def arm(sessions: dict[str, list[range]]) -> tuple[ArmCounts, int]:
            wins = {u: [final[u][i].success for rg in rgs for i in rg] for u, rgs in sessions.items()}
            counts = ArmCounts(float(sum(map(len, wins.values()))), float(sum(map(sum, wins.values()))))
            return counts, sum(any(w) for w in wins.values())

        (icl_counts, flips), (zs_counts, zs_flips) = arm(icl.sessions), arm(icl.zero_shot)
        self.xrpo_state.icl_gate.update(icl_counts, zs_counts)
        self.xrpo_state.counters["icl_triggers"] += len(icl.sessions)
        self.xrpo_state.counters["icl_flips"] += flips
        metrics = M.icl_metrics(icl.decisions, len(icl.sessions), flips, len(self.xrpo_state.corpus))
        metrics.update(M.icl_gate_metrics(icl.share, icl_counts, zs_counts, zs_flips))
        return metrics

    def _submit(self, rows: list[dict], scalars: dict, ledger: T.RolloutLedger) -> None:
        """One batched submission (never one per prompt); each row's sessions reserved in the ledger."""
        rows = [{**row, R.COL_OFFSET: ledger.reserve(row["uid"], row[R.ROLLOUT_N])} for row in rows]
        self._submit_batch_to_rollout(R.from_rows(rows, scalars))

    def _icl_prompt(self, row: dict) -> icl_lib.ICLDecision:
        cfg, tok = self.xrpo_settings.xrpo.icl, self.tokenizer
        text = R.user_text(row["raw_prompt"])

        def count(t: str) -> int:
            return len(tok.encode(t, add_special_tokens=False))

        cap = cfg.max_prompt_tokens
        if cap is None:  # the rollout's prompt cap less what the chat template adds around the user turn
            templated = tok.apply_chat_template(list(row["raw_prompt"]), tokenize=False, add_generation_prompt=True)
            overhead = len(tok.encode(templated, add_special_tokens=False)) - count(text)
            cap = icl_lib.user_turn_budget(overhead, int(self.config.actor_rollout_ref.rollout.prompt_length))
        return icl_lib.icl_decision(
            self.xrpo_state.corpus,
            cfg,
            prompt_id=row[R.COL_PROMPT_KEY],
            prompt_text=text,
            count_tokens=count,
            max_prompt_tokens=cap,
        )

    def _pop_guided(self, batch_size: int) -> list[Any]:
        s = self.xrpo_settings
        if not s.use_prefix or self.global_steps <= s.extra.prefix.warmup_steps:
            return []
        queue = self.xrpo_state.guided_queue
        # Keep at least one dataloader prompt per step, so the planner always has a base group.
        take = min(s.extra.prefix.per_step, len(queue), batch_size - 1)
        return queue.pop_many(take) if take > 0 else []

    # ------------------------------------------------------------------ 2. rows into micro-batches
    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        """verl's balance across data-parallel ranks, then each mini-batch's rows in length order.

        Only where verl pads: with remove_padding or dynamic batch sizes nothing is padded to a
        neighbour, and a shuffling actor dataloader would undo the order.
        """
        batch = super()._balance_batch(batch, metrics, logging_prefix, keep_minibatch)
        arr = self.config.actor_rollout_ref
        micro = arr.actor.get("ppo_micro_batch_size_per_gpu")
        padded = not arr.model.get("use_remove_padding", False) and not arr.actor.get("use_dynamic_bsz", False)
        if padded and micro and not arr.actor.get("shuffle", False):
            lengths = [int(tag["seq_len"]) for tag in batch.tags]
            dp = max(self.actor_rollout_wg._dispatch_info["actor"]) + 1  # filled by verl's call above
            mini_rows = arr.actor.ppo_mini_batch_size * arr.rollout.n // dp
            metrics["xrpo/batch/padding_share_unsorted"] = padding_share(lengths, micro)
            if mini_rows > micro and len(lengths) % mini_rows == 0:
                order = sorted_within_blocks(lengths, mini_rows)
                batch.reorder(order)
                lengths = [lengths[i] for i in order]
            metrics["xrpo/batch/padding_share"] = padding_share(lengths, micro)
            # the CPU runs' engine cuts each mini-batch by padding instead (`micro_batches.cut_by_padding`)
            blocks = [lengths[i : i + mini_rows] for i in range(0, len(lengths), max(mini_rows, 1))]
            cut = [[block[i] for i in c] for block in blocks for c in padded_cuts(block, micro)]
            metrics["xrpo/batch/padding_share_cut_by_padding"] = 1.0 - sum(lengths) / sum(len(c) * max(c) for c in cut)
        return batch

    # ------------------------------------------------------------------ 3. advantages and memories
    def _compute_advantage(self, batch, metrics: dict):
        s = self.xrpo_settings
        if s.adv_estimator == "grpo":
            batch = super()._compute_advantage(batch, metrics)  # verl's own GRPO, rollout correction included
        tic = time.perf_counter()
        fields = ["uid", "response_mask", "rm_scores", "old_log_probs", "responses", "raw_prompt", "extra_fields"]
        fields += [R.COL_KIND, R.COL_PROMPT_KEY] + (["entropy", "prompts"] if s.use_prefix else [])
        optional = ["rollout_log_probs"] if s.adv_estimator != "grpo" or s.use_icl else []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields + optional)
        missing = sorted(set(fields) - set(data.keys()))
        if missing:
            raise RuntimeError(
                f"TransferQueue rows lack fields {missing}; some rows were not submitted by this trainer"
            )
        view = BatchView.from_tq(data, batch.tags)
        if s.use_icl:
            rollout_lp = (
                data["rollout_log_probs"].to_padded_tensor(0.0).float() if "rollout_log_probs" in data.keys() else None
            )
            metrics.update(M.icl_reliance_metrics(view, rollout_lp, s.xrpo.icl.mode))
        if s.adv_estimator == "grpo":
            metrics.update(M.signal_metrics(None))  # sharpening and novelty are off: exactly zero
            metrics.update({"xrpo/novelty/mean_all": 0.0, "xrpo/novelty/correct_distinct": 0.0})
        else:
            batch = self._write_advantages(batch, view, data, metrics)
        self._update_memories(view, metrics)
        self._plugin_s += time.perf_counter() - tic
        return batch

    def _write_advantages(self, batch, view: BatchView, data: TensorDict, metrics: dict):
        s = self.xrpo_settings
        out: dict[str, torch.Tensor] = {}
        rc_cfg = self.config.algorithm.get("rollout_correction", None)
        if rc_cfg is not None and not rc_cfg.get("bypass_mode", False) and "rollout_log_probs" in data.keys():
            rollout_lp = data["rollout_log_probs"].to_padded_tensor(0.0).float()
            weights, mask, rc_metrics = rollout_correction(rc_cfg, view.old_log_probs, rollout_lp, view.mask)
            metrics.update(rc_metrics)
            if not torch.equal(mask, view.mask):  # rejection sampling dropped tokens: the loss must see it
                view.mask = mask
                out["response_mask"] = mask.to(data["response_mask"].dtype)
            if weights is not None:
                out["rollout_is_weights"] = weights.float()
        novelty, gate = torch.zeros(len(view.uids), dtype=torch.float32), None
        if s.use_novelty:
            novelty, novelty_metrics = novelty_scores(
                view, self.xrpo_state.novelty, self.xrpo_state.extra_embedder().encode, self._decode, s.extra.novelty
            )
            metrics.update(novelty_metrics)
            if s.extra.novelty.placement == "before_norm":
                gate = variance_gate(view, self.xrpo_state.reward_var)
        else:
            metrics.update({"xrpo/novelty/mean_all": 0.0, "xrpo/novelty/correct_distinct": 0.0})
        inputs = XrpoAdvantageInputs(seq_logp_mean=view.seq_logp_mean, correct=view.correct, novelty=novelty, gate=gate)
        adv, ret = get_adv_estimator_fn(s.adv_estimator)(
            token_level_rewards=view.rm_scores,
            response_mask=view.mask,
            index=np.array(view.uids, dtype=object),
            config=self.config.algorithm,
            xrpo_inputs=inputs,
        )
        out["advantages"], out["returns"] = adv, ret
        nested = {k: response_to_nested(v, data["response_mask"]) for k, v in out.items()}
        batch = tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(nested, batch_size=len(batch))
        )  # returns the meta that lists the new fields; later stages read that list
        valid_adv = adv.sum(-1)[view.valid] / view.mask.sum(-1).clamp(min=1)[view.valid]
        metrics["xrpo/adv/seq_mean"] = float(valid_adv.mean()) if len(valid_adv) else 0.0
        metrics.update(M.signal_metrics(view, inputs, self.config.algorithm, s))
        return batch

    def _update_memories(self, view: BatchView, metrics: dict) -> None:
        s = self.xrpo_settings
        metrics.update(M.group_signal_metrics(view))
        if self.xrpo_state.prompt_selector is not None:
            # the bare prompt's record: its own rollouts, not those shown examples (icl) or a prefix (guided)
            bare = [i for i, k in enumerate(view.kinds) if k in ("base", "round") and bool(view.valid[i])]
            recorded = self.xrpo_state.prompt_selector.record(
                [view.keys[i] for i in bare], view.correct[bare].tolist(), self.global_steps
            )
            metrics["xrpo/select/recorded"] = float(recorded)
        if s.use_icl:
            successes: dict[str, icl_lib.ICLExample] = {}
            for i in np.flatnonzero((view.correct & view.not_guided).numpy()):
                if view.keys[i] in successes:  # one success per prompt per step; the corpus keeps per_prompt
                    continue
                response = view.responses[i]
                text = self._decode(response.tolist())
                prompt = R.user_text(view.raw_prompts[i])
                successes[view.keys[i]] = icl_lib.ICLExample(
                    view.keys[i], prompt, text, self.global_steps, int(response.numel())
                )
            self.xrpo_state.corpus.add_many(list(successes.values()))  # new prompts encoded in one call
            metrics["xrpo/icl/corpus_added"] = float(len(successes))
            metrics["xrpo/icl/corpus_size"] = float(len(self.xrpo_state.corpus))
        metrics.update(M.prefix_mask_metrics(view))
        result = PrefixQueueResult()  # switched off or warming up: exactly zero
        if s.use_prefix and self.global_steps > s.extra.prefix.warmup_steps:
            if self._newlines is None:
                self._newlines = newline_token_ids(self.tokenizer)
            tok = self.tokenizer
            result = queue_prefixes(
                view,
                cfg=s.extra.prefix,
                state=self.xrpo_state,
                source_rows=self._step_rows,
                newline_ids=self._newlines,
                end_ids={t for t in (tok.eos_token_id, tok.pad_token_id) if t is not None},
                decode=self._decode,
                max_prefix_len=int(
                    s.extra.prefix.max_prefix_frac * self.config.actor_rollout_ref.rollout.response_length
                ),
            )
        metrics.update(result.metrics())
        metrics["xrpo/guided/queue_size"] = float(len(self.xrpo_state.guided_queue) if s.use_prefix else 0)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ------------------------------------------------------------------ 4. metrics and checkpoints
    def on_init_end(self):
        super().on_init_end()
        self.xrpo_state.build_prompt_selector(len(self.train_dataset), int(self.config.data.train_batch_size))

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        step_s = timing_raw.get("step", 0.0)
        metrics["xrpo/time_s/plugin"] = self._plugin_s
        metrics["xrpo/time_share/plugin"] = self._plugin_s / step_s if step_s > 0 else 0.0
        metrics.update(code_reward.step_metrics(T.reward_infos(batch), step_s))

    def _save_checkpoint(self):
        step_dir = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.xrpo_state.save(step_dir)  # before verl writes latest_checkpointed_iteration.txt
        super()._save_checkpoint()

    def _load_checkpoint(self):
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        t = self.config.trainer
        folder = (
            t.resume_from_path
            if t.resume_mode == "resume_path"
            else os.path.join(t.default_local_dir, f"global_step_{self.global_steps}")
        )
        self.xrpo_state.load(folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder))
