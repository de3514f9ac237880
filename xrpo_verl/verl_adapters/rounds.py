"""One step's rollouts in trainer mode `xrpo`: the base submission, then the planner's rounds.

Step 1 of `trainer.py`, apart so that the trainer reads as one step. The dataloader's prompts (or
the B that selection=history picks) get `n_base` rollouts each, queued ExTra guided prompts take the
batch's tail rows; with the planner R rounds follow (`planner.plan_round`, phased, or
`planner.StreamingRounds`), each one batched submission under the same uids, and all-fail prompts
get theirs from an ICL prompt when the ICL gate draws it. Pilot-Commit, the baseline, replaces all
of it. The allocation is the planner's; this module only moves rows to verl and outcomes back.

`StepRollouts` holds what it needs of the trainer as plain values and two callables (verl's
submission and its dataloader), built afresh each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from verl.utils.debug import marked_timer

from xrpo_verl import icl as icl_lib
from xrpo_verl import planner
from xrpo_verl.icl_gate import ArmCounts
from xrpo_verl.verl_adapters import rows as R
from xrpo_verl.verl_adapters import step_metrics as M
from xrpo_verl.verl_adapters import trajectories as T
from xrpo_verl.verl_adapters.agent_loops import ICL_AGENT, PREFIX_AGENT
from xrpo_verl.verl_adapters.config import PluginSettings
from xrpo_verl.verl_adapters.state import PluginState


@dataclass
class _IclLog:
    """ICL seeding in one step: the sessions of all-fail prompts by arm, and every retrieval decision."""

    share: float  # probability that an all-fail prompt gets ICL this step (the gate's)
    sessions: dict[str, list[range]] = field(default_factory=dict)  # uid -> its ICL rollouts
    zero_shot: dict[str, list[range]] = field(default_factory=dict)  # uid -> its zero-shot rollouts while all-fail
    decisions: list[icl_lib.ICLDecision] = field(default_factory=list)


@dataclass
class StepRollouts:
    """The rollouts of step `step`; `run()` submits them all and returns the step's rollout metrics."""

    settings: PluginSettings
    state: PluginState
    submit_batch: Callable[[Any], None]  # verl's `_submit_batch_to_rollout`
    next_batch: Callable[..., Any]  # verl's `_next_train_batch`
    tokenizer: Any
    step: int
    batch_size: int  # data.train_batch_size
    agent: str  # the default agent loop
    prompt_length: int  # the rollout's prompt cap, tokens
    seed: int  # data.seed
    timing: dict  # verl's timing_raw
    plugin_s: float = 0.0  # our own bookkeeping's time
    step_rows: dict[str, dict] = field(default_factory=dict)  # uid -> dataset row of a base prompt

    def run(self) -> dict:
        s = self.settings
        if s.xrpo.planner.selection == "pilot_commit":
            return self._pilot_commit()
        tic = time.perf_counter()
        rows, scalars, select_metrics = self._candidate_rows()
        default_agent = self.agent
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
        self.step_rows = {r["uid"]: r for r in base}  # the source rows of guided prompts queued this step
        self.plugin_s += time.perf_counter() - tic
        ledger = T.RolloutLedger()
        in_flight = T.InFlight(ledger)
        with marked_timer("xrpo_round_0", self.timing):
            self._submit(submit, scalars, ledger)
            if not (s.use_planner and s.xrpo.planner.schedule == "streaming"):
                T.wait_terminal({r["uid"] for r in submit}, on_poll=in_flight.sample)
        metrics = {"xrpo/prompts/base": float(len(base)), "xrpo/guided/injected": float(len(guided))}
        metrics.update(select_metrics)
        self.state.counters["guided_injected"] += len(guided)
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
        s, b = self.settings, self.batch_size
        selector = self.state.prompt_selector
        if selector is None:
            rows, scalars = R.to_rows(self.next_batch())
            return rows, scalars, {}
        p = s.xrpo.planner
        candidates, scalars = R.to_rows(self.next_batch(p.candidates * b))
        tic = time.perf_counter()
        keys = [R.prompt_key(r["raw_prompt"]) for r in candidates]
        n = p.n_avg if s.use_planner else s.rollout_n
        rng = np.random.default_rng([self.seed, int(self.step)])
        seen_before = np.array([k in selector.slots for k in keys])
        score = selector.scores(keys, self.step, n)
        chosen = selector.choose(keys, b, self.step, n, rng, score=score)
        self.plugin_s += time.perf_counter() - tic
        rows = [candidates[i] for i in chosen]
        return rows, scalars, M.selection_metrics(score, chosen, seen_before, len(selector))

    def _pilot_commit(self) -> dict:
        """Pilot-Commit (arXiv 2605.26606), the baseline, as its released code runs a step, within the step
        (docs/algorithms.md): each generation pass pilots B new prompts with k_e rollouts and commits
        rollout.n - k_e more to prompts whose pilot success rate lies in [lower, 1 - upper], until B
        prompts are committed; the rest (failed pilots, passed ones beyond B) leave TransferQueue untrained.
        """
        s, b = self.settings, self.batch_size
        p, agent = s.xrpo.planner, self.agent
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
                rows, scalars = R.to_rows(self.next_batch())
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
            self.plugin_s += time.perf_counter() - tic
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
        p = self.settings.xrpo.planner
        uids = [r["uid"] for r in base]
        icl = self._icl_log()
        metrics: dict[str, float] = {}
        floor = 0
        for r, budget in enumerate(planner.round_budgets(len(base), p.n_avg, p.n_base, p.rounds)[1:], start=1):
            tic = time.perf_counter()
            outcomes = ledger.outcomes(uids)
            plan = planner.plan_round([[o.reward for o in outcomes[u]] for u in uids], budget, p)
            submit = [
                self._round_row(row, k, outcomes[row["uid"]], ledger, icl, default_agent)
                for row, k in zip(base, plan.extra, strict=True)
                if k > 0
            ]
            self.plugin_s += time.perf_counter() - tic
            metrics.update(M.round_metrics(r, plan))
            floor += sum(plan.floor)
            if submit:
                with marked_timer(f"xrpo_round_{r}", self.timing):
                    self._submit(submit, scalars, ledger)
                    T.wait_terminal({row["uid"] for row in submit}, on_poll=in_flight.sample)
        metrics["xrpo/alloc/fail_floor_rollouts"] = float(floor)
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
        p = self.settings.xrpo.planner
        uids = [r["uid"] for r in base]
        plan = planner.StreamingRounds(len(base), p)
        icl = self._icl_log()
        pending = set(uids) | guided_uids  # groups with rollouts in flight
        back_s = [0.0] * (p.rounds + 1)  # when the last rollout of round r came back
        # one listing a poll serves everything the poll decides, every prompt of the step included;
        # polls come at a share of the wait's length (so a long GPU generation is listed seldom), and
        # the deadline is a stall's: no group back for XRPO_ROUND_TIMEOUT_S, not the whole generation
        t0 = progress = time.monotonic()  # progress: when a group last came back
        listed = set(uids) | guided_uids
        with marked_timer("xrpo_streaming", self.timing):
            while pending:
                seen = T.listing(listed | pending)
                in_flight.sample(seen)
                done = T.terminal(pending, seen)
                if not done:
                    if time.monotonic() > progress + T.ROUND_TIMEOUT_S:
                        raise RuntimeError(
                            f"{len(pending)} prompt groups made no progress for {T.ROUND_TIMEOUT_S:.0f}s "
                            "(XRPO_ROUND_TIMEOUT_S); an agent loop is stuck"
                        )
                    time.sleep(T.poll_delay(time.monotonic() - t0))
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
                        known = outcomes.get(uids[q2]) or ledger.outcomes([uids[q2]], seen)[uids[q2]]
                        submit.append(self._round_row(base[q2], k, known, ledger, icl, default_agent))
                self.plugin_s += time.perf_counter() - tic
                if submit:
                    self._submit(submit, scalars, ledger)
                    pending |= {row["uid"] for row in submit}
        if not plan.done:
            raise RuntimeError("streaming rounds ended with rollouts still to issue; a group came back twice")
        metrics = {f"xrpo/round_{r}/rollouts": float(n) for r, n in enumerate(plan.per_round) if r > 0}
        metrics.update({f"xrpo/round_{r}/back_s": t for r, t in enumerate(back_s)})
        metrics["xrpo/streaming/released_at_close"] = float(plan.released_at_close)  # waited for the last prompt
        metrics["xrpo/alloc/fail_floor_rollouts"] = float(plan.floor_rollouts)
        metrics.update(self._icl_outcome(icl, ledger))
        metrics.update(M.allocation_metrics([ledger.submitted[u] for u in uids]))
        return metrics

    def _icl_log(self) -> _IclLog:
        gate = self.state.icl_gate
        return _IclLog(share=gate.share() if gate is not None else 0.0)

    def _round_row(
        self, row: dict, k: int, outcomes: list[T.Outcome], ledger: T.RolloutLedger, icl: _IclLog, agent: str
    ) -> dict:
        """Prompt `row`'s k more rollouts: from an ICL prompt when it has no verified success yet and
        the ICL gate draws ICL for it (xrpo_verl/icl_gate.py; `gate=always` is the paper)."""
        # ICL's trigger (XRPO §2.3) is no verified success so far, not a reward of 0: a
        # partial-credit response does not solve the prompt
        u, s = row["uid"], self.settings
        sessions = range(ledger.submitted[u], ledger.submitted[u] + k)
        decision = None
        if s.use_icl and not any(o.success for o in outcomes):
            if self.state.icl_gate.use_icl(icl.share, self.step, row[R.COL_PROMPT_KEY]):
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
        if not self.settings.use_icl:
            return {}
        final = ledger.outcomes(sorted(set(icl.sessions) | set(icl.zero_shot)))

        def arm(sessions: dict[str, list[range]]) -> tuple[ArmCounts, int]:
            wins = {u: [final[u][i].success for rg in rgs for i in rg] for u, rgs in sessions.items()}
            counts = ArmCounts(float(sum(map(len, wins.values()))), float(sum(map(sum, wins.values()))))
            return counts, sum(any(w) for w in wins.values())

        (icl_counts, flips), (zs_counts, zs_flips) = arm(icl.sessions), arm(icl.zero_shot)
        self.state.icl_gate.update(icl_counts, zs_counts)
        self.state.counters["icl_triggers"] += len(icl.sessions)
        self.state.counters["icl_flips"] += flips
        metrics = M.icl_metrics(icl.decisions, len(icl.sessions), flips, len(self.state.corpus))
        metrics.update(M.icl_gate_metrics(icl.share, icl_counts, zs_counts, zs_flips))
        return metrics

    def _submit(self, rows: list[dict], scalars: dict, ledger: T.RolloutLedger) -> None:
        """One batched submission (never one per prompt); each row's sessions reserved in the ledger."""
        rows = [{**row, R.COL_OFFSET: ledger.reserve(row["uid"], row[R.ROLLOUT_N])} for row in rows]
        self.submit_batch(R.from_rows(rows, scalars))

    def _icl_prompt(self, row: dict) -> icl_lib.ICLDecision:
        cfg, tok = self.settings.xrpo.icl, self.tokenizer
        text = R.user_text(row["raw_prompt"])

        def count(t: str) -> int:
            return len(tok.encode(t, add_special_tokens=False))

        cap = cfg.max_prompt_tokens
        if cap is None:  # the rollout's prompt cap less what the chat template adds around the user turn
            templated = tok.apply_chat_template(list(row["raw_prompt"]), tokenize=False, add_generation_prompt=True)
            overhead = len(tok.encode(templated, add_special_tokens=False)) - count(text)
            cap = icl_lib.user_turn_budget(overhead, self.prompt_length)
        return icl_lib.icl_decision(
            self.state.corpus,
            cfg,
            prompt_id=row[R.COL_PROMPT_KEY],
            prompt_text=text,
            count_tokens=count,
            max_prompt_tokens=cap,
        )

    def _pop_guided(self, batch_size: int) -> list[Any]:
        s = self.settings
        if not s.use_prefix or self.step <= s.extra.prefix.warmup_steps:
            return []
        queue = self.state.guided_queue
        # Keep at least one dataloader prompt per step, so the planner always has a base group.
        take = min(s.extra.prefix.per_step, len(queue), batch_size - 1)
        return queue.pop_many(take) if take > 0 else []
