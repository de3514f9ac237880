"""Trainer mode `xrpo`: verl 0.9.1's V1 sync trainer with XRPO/ExTra rollout rounds and advantages.

Select with `trainer.v1.trainer_mode=xrpo` (see `xrpo_verl/hydra_config/xrpo_trainer.yaml`). One step:

1. phase 0: the dataloader batch, `n_base` rollouts per prompt; queued ExTra guided prompts
   replace its tail rows (own uid, own dataset row, agent loop `extra_prefix`, `n_suffix` rollouts);
2. R planner rounds (`xrpo_verl.planner.plan_round`): one batched submission per round, same uid,
   per-row `__rollout_n__` and session offset; all-fail prompts go through agent loop `xrpo_icl`
   with examples retrieved from the corpus of verified successes;
3. verl's pipeline (replay buffer → old log-probs with entropy → ...); `_compute_advantage` calls
   our registered estimator with the extra inputs, adds successes to the ICL corpus, responses to
   the novelty memory, and queues prefixes of hard prompts for later steps.

All orchestration is here; the maths is in the pure modules. See docs/multiround.md.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import DictConfig, open_dict
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from xrpo_verl import advantages as adv_lib
from xrpo_verl import planner
from xrpo_verl.config import ICLConfig
from xrpo_verl.rewards import code as code_reward
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters.agent_loops import (
    ICL_AGENT,
    PREFIX_AGENT,
    XrpoAgentLoopManager,
)
from xrpo_verl.verl_adapters.batch_view import BatchView, prefix_mask_metrics
from xrpo_verl.verl_adapters.config import (
    AGENT_LOOP_MANAGER,
    TRAINER_MODE,
    validate_trainer_config,
)
from xrpo_verl.verl_adapters.estimators import XrpoAdvantageInputs, sequence_advantages
from xrpo_verl.verl_adapters.prefixes import PrefixQueueResult, queue_prefixes
from xrpo_verl.verl_adapters.state import PluginState

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.2
ROUND_TIMEOUT_S = float(os.environ.get("XRPO_ROUND_TIMEOUT_S", "3600"))


def select_agent_loop_manager(config: DictConfig) -> None:
    """Use `XrpoAgentLoopManager` (session offsets); refuse a manager that would overwrite round 1."""
    agent_cfg = config.actor_rollout_ref.rollout.agent
    current = agent_cfg.get("agent_loop_manager_class", None)
    if not current:
        with open_dict(config):
            agent_cfg.agent_loop_manager_class = AGENT_LOOP_MANAGER
        return
    from verl.utils.import_utils import load_class_from_fqn

    cls = load_class_from_fqn(current, "AgentLoopManager")
    if not (isinstance(cls, type) and issubclass(cls, XrpoAgentLoopManager)):
        raise ValueError(
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class={current!r} is not a subclass of "
            f"{AGENT_LOOP_MANAGER}; trainer mode {TRAINER_MODE!r} needs its session offsets (leave it empty)."
        )


def newline_token_ids(tokenizer) -> set[int]:
    """Ids whose text is a newline run: step boundaries of ExTra's `paragraph` split (§3.2)."""
    ids = set()
    for text in ("\n", "\n\n"):
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1:
            ids.add(int(enc[0]))
    for i in range(min(1000, len(tokenizer))):
        if tokenizer.decode([i]) in ("\n", "\n\n"):
            ids.add(i)
    return ids


def icl_token_budget(tokenizer, messages: list[dict], user_text: str, count_tokens, prompt_length: int) -> int:
    """Tokens the rendered ICL user turn may take: the rollout's prompt cap (verl left-truncates past it,
    agent_loop.py `_cap_text_prompt_length`, which would cut the examples' header) minus what the
    chat template adds around the user text."""
    templated = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    overhead = len(tokenizer.encode(templated, add_special_tokens=False)) - count_tokens(user_text)
    return max(1, prompt_length - max(0, overhead))


@dataclass(frozen=True)
class ICLDecision:
    """The ICL prompt for one all-fail prompt, or why it stays zero-shot."""

    text: str  # the rendered ICL user turn; "" when zero-shot
    reason: str  # "ok", "no_examples" (nothing retrieved within the similarity band) or "no_fit"
    similarity: float  # mean retrieval similarity of the examples shown; nan when none
    examples: int  # examples shown, each a whole verified solution
    skipped_long: int  # retrieved examples left out as longer than max_example_tokens


def build_icl_prompt(
    corpus, cfg: ICLConfig, *, prompt_key: str, text: str, count_tokens, max_prompt_tokens: int
) -> ICLDecision:
    """Retrieve K solved neighbours of an all-fail prompt and render them whole (XRPO §2.3)."""
    from xrpo_verl.icl import render_icl_prompt

    examples = corpus.retrieve(
        prompt_key, text, k=cfg.k, min_similarity=cfg.min_similarity, max_similarity=cfg.max_similarity
    )
    if not examples:
        return ICLDecision("", "no_examples", math.nan, 0, 0)
    r = render_icl_prompt(
        examples,
        text,
        count_tokens=count_tokens,
        max_example_tokens=cfg.max_example_tokens,
        max_prompt_tokens=max_prompt_tokens,
    )
    if not r.examples:  # zero-shot fallback: no example fits whole
        return ICLDecision("", "no_fit", math.nan, 0, r.skipped_long)
    sims = [e.similarity for e in r.examples]
    return ICLDecision(r.text, "ok", float(np.mean(sims)), len(r.examples), r.skipped_long)


@register_trainer(TRAINER_MODE)
class XrpoTrainer(PPOTrainerSync):
    """`PPOTrainerSync` plus multi-round rollouts, ICL seeding, prefix regeneration and our estimators."""

    def __init__(self, config: DictConfig):
        # Validate before any worker, dataset or server is built: bad config fails in seconds.
        self.xrpo_settings = validate_trainer_config(config)
        select_agent_loop_manager(config)
        super().__init__(config)
        self.xrpo_state = PluginState(self.xrpo_settings)
        self._xrpo_plugin_s = 0.0
        self._xrpo_newlines: set[int] | None = None  # built on first use (scans the vocabulary)
        self._xrpo_step_rows: dict[str, dict] = {}  # uid -> dataset row submitted this step

    def _build_replay_buffer(self):
        # Sync semantics everywhere the base class compares trainer_mode to "sync" (dataloader, TQ
        # checkpointing, prompt persistence); the stock sync buffer then takes every group of the step.
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    # ------------------------------------------------------------------ rounds
    def prepare_step(self) -> dict:
        s = self.xrpo_settings
        metrics: dict[str, float] = {}
        self._xrpo_plugin_s = 0.0
        with marked_timer("gen", self.timing_raw):
            tic = time.perf_counter()
            rows, scalars = R.to_rows(self._next_train_batch())
            default_agent = self.config.actor_rollout_ref.rollout.agent.default_agent_loop
            n0 = s.xrpo.planner.n_base if s.use_planner else s.rollout_n
            guided = self._xrpo_pop_guided(len(rows))
            keep = len(rows) - len(guided)
            base = [R.with_plugin_columns(r, kind="base", rollout_n=n0, agent_name=default_agent) for r in rows[:keep]]
            submit = list(base)
            self._xrpo_step_rows = {r["uid"]: r for r in base}  # source rows of this step's guided prompts
            for (gp, stored), template in zip(guided, rows[keep:], strict=True):
                g = R.guided_row(template, stored, uid=gp.uid)
                submit.append(
                    R.with_plugin_columns(
                        g,
                        kind="guided",
                        rollout_n=s.extra.prefix.n_suffix,
                        agent_name=PREFIX_AGENT,
                        prefix_ids=gp.prefix_ids,
                        key=gp.original_prompt_id,
                    )
                )
            self._xrpo_plugin_s += time.perf_counter() - tic
            with marked_timer("xrpo_round_0", self.timing_raw):
                self._xrpo_submit_and_wait(submit, scalars)
            metrics["xrpo/guided/injected"] = len(guided)
            self.xrpo_state.counters["guided_injected"] += len(guided)
            if not s.use_icl:
                metrics.update(icl_metrics([], 0, 0, 0))  # switched off: exactly zero
            if s.use_planner and s.xrpo.planner.rounds > 0 and base:
                metrics.update(self._xrpo_planner_rounds(base, scalars, default_agent))
        metrics["xrpo/prompts/base"] = len(base)
        return metrics

    def _xrpo_planner_rounds(self, base: list[dict], scalars: dict, default_agent: str) -> dict:
        s, p = self.xrpo_settings, self.xrpo_settings.xrpo.planner
        uids = [r["uid"] for r in base]
        counts = {u: p.n_base for u in uids}
        icl_uids: set[str] = set()
        icl_sessions: dict[str, list[range]] = defaultdict(list)
        decisions: list[ICLDecision] = []
        out: dict[str, float] = {}
        budgets = planner.round_budgets(len(base), p.n_avg, p.n_base, p.rounds)
        for r, budget in enumerate(budgets[1:], start=1):
            tic = time.perf_counter()
            rewards = self._xrpo_session_rewards(set(uids))
            lists = [list(rewards.get(u, {}).values()) or [0.0] for u in uids]
            plan = planner.plan_round(lists, budget, p)
            submit = []
            for row, u, k, all_fail in zip(base, uids, plan.extra, plan.all_fail, strict=True):
                if k == 0:
                    continue
                icl = self._xrpo_icl_prompt(row) if s.use_icl and all_fail else None
                if icl is not None:
                    decisions.append(icl)
                icl_text = icl.text if icl is not None else ""
                if icl_text:
                    icl_uids.add(u)
                    icl_sessions[u].append(range(counts[u], counts[u] + k))
                submit.append(
                    R.with_plugin_columns(
                        row,
                        kind="icl" if icl_text else "round",
                        rollout_n=k,
                        agent_name=ICL_AGENT if icl_text else default_agent,
                        offset=counts[u],
                        icl_prompt=icl_text,
                        key=row[R.COL_PROMPT_KEY],
                    )
                )
                counts[u] += k
            self._xrpo_plugin_s += time.perf_counter() - tic
            out.update(self._planner_metrics(r, plan))
            if submit:
                with marked_timer(f"xrpo_round_{r}", self.timing_raw):
                    self._xrpo_submit_and_wait(submit, scalars)
        if s.use_icl:
            final = self._xrpo_session_rewards(icl_uids) if icl_uids else {}
            flips = sum(any(final.get(u, {}).get(i, 0.0) > 0 for rg in icl_sessions[u] for i in rg) for u in icl_uids)
            self.xrpo_state.counters["icl_triggers"] += len(icl_uids)
            self.xrpo_state.counters["icl_flips"] += flips
            out.update(icl_metrics(decisions, len(icl_uids), flips, len(self.xrpo_state.corpus)))
        sizes = np.array(list(counts.values()))
        out["xrpo/alloc/n_q/mean"] = float(sizes.mean())
        out["xrpo/alloc/n_q/min"] = float(sizes.min())
        out["xrpo/alloc/n_q/max"] = float(sizes.max())
        return out

    @staticmethod
    def _planner_metrics(r: int, plan: planner.RoundPlan) -> dict[str, float]:
        ks_arr, diag = np.asarray(plan.extra), plan.diagnostics
        out = {f"xrpo/round_{r}/rollouts": float(ks_arr.sum()), f"xrpo/round_{r}/prompts": float((ks_arr > 0).sum())}
        # Allocation histogram as scalar bins (the tracker drops lists): how many prompts got k extra rollouts.
        for lo, hi in ((0, 0), (1, 2), (3, 4), (5, 8), (9, 16), (17, 10**9)):
            label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f"{lo}+")
            out[f"xrpo/round_{r}/alloc_hist/{label}"] = float(((ks_arr >= lo) & (ks_arr <= hi)).sum())
        delta = np.asarray(diag.delta, dtype=float)
        phi = np.asarray(diag.phi, dtype=float)
        out[f"xrpo/round_{r}/delta/mean"] = float(delta.mean())
        out[f"xrpo/round_{r}/phi/mean"] = float(phi.mean())
        out[f"xrpo/round_{r}/step_rollouts"] = float(plan.step_rollouts)  # T of phi_q
        # φ/Δ ratio: > 1 means the exploration bonus, not the uncertainty reduction, drives allocation.
        if delta.mean() > 0:  # all groups at zero variance: Π = φ, the ratio is undefined
            out[f"xrpo/round_{r}/phi_over_delta"] = float(phi.mean() / delta.mean())
        return out

    def _xrpo_icl_prompt(self, row: dict) -> ICLDecision:
        icl = self.xrpo_settings.xrpo.icl
        tok = self.tokenizer
        text = R.user_text(row["raw_prompt"])

        def count(t: str) -> int:
            return len(tok.encode(t, add_special_tokens=False))

        cap = icl.max_prompt_tokens or icl_token_budget(
            tok, row["raw_prompt"], text, count, int(self.config.actor_rollout_ref.rollout.prompt_length)
        )
        return build_icl_prompt(
            self.xrpo_state.corpus,
            icl,
            prompt_key=row[R.COL_PROMPT_KEY],
            text=text,
            count_tokens=count,
            max_prompt_tokens=cap,
        )

    def _xrpo_pop_guided(self, batch_size: int) -> list[tuple[Any, dict]]:
        s = self.xrpo_settings
        if not s.use_prefix or self.global_steps <= s.extra.prefix.warmup_steps:
            return []
        q = self.xrpo_state.guided_queue
        # Keep at least one dataloader prompt per step, so the planner always has a base group.
        take = min(s.extra.prefix.per_step, len(q), batch_size - 1)
        items = q.pop_many(take) if take > 0 else []
        out = []
        for gp in items:
            stored = self.xrpo_state.guided_rows.pop(gp.uid, None)
            if stored is None:
                raise RuntimeError(f"guided prompt {gp.uid} has no stored dataset row; plugin state is inconsistent")
            if stored["reward_model"]["ground_truth"] != gp.ground_truth or stored["data_source"] != gp.data_source:
                raise RuntimeError(
                    f"guided prompt {gp.uid}: stored row and queue entry disagree on ground truth/source"
                )
            out.append((gp, stored))
        return out

    # ------------------------------------------------------------------ TransferQueue plumbing
    def _xrpo_submit_and_wait(self, rows: list[dict], scalars: dict) -> None:
        """One batched submission (never one per prompt), then block until every group is terminal."""
        td = R.from_rows(rows, scalars)
        self._submit_batch_to_rollout(td)
        self._xrpo_wait({r["uid"] for r in rows})

    def _xrpo_wait(self, uids: set[str]) -> None:
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while True:
            items = (tq.kv_list("train") or {}).get("train", {})
            waiting = [u for u in uids if items.get(u, {}).get("status") not in ("finished", "failure")]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(waiting)} prompt groups (e.g. {waiting[:3]}) did not finish within {ROUND_TIMEOUT_S:.0f}s "
                    "(XRPO_ROUND_TIMEOUT_S); an agent loop is stuck"
                )
            time.sleep(POLL_INTERVAL_S)

    def _xrpo_session_rewards(self, uids: set[str]) -> dict[str, dict[int, float]]:
        """uid -> {session id: summed reward} for the trajectories in TransferQueue."""
        items = (tq.kv_list("train") or {}).get("train", {})
        keys = [k for k, tag in items.items() if not tag.get("is_prompt", False) and k.split("_")[0] in uids]
        out: dict[str, dict[int, float]] = defaultdict(dict)
        if not keys:
            return out
        data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["rm_scores"])
        for key, value in zip(keys, list(data["rm_scores"]), strict=True):
            uid, session, _ = key.split("_")
            out[uid][int(session)] = float(value.sum().item())
        return out

    # ------------------------------------------------------------------ advantages and memories
    def _compute_advantage(self, batch, metrics: dict):
        s = self.xrpo_settings
        if s.adv_estimator == "grpo":
            batch = super()._compute_advantage(batch, metrics)  # verl's own GRPO, rollout correction included
        tic = time.perf_counter()
        fields = [
            "uid",
            "response_mask",
            "rm_scores",
            "old_log_probs",
            "responses",
            "raw_prompt",
            R.COL_KIND,
            R.COL_PROMPT_KEY,
        ]
        if s.use_prefix:
            fields += ["entropy", "prompts"]
        optional = ["rollout_log_probs"] if s.adv_estimator != "grpo" else []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields + optional)
        missing = sorted(set(fields) - set(data.keys()))
        if missing:
            raise RuntimeError(
                f"TransferQueue rows lack fields {missing}; some rows were not submitted by the xrpo trainer"
            )
        view = BatchView.from_tq(data, batch.tags)
        if s.adv_estimator != "grpo":
            # kv_batch_put returns the meta that lists the new fields; later stages read that list.
            batch = self._xrpo_write_advantages(batch, view, data, metrics)
        else:
            metrics.update(signal_metrics(None, None))  # sharpening and novelty are off: exactly zero
        self._xrpo_update_memories(view, metrics)
        self._xrpo_plugin_s += time.perf_counter() - tic
        return batch

    def _xrpo_write_advantages(self, batch, view: BatchView, data: TensorDict, metrics: dict):
        s = self.xrpo_settings
        nested_mask = data["response_mask"]
        out: dict[str, torch.Tensor] = {}
        # verl's rollout correction (IS weights, rejection sampling), exactly as its own _compute_advantage
        # runs it before the estimator: our estimators replace that method, so they must run it too.
        rc_cfg = self.config.algorithm.get("rollout_correction", None)
        if rc_cfg is not None and not rc_cfg.get("bypass_mode", False) and "rollout_log_probs" in data.keys():
            rollout_lp = data["rollout_log_probs"].to_padded_tensor(0.0).float()
            weights, mask, rc_metrics = apply_rollout_correction(rc_cfg, view.old_log_probs, rollout_lp, view.mask)
            metrics.update(rc_metrics)
            if not torch.equal(mask, view.mask):  # rejection sampling dropped tokens: the loss must see it
                view.mask = mask
                out["response_mask"] = mask.to(nested_mask.dtype)
            if weights is not None:
                out["rollout_is_weights"] = weights.float()
        novelty = torch.zeros(len(view.uids), dtype=torch.float32)
        gate = None
        if s.use_novelty:
            novelty = self._xrpo_novelty(view, metrics)
            metrics["xrpo/novelty/memory_prompts"] = float(len(self.xrpo_state.novelty))
            if s.extra.novelty.placement == "before_norm":
                gate = self._xrpo_variance_gate(view)
        inputs = XrpoAdvantageInputs(seq_logp_mean=view.seq_logp_mean, correct=view.correct, novelty=novelty, gate=gate)
        fn = get_adv_estimator_fn(s.adv_estimator)
        adv, ret = fn(
            token_level_rewards=view.rm_scores,
            response_mask=view.mask,
            index=np.array(view.uids, dtype=object),
            config=self.config.algorithm,
            xrpo_inputs=inputs,
        )
        out["advantages"], out["returns"] = adv, ret
        nested = TensorDict({k: response_to_nested(v, nested_mask) for k, v in out.items()}, batch_size=len(batch))
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=nested)
        valid_adv = adv.sum(-1)[view.valid] / view.mask.sum(-1).clamp(min=1)[view.valid]
        metrics["xrpo/adv/seq_mean"] = float(valid_adv.mean()) if len(valid_adv) else 0.0
        metrics.update(signal_metrics(view, inputs, self.config.algorithm, s, novelty))
        return batch

    def _xrpo_variance_gate(self, view: BatchView) -> torch.Tensor:
        """g(x) per row after folding this step's group reward variance into the per-prompt EMA."""
        ema = self.xrpo_state.reward_var
        by_key: dict[str, list[float]] = defaultdict(list)
        for i in np.flatnonzero(view.valid.numpy()):
            by_key[view.keys[i]].append(float(view.scores[i]))
        gates = {k: ema.update(k, v) for k, v in by_key.items()}
        return torch.tensor([gates.get(k, 1.0) for k in view.keys], dtype=torch.float32)

    def _xrpo_novelty(self, view: BatchView, metrics: dict) -> torch.Tensor:
        """ExTra r_int per row from the response tails; every valid response then enters the memory."""
        nov_cfg = self.xrpo_settings.extra.novelty
        idx = np.flatnonzero(view.valid.numpy())
        novelty = torch.zeros(len(view.uids), dtype=torch.float32)
        if idx.size == 0:
            return novelty
        tails = [
            self.tokenizer.decode(view.responses[i][-nov_cfg.tail_tokens :].tolist(), skip_special_tokens=True)
            for i in idx
        ]
        emb = self.xrpo_state.extra_embedder().encode(tails)
        keys = [view.keys[i] for i in idx]
        # scored ungated once, then gated by correctness: the ungated mean shows the scoring itself acting
        raw = self.xrpo_state.novelty.score(keys, emb, np.ones(idx.size, dtype=bool))
        correct = view.correct[idx].numpy()
        novelty[idx] = torch.as_tensor(np.asarray(raw * correct, dtype=np.float32))
        self.xrpo_state.novelty.update(keys, emb)
        metrics["xrpo/novelty/mean_all"] = float(np.mean(raw))
        # correct responses whose text differs from every other response of their prompt this step:
        # only these can be novel (identical correct answers have cosine 1)
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for k, t in zip(keys, tails, strict=True):
            seen[(k, t)] += 1
        metrics["xrpo/novelty/correct_distinct"] = float(
            sum(c and seen[(k, t)] == 1 for k, t, c in zip(keys, tails, correct, strict=True))
        )
        return novelty

    def _xrpo_update_memories(self, view: BatchView, metrics: dict) -> None:
        s = self.xrpo_settings
        if s.use_icl:
            added = 0
            seen: set[str] = set()
            for i in np.flatnonzero((view.correct & view.not_guided).numpy()):
                key = view.keys[i]
                if key in seen:  # one success per prompt per step; the corpus keeps per_prompt of them
                    continue
                seen.add(key)
                resp = view.responses[i]
                self.xrpo_state.corpus.add(
                    key,
                    R.user_text(view.raw_prompts[i]),
                    self.tokenizer.decode(resp.tolist(), skip_special_tokens=True),
                    step=self.global_steps,
                    num_tokens=int(resp.numel()),
                )
                added += 1
            metrics["xrpo/icl/corpus_added"] = added
            metrics["xrpo/icl/corpus_size"] = len(self.xrpo_state.corpus)
        guided = ~view.not_guided & view.valid
        metrics["xrpo/guided/rollouts"] = float(guided.sum())
        metrics.update(prefix_mask_metrics(view))
        metrics["xrpo/guided/success_rate"] = float(view.correct[guided].float().mean()) if guided.any() else 0.0
        result = PrefixQueueResult()  # switched off or warming up: exactly zero
        if s.use_prefix and self.global_steps > s.extra.prefix.warmup_steps:
            if self._xrpo_newlines is None:
                self._xrpo_newlines = newline_token_ids(self.tokenizer)
            result = queue_prefixes(
                view,
                cfg=s.extra.prefix,
                state=self.xrpo_state,
                source_rows=self._xrpo_step_rows,
                newline_ids=self._xrpo_newlines,
                end_ids={t for t in (self.tokenizer.eos_token_id, self.tokenizer.pad_token_id) if t is not None},
                decode=lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True),
                max_prefix_len=int(
                    s.extra.prefix.max_prefix_frac * int(self.config.actor_rollout_ref.rollout.response_length)
                ),
            )
        metrics.update(result.metrics())
        metrics["xrpo/guided/queue_size"] = float(len(self.xrpo_state.guided_queue) if s.use_prefix else 0)

    # ------------------------------------------------------------------ metrics and checkpoints
    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics["xrpo/time_s/plugin"] = self._xrpo_plugin_s
        step_s = timing_raw.get("step", 0.0)
        metrics["xrpo/time_share/plugin"] = self._xrpo_plugin_s / step_s if step_s > 0 else 0.0
        metrics.update(code_reward.step_metrics(self._reward_infos(batch), step_s))

    @staticmethod
    def _reward_infos(batch) -> list[dict]:
        """The step's rows' reward_extra_info (verl keeps it in TransferQueue, in `extra_fields`)."""
        rows = [i for i, tag in enumerate(batch.tags) if not tag.get("is_padding", False)]
        if not rows:
            return []
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extra = [getattr(value, "data", value) for value in data["extra_fields"]]  # as verl's replay_buffer reads it
        return [dict(extra[i].get("reward_extra_info", None) or {}) for i in rows if isinstance(extra[i], dict)]

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
        if not os.path.isabs(folder):
            folder = os.path.join(os.getcwd(), folder)
        self.xrpo_state.load(folder)


def apply_rollout_correction(rc_cfg, old_log_probs, rollout_log_probs, mask):
    """verl's IS weights and rejection mask for (B, T) tensors: (weights or None, new mask, metrics)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    weights, new_mask, rc_metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old_log_probs,
        rollout_log_prob=rollout_log_probs,
        response_mask=mask,
        rollout_is=rc_cfg.get("rollout_is", None),
        rollout_is_threshold=rc_cfg.get("rollout_is_threshold", 2.0),
        rollout_is_batch_normalize=rc_cfg.get("rollout_is_batch_normalize", False),
        rollout_rs=rc_cfg.get("rollout_rs", None),
        rollout_rs_threshold=rc_cfg.get("rollout_rs_threshold", None),
    )
    w = weights.batch["rollout_is_weights"] if weights is not None else None
    return w, new_mask.to(mask.dtype), rc_metrics


def signal_metrics(view, inputs, algorithm=None, settings=None, novelty=None) -> dict[str, float]:
    """What sharpening and the novelty bonus did to correct responses this step; all 0 when off.

    Each feature's effect is its advantages against the same estimator without it (the function the
    estimator itself calls), so a feature that went inert logs 0.
    """
    names = ("rows", "abs_mean", "share", "rank_changed")
    out = {f"xrpo/{f}/bonus_{n}": 0.0 for f in ("sharpening", "novelty") for n in names}
    out["xrpo/novelty/positive_correct"] = 0.0
    out["xrpo/novelty/mean_correct"] = 0.0
    # what sharpening can act on: correct responses of mixed groups clearly less likely than their
    # group (each must get a bonus), and whether the likelihoods it reads vary at all
    out["xrpo/sharpening/eligible_rows"] = 0.0
    out["xrpo/sharpening/seq_logp_spread"] = 0.0
    if view is None:
        return {**out, "xrpo/novelty/mean_all": 0.0, "xrpo/novelty/correct_distinct": 0.0}
    from xrpo_verl.verl_adapters.config import ESTIMATOR_FEATURES

    features = ESTIMATOR_FEATURES[settings.adv_estimator]
    if "novelty" not in features:
        out.update({"xrpo/novelty/mean_all": 0.0, "xrpo/novelty/correct_distinct": 0.0})
    index = np.array(view.uids, dtype=object)
    valid = view.valid

    def seq_adv(feats):
        return sequence_advantages(
            view.scores[valid],
            list(index[valid.numpy()]),
            _subset_inputs(inputs, valid),
            features=frozenset(feats),
            algorithm_config=algorithm,
            norm_adv_by_std=settings.norm_adv_by_std,
        )

    correct, idx = view.correct[valid], list(index[valid.numpy()])
    full = seq_adv(features)
    if "sharpening" in features:
        with_sharp, plain = seq_adv({"sharpening"}), seq_adv(())
        eff = adv_lib.bonus_effect(with_sharp, plain, correct, idx)
        out.update({f"xrpo/sharpening/bonus_{n}": eff[n] for n in names})
        log_eta = torch.log(adv_lib.novelty_ratio(inputs.seq_logp_mean[valid], idx).double())
        out["xrpo/sharpening/eligible_rows"] = float((correct & (plain > 0) & (log_eta < -1e-4)).sum())
        out["xrpo/sharpening/seq_logp_spread"] = float(log_eta.abs().mean()) if len(log_eta) else 0.0
    if "novelty" in features:
        eff = adv_lib.bonus_effect(full, seq_adv(features - {"novelty"}), correct, idx)
        out.update({f"xrpo/novelty/bonus_{n}": eff[n] for n in names})
        nov = novelty[valid]
        out["xrpo/novelty/positive_correct"] = float((correct & (nov > 0)).sum())
        out["xrpo/novelty/mean_correct"] = float(nov[correct].mean()) if correct.any() else 0.0
    return out


def _subset_inputs(inputs: XrpoAdvantageInputs, rows: torch.Tensor) -> XrpoAdvantageInputs:
    return XrpoAdvantageInputs(
        seq_logp_mean=inputs.seq_logp_mean[rows],
        correct=inputs.correct[rows],
        novelty=inputs.novelty[rows],
        gate=None if inputs.gate is None else inputs.gate[rows],
    )


def icl_metrics(decisions: list[ICLDecision], triggers: int, flips: int, corpus_size: int) -> dict[str, float]:
    """ICL seeding this step: triggers, flips and what the prompts held; all 0 when ICL is off."""
    sims = [d.similarity for d in decisions if d.reason == "ok"]
    return {
        "xrpo/icl/triggers": float(triggers),
        "xrpo/icl/flips": float(flips),
        "xrpo/icl/flip_rate": flips / triggers if triggers else 0.0,
        "xrpo/icl/corpus_size": float(corpus_size),
        # an all-fail prompt falls back to zero-shot when retrieval is empty or no example fits whole
        "xrpo/icl/fallback_no_examples": float(sum(d.reason == "no_examples" for d in decisions)),
        "xrpo/icl/fallback_no_fit": float(sum(d.reason == "no_fit" for d in decisions)),
        # every example shown is a whole verified solution, so it ends with its own final answer
        "xrpo/icl/examples_whole": float(sum(d.examples for d in decisions)),
        "xrpo/icl/examples_skipped_long": float(sum(d.skipped_long for d in decisions)),
        "xrpo/icl/retrieval_similarity/mean": float(np.mean(sims)) if sims else 0.0,
    }
