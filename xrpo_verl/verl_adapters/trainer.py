"""Trainer mode `xrpo`: verl 0.9.1's V1 sync trainer with XRPO/ExTra rollout rounds and advantages.

Select with `trainer.v1.trainer_mode=xrpo` (see `xrpo_verl/hydra_config/xrpo_trainer.yaml`). One step:

1. phase 0: the dataloader batch, `n_base` rollouts per prompt; queued ExTra guided prompts
   replace its tail rows (own uid, own dataset row, agent loop `extra_prefix`, `n_suffix` rollouts);
2. R planner rounds (`xrpo_verl.planner.allocate`): one batched submission per round, same uid,
   per-row `__rollout_n__` and session offset; all-fail prompts go through agent loop `xrpo_icl`
   with examples retrieved from the corpus of verified successes;
3. verl's pipeline (replay buffer → old log-probs with entropy → ...); `_compute_advantage` calls
   our registered estimator with the extra inputs, adds successes to the ICL corpus, responses to
   the novelty memory, and queues prefixes of hard prompts for later steps.

All orchestration is here; the maths is in the pure modules. See docs/verl_v1_multiround.md.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
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
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters.agent_loops import (
    ICL_AGENT,
    PREFIX_AGENT,
    XrpoAgentLoopManager,
)
from xrpo_verl.verl_adapters.config import (
    AGENT_LOOP_MANAGER,
    TRAINER_MODE,
    validate_trainer_config,
)
from xrpo_verl.verl_adapters.estimators import XrpoAdvantageInputs
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
        self._xrpo_newlines: set[int] | None = None
        self._xrpo_step_rows: dict[str, dict] = {}

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
        sims: list[float] = []
        # why an all-fail prompt given rollouts did (not) get an ICL prompt: "ok", "no_examples", "no_fit"
        icl_misses: dict[str, int] = defaultdict(int)
        out: dict[str, float] = {}
        budgets = planner.round_budgets(len(base), p.n_avg, p.n_base, p.rounds)
        for r, budget in enumerate(budgets[1:], start=1):
            tic = time.perf_counter()
            rewards = self._xrpo_session_rewards(set(uids))
            lists = [list(rewards.get(u, {}).values()) or [0.0] for u in uids]
            step_t = self.global_steps if p.step_source == "global_step" else sum(counts.values())
            kw = dict(
                step=step_t, alpha=p.alpha, lam=p.lam, bonus=p.bonus_form, k=p.shrink_steps, smoothed_std=p.smoothed_std
            )
            diag = planner.priority_diagnostics(lists, **kw)
            ks = planner.allocate(lists, budget, n_max=p.n_max, **kw)
            submit = []
            for row, u, k, lst in zip(base, uids, ks, lists, strict=True):
                if k == 0:
                    continue
                icl_text = ""
                if s.use_icl and max(lst) <= 0:
                    icl_text, sim = self._xrpo_icl_prompt(row)
                    icl_misses[sim if not icl_text else "ok"] += 1
                    if icl_text:
                        icl_uids.add(u)
                        icl_sessions[u].append(range(counts[u], counts[u] + k))
                        sims.append(sim)
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
            out.update(self._planner_metrics(r, ks, diag))
            if submit:
                with marked_timer(f"xrpo_round_{r}", self.timing_raw):
                    self._xrpo_submit_and_wait(submit, scalars)
        if s.use_icl:
            final = self._xrpo_session_rewards(icl_uids) if icl_uids else {}
            flips = sum(any(final.get(u, {}).get(i, 0.0) > 0 for rg in icl_sessions[u] for i in rg) for u in icl_uids)
            self.xrpo_state.counters["icl_triggers"] += len(icl_uids)
            self.xrpo_state.counters["icl_flips"] += flips
            out["xrpo/icl/triggers"] = len(icl_uids)
            out["xrpo/icl/flip_rate"] = flips / len(icl_uids) if icl_uids else 0.0
            out["xrpo/icl/corpus_size"] = len(self.xrpo_state.corpus)
            # an all-fail prompt falls back to zero-shot when retrieval is empty or the examples do not fit
            out["xrpo/icl/fallback_no_examples"] = icl_misses["no_examples"]
            out["xrpo/icl/fallback_no_fit"] = icl_misses["no_fit"]
            if sims:
                out["xrpo/icl/retrieval_similarity/mean"] = float(np.mean(sims))
        sizes = np.array(list(counts.values()))
        out["xrpo/alloc/n_q/mean"] = float(sizes.mean())
        out["xrpo/alloc/n_q/min"] = float(sizes.min())
        out["xrpo/alloc/n_q/max"] = float(sizes.max())
        return out

    @staticmethod
    def _planner_metrics(r: int, ks: list[int], diag) -> dict[str, float]:
        ks_arr = np.asarray(ks)
        out = {f"xrpo/round_{r}/rollouts": float(ks_arr.sum()), f"xrpo/round_{r}/prompts": float((ks_arr > 0).sum())}
        # Allocation histogram as scalar bins (the tracker drops lists): how many prompts got k extra rollouts.
        for lo, hi in ((0, 0), (1, 2), (3, 4), (5, 8), (9, 16), (17, 10**9)):
            label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi < 10**9 else f"{lo}+")
            out[f"xrpo/round_{r}/alloc_hist/{label}"] = float(((ks_arr >= lo) & (ks_arr <= hi)).sum())
        delta = np.asarray(diag.delta, dtype=float)
        phi = np.asarray(diag.phi, dtype=float)
        out[f"xrpo/round_{r}/delta/mean"] = float(delta.mean())
        out[f"xrpo/round_{r}/phi/mean"] = float(phi.mean())
        # φ/Δ ratio: > 1 means the exploration bonus, not the uncertainty reduction, drives allocation.
        if delta.mean() > 0:  # all groups at zero variance: Π = φ, the ratio is undefined
            out[f"xrpo/round_{r}/phi_over_delta"] = float(phi.mean() / delta.mean())
        return out

    def _xrpo_icl_prompt(self, row: dict) -> tuple[str, float | str]:
        """(rendered ICL user turn, mean retrieval similarity) for an all-fail prompt, or
        ("", reason) with reason "no_examples" (empty retrieval) or "no_fit" (examples exceed the budget)."""
        from xrpo_verl.icl import render_icl_prompt

        icl = self.xrpo_settings.xrpo.icl
        text = R.user_text(row["raw_prompt"])
        examples = self.xrpo_state.corpus.retrieve(
            row[R.COL_PROMPT_KEY], text, k=icl.k, min_similarity=icl.min_similarity
        )
        if not examples:
            return "", "no_examples"
        tok = self.tokenizer

        def count(t: str) -> int:
            return len(tok.encode(t, add_special_tokens=False))

        rendered = render_icl_prompt(
            examples,
            text,
            count_tokens=count,
            truncate=lambda t, n: tok.decode(tok.encode(t, add_special_tokens=False)[:n]),
            max_example_tokens=icl.max_example_tokens,
            max_prompt_tokens=icl.max_prompt_tokens
            or icl_token_budget(
                tok, row["raw_prompt"], text, count, int(self.config.actor_rollout_ref.rollout.prompt_length)
            ),
        )
        if rendered == text:  # zero-shot fallback: the examples did not fit
            return "", "no_fit"
        sims = [float(getattr(e, "similarity", math.nan)) for e in examples]
        return rendered, float(np.nanmean(sims)) if not all(map(math.isnan, sims)) else math.nan

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
            batch = super()._compute_advantage(batch, metrics)  # verl's own GRPO, untouched
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
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        missing = sorted(set(fields) - set(data.keys()))
        if missing:
            raise RuntimeError(
                f"TransferQueue rows lack fields {missing}; some rows were not submitted by the xrpo trainer"
            )
        view = BatchView.from_tq(data, batch.tags)
        if s.adv_estimator != "grpo":
            # kv_batch_put returns the meta that lists the new fields; later stages read that list.
            batch = self._xrpo_write_advantages(batch, view, data["response_mask"], metrics)
        self._xrpo_update_memories(view, metrics)
        self._xrpo_plugin_s += time.perf_counter() - tic
        return batch

    def _xrpo_write_advantages(self, batch, view: BatchView, nested_mask, metrics: dict):
        s = self.xrpo_settings
        novelty = torch.zeros(len(view.uids), dtype=torch.float32)
        gate = None
        if s.use_novelty:
            novelty = self._xrpo_novelty(view)
            on = view.correct & (novelty > 0)
            metrics["xrpo/novelty/bonus_rows"] = float(on.sum())
            metrics["xrpo/novelty/mean_correct"] = float(novelty[view.correct].mean()) if view.correct.any() else 0.0
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
        out = TensorDict(
            {"advantages": response_to_nested(adv, nested_mask), "returns": response_to_nested(ret, nested_mask)},
            batch_size=len(batch),
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)
        valid_adv = adv.sum(-1)[view.valid] / view.mask.sum(-1).clamp(min=1)[view.valid]
        metrics["xrpo/adv/seq_mean"] = float(valid_adv.mean()) if len(valid_adv) else 0.0
        return batch

    def _xrpo_variance_gate(self, view: BatchView) -> torch.Tensor:
        """g(x) per row after folding this step's group reward variance into the per-prompt EMA."""
        ema = self.xrpo_state.reward_var
        by_key: dict[str, list[float]] = defaultdict(list)
        for i in np.flatnonzero(view.valid.numpy()):
            by_key[view.keys[i]].append(float(view.scores[i]))
        gates = {k: ema.update(k, v) for k, v in by_key.items()}
        return torch.tensor([gates.get(k, 1.0) for k in view.keys], dtype=torch.float32)

    def _xrpo_novelty(self, view: BatchView) -> torch.Tensor:
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
        scores = self.xrpo_state.novelty.score(keys, emb, view.correct[idx].numpy())
        novelty[idx] = torch.as_tensor(np.asarray(scores, dtype=np.float32))
        self.xrpo_state.novelty.update(keys, emb)
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
        if s.use_prefix:
            from xrpo_verl.verl_adapters.prefixes import queue_prefixes

            if self._xrpo_newlines is None:
                self._xrpo_newlines = newline_token_ids(self.tokenizer)
            queued = queue_prefixes(self, view)
            metrics["xrpo/guided/queued"] = queued
            metrics["xrpo/guided/queue_size"] = len(self.xrpo_state.guided_queue)

    # ------------------------------------------------------------------ metrics and checkpoints
    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        metrics["xrpo/time_s/plugin"] = self._xrpo_plugin_s
        step_s = timing_raw.get("step", 0.0)
        metrics["xrpo/time_share/plugin"] = self._xrpo_plugin_s / step_s if step_s > 0 else 0.0

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


def prefix_mask_metrics(view: BatchView) -> dict[str, float]:
    """Response tokens the loss does not see (`response_mask` 0 inside the response), from the batch itself:
    ExTra guided rows must have them (the forced prefix), every other row none."""
    lengths = torch.tensor([int(r.numel()) for r in view.responses], dtype=torch.float32)
    masked = lengths - view.mask.sum(-1)
    guided = ~view.not_guided & view.valid
    other = view.not_guided & view.valid
    return {
        "xrpo/prefix/guided_rows": float(guided.sum()),
        "xrpo/prefix/guided_rows_masked": float((masked[guided] > 0).sum()),
        "xrpo/prefix/masked_prefix_tokens": float(masked[guided].sum()),
        "xrpo/prefix/masked_tokens_other_rows": float(masked[other].sum()),
    }


class BatchView:
    """The step's trajectories as dense tensors and lists (B rows, T = longest response)."""

    def __init__(
        self, *, uids, keys, kinds, raw_prompts, responses, prompts, entropy, mask, rm_scores, old_log_probs, valid
    ):
        self.uids, self.keys, self.kinds, self.raw_prompts = uids, keys, kinds, raw_prompts
        self.responses = responses  # list of (T_i,) int64, full response (guided: prefix + suffix)
        self.prompts = prompts  # list of (P_i,) int64 or None
        self.entropy = entropy  # (B, T) float or None, response-aligned
        self.mask = mask  # (B, T) float, 1 on generated tokens
        self.rm_scores = rm_scores  # (B, T) float, reward on the last token
        self.old_log_probs = old_log_probs  # (B, T)
        self.valid = valid  # (B,) bool, False on verl's padding rows
        scores = rm_scores.sum(-1)
        self.scores = scores
        self.correct = (scores > 0) & valid
        self.not_guided = torch.tensor([k != "guided" for k in kinds], dtype=torch.bool)
        self.seq_logp_mean = adv_lib.sequence_mean_logprob(old_log_probs, mask)

    @classmethod
    def from_tq(cls, data: TensorDict, tags: list[dict]) -> BatchView:
        def dense(name):
            return data[name].to_padded_tensor(0.0)

        def column(name):  # LinkedList / NonTensorStack / ndarray, depending on the TQ backend
            return [getattr(v, "data", v) for v in list(data[name])]

        mask = dense("response_mask").float()
        return cls(
            uids=[str(u) for u in column("uid")],
            keys=[str(k) for k in column(R.COL_PROMPT_KEY)],
            kinds=[str(k) for k in column(R.COL_KIND)],
            raw_prompts=column("raw_prompt"),
            responses=list(data["responses"].unbind()),
            prompts=list(data["prompts"].unbind()) if "prompts" in data.keys() else None,
            entropy=dense("entropy").float() if "entropy" in data.keys() else None,
            mask=mask,
            rm_scores=dense("rm_scores").float(),
            old_log_probs=dense("old_log_probs").float(),
            valid=torch.tensor([not t.get("is_padding", False) for t in tags], dtype=torch.bool),
        )
