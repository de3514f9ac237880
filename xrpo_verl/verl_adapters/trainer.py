"""Trainer mode `xrpo`: verl 0.9.1's V1 sync trainer with XRPO/ExTra rollout rounds and advantages.

Select with `trainer.v1.trainer_mode=xrpo` (`xrpo_verl/hydra_config/xrpo_trainer.yaml`). A step,
in the order this file reads:

1. `prepare_step`, the rollouts (`rounds.py`): the dataloader's prompts get `n_base` rollouts each
   (rollout.n without the planner); queued ExTra guided prompts replace the batch's tail rows;
   with the planner, R rounds follow, all-fail prompts' from an ICL prompt of verified successes.
2. verl's own pipeline: replay buffer, `_balance_batch` (ours also sorts each mini-batch's rows by
   length, `micro_batches.py`, so that an ICL or guided row pads only rows as long as itself),
   old log-probs with token entropies, ...
3. `_compute_advantage`: the batch read once (`BatchView`), the inputs only this trainer has
   (novelty, the variance gate, verl's rollout correction), the advantages and their parts in one
   call (`advantages.advantage_parts`), then the memories: successes into the ICL corpus,
   responses into the novelty memory (inside `novelty_scores`), prefixes of hard prompts into the
   guided queue for later steps.
4. verl's actor update; the plugin state is saved with verl's checkpoints and restored on resume.

This file unpacks verl's batch, calls the pure modules and packs their results; TransferQueue's
layout is in `trajectories.py`, the step's metrics in `step_metrics.py`. See docs/multiround.md.
"""

from __future__ import annotations

import os
import time

import torch
import transfer_queue as tq
from omegaconf import DictConfig
from tensordict import TensorDict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer
from verl.workers.utils.padding import response_to_nested

from xrpo_verl import advantages as adv_lib
from xrpo_verl.rewards.sandbox_metrics import step_metrics as reward_step_metrics
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters import step_metrics as M
from xrpo_verl.verl_adapters import trajectories as T
from xrpo_verl.verl_adapters.advantage_inputs import (
    corpus_successes,
    novelty_scores,
    rollout_correction,
    variance_gate,
    view_advantage_parts,
)
from xrpo_verl.verl_adapters.agent_loops import select_agent_loop_manager
from xrpo_verl.verl_adapters.batch_view import BatchView
from xrpo_verl.verl_adapters.config import TRAINER_MODE, validate_trainer_config
from xrpo_verl.verl_adapters.micro_batches import padded_cuts, padding_share, sorted_within_blocks
from xrpo_verl.verl_adapters.prefixes import PrefixQueueResult, newline_token_ids, queue_prefixes
from xrpo_verl.verl_adapters.rounds import StepRollouts
from xrpo_verl.verl_adapters.state import PluginState, prune_orphan_states
from xrpo_verl.verl_adapters.text import span_decoder
from xrpo_verl.verl_adapters.verl_internals import check_verl


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
        self._span_decode = None  # text.span_decoder of the tokenizer, built on first use
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

    # ------------------------------------------------------------------ 1. rollouts (rounds.py)
    def prepare_step(self) -> dict:
        self._plugin_s = 0.0
        cfg = self.config
        rollouts = StepRollouts(
            self.xrpo_settings,
            self.xrpo_state,
            submit_batch=self._submit_batch_to_rollout,
            next_batch=self._next_train_batch,
            tokenizer=self.tokenizer,
            step=self.global_steps,
            batch_size=int(cfg.data.train_batch_size),
            agent=cfg.actor_rollout_ref.rollout.agent.default_agent_loop,
            prompt_length=int(cfg.actor_rollout_ref.rollout.prompt_length),
            seed=int(cfg.data.get("seed", 0) or 0),
            timing=self.timing_raw,
        )
        with marked_timer("gen", self.timing_raw):
            metrics = rollouts.run()
        self._step_rows = rollouts.step_rows  # the source rows of guided prompts queued this step
        self._plugin_s += rollouts.plugin_s
        return metrics

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
        else:
            batch = self._write_advantages(batch, view, data, metrics)
        self._update_memories(view, metrics)
        self._plugin_s += time.perf_counter() - tic
        return batch

    def _write_advantages(self, batch, view: BatchView, data: TensorDict, metrics: dict):
        """Our estimator in one pass (`advantages.advantage_parts`, from the parsed settings; the one
        registered with verl wraps the same function): its advantages go to TransferQueue, its
        parts to the metrics."""
        s = self.xrpo_settings
        out = self._rollout_correction(view, data, metrics)
        novelty, gate, memory_metrics = torch.zeros(len(view.uids), dtype=torch.float32), None, {}
        if s.use_novelty:
            embed = self.xrpo_state.extra_embedder().encode
            novelty, memory_metrics = novelty_scores(
                view, self.xrpo_state.novelty, embed, self._decode, s.extra.novelty, decode_spans=self._decode_spans
            )
            if s.extra.novelty.placement == "before_norm":
                gate = variance_gate(view, self.xrpo_state.reward_var)
        parts = view_advantage_parts(view, novelty, gate, s)
        adv = adv_lib.token_advantages(parts.advantages, view.mask, view.rm_scores.dtype)
        out["advantages"], out["returns"] = adv, adv
        nested = {k: response_to_nested(v, data["response_mask"]) for k, v in out.items()}
        batch = tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(nested, batch_size=len(batch))
        )  # returns the meta that lists the new fields; later stages read that list
        valid_adv = adv.sum(-1)[view.valid] / view.mask.sum(-1).clamp(min=1)[view.valid]
        metrics["xrpo/adv/seq_mean"] = float(valid_adv.mean()) if len(valid_adv) else 0.0
        metrics.update(M.signal_metrics(view, parts))
        metrics.update(memory_metrics)  # the novelty memory's own figures, over signal_metrics' zeros
        return batch

    def _rollout_correction(self, view: BatchView, data: TensorDict, metrics: dict) -> dict[str, torch.Tensor]:
        """verl's IS weights and rejection mask, which verl computes in the `_compute_advantage` we
        replace; the fields to write back (and `view.mask` narrowed where rows were rejected)."""
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
        return out

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
            successes, too_long = corpus_successes(
                view,
                lambda i: R.user_text(view.raw_prompts[i]),
                self._decode,
                self.global_steps,
                s.xrpo.icl.max_example_tokens,
                decode_spans=self._decode_spans,
            )
            self.xrpo_state.corpus.add_many(successes)  # new prompts encoded in one call
            metrics["xrpo/icl/corpus_added"] = float(len(successes))
            metrics["xrpo/icl/corpus_too_long"] = float(too_long)
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
                decode_spans=self._decode_spans,
            )
        metrics.update(result.metrics())
        metrics["xrpo/guided/queue_size"] = float(len(self.xrpo_state.guided_queue) if s.use_prefix else 0)
        metrics.update(self.xrpo_state.encoder_metrics())  # the step's last encode is above

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _decode_spans(self, sources: list, spans: list[tuple[int, int, int]]) -> list[str]:
        if self._span_decode is None:
            self._span_decode = span_decoder(self.tokenizer)
        return self._span_decode(sources, spans)

    # ------------------------------------------------------------------ 4. metrics and checkpoints
    def on_init_end(self):
        super().on_init_end()
        self.xrpo_state.build_prompt_selector(len(self.train_dataset), int(self.config.data.train_batch_size))

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        step_s = timing_raw.get("step", 0.0)
        metrics["xrpo/time_s/plugin"] = self._plugin_s
        metrics["xrpo/time_share/plugin"] = self._plugin_s / step_s if step_s > 0 else 0.0
        metrics.update(reward_step_metrics(T.reward_infos(batch), step_s))

    def _save_checkpoint(self):
        step_dir = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.xrpo_state.save(step_dir)  # before verl writes latest_checkpointed_iteration.txt
        super()._save_checkpoint()
        prune_orphan_states(self.config.trainer.default_local_dir)  # verl's retention removed their actors

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
