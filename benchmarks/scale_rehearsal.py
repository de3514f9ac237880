"""A cluster step of the xrpo trainer mode rehearsed on CPU: the plugin's own per-step code at the sizes
our users run, for hundreds of steps, with only the model, the engine and the encoder stood in for.

What runs for real, each step, on one driver thread (the TaskRunner's):
- prompt selection (`selection=history`: `PromptSelector` over the dataset) when asked;
- the planner over the step's groups (phased `plan_round`, or `StreamingRounds` fed in completion
  order), and TransferQueue: a real one (Ray, `transfer_queue.init`) holds the step's prompt and
  trajectory entries, and `trajectories.listing` is timed on it;
- ICL: the corpus takes what the trainer gives it (`corpus_successes`, `ICLCorpus.add_many`) and
  all-fail prompts retrieve examples;
- the advantage step: the batch view's novelty scores and memory (`novelty_scores`), the registered
  `xrpo_extra` estimator, `signal_metrics`, then prefix queueing of hard prompts (`queue_prefixes`);
- the plugin state saved as verl's checkpoint would save it (`PluginState.save`) every
  `--save-every` steps, and restored once at the end.

Stood in, and how (our choices, documented so other sizes can be judged):
- the dataset: `--dataset-prompts` prompts with hidden pass rates from the planner simulation's
  DAPO-shaped mix (`planner_sim.sample_pool`), drifting up over the run as a policy learns;
- responses: lengths log-normal (median `--response-tokens`/3.5, sigma 0.6) cut at
  `--response-tokens`, wrong ones 1.3x longer (as `planner_sim`), random token ids with a newline
  every 25 tokens on average (a math chain of thought's step rate), token entropies uniform in
  [0, 2]; a success is a Bernoulli draw of the prompt's pass rate;
- the tokenizer is the premise testbed's (a real byte-level BPE fast tokenizer, 512 ids), so every
  decode costs what a real one does per token;
- the encoder is a hashing stand-in (384-d unit vectors): its time is not the plugin's (MiniLM's
  throughput is measured in RESULTS, "Per-step overhead"), so the parts' clock leaves it out
  (`encoder_standin_s` a step is reported apart) and the rehearsal reports its input volume
  instead (texts and characters a step);
- the engine's timeline: a step's generation lasts `--gen-seconds`; a group's completion time
  follows the planner simulation's engine (`planner_sim.EngineConfig`, scaled to that length), and
  the TransferQueue polls the trainer makes over it are counted on that virtual clock with the
  trainer's own poll delay (`trajectories.poll_delay`), each costing one timed listing.

    python benchmarks/scale_rehearsal.py --prompts 512 --rollouts 16 --response-tokens 4096 \\
        --dataset-prompts 17000 --steps 300 --schedule streaming --json out.json

Writes a JSON summary (`plugin_s_p50`, `plugin_s_max`, `rss_gb_peak`, `rss_gb_by_step`, `state_mb`,
`state_save_s`, `tq_calls_per_step`, `encoder_texts_per_step`, and the parts by step); the plugin's
time on the driver process's CPU clock too (`plugin_cpu_s_p50`, `parts_cpu_s_p50`), which other jobs
on the machine inflate far less than the wall clock, and what each state component weighs pickled
alone (`state_mb_by_component`).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import pickle
import resource
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

NEWLINE_EVERY = 25  # tokens between newlines on average
DIM = 384  # MiniLM's


class StandInEncoder:
    """Unit vectors from a text's checksum (deterministic); counts what it was asked to encode."""

    def __init__(self) -> None:
        self.texts = 0
        self.chars = 0
        self.seconds = 0.0  # its own hashing: subtracted from the part that called it
        self.cpu_seconds = 0.0  # the same on the process's CPU clock

    def encode(self, texts: list[str]) -> np.ndarray:
        tic, cpu = time.perf_counter(), time.process_time()
        self.texts += len(texts)
        self.chars += sum(len(t) for t in texts)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(zlib.crc32(t.encode()))  # not hash(): the same in every process
            out[i] = rng.standard_normal(DIM)
        out = out / np.linalg.norm(out, axis=1, keepdims=True) if len(texts) else out
        self.seconds += time.perf_counter() - tic
        self.cpu_seconds += time.process_time() - cpu
        return out


def rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def compose_config(args):
    from hydra import compose, initialize_config_dir

    from xrpo_verl.verl_adapters.config import CONFIG_DIR

    overrides = [
        "algorithm.adv_estimator=xrpo_extra",
        f"actor_rollout_ref.rollout.n={args.rollouts}",
        f"algorithm.xrpo.planner.n_avg={args.rollouts}",
        f"algorithm.xrpo.planner.n_base={args.rollouts // 2}",
        f"algorithm.xrpo.planner.n_max={2 * args.rollouts}",
        "algorithm.xrpo.planner.rounds=1",
        f"algorithm.xrpo.planner.schedule={args.schedule}",
        f"algorithm.xrpo.planner.selection={args.selection}",
        "algorithm.extra.prefix.warmup_steps=0",
        f"algorithm.extra.prefix.n_suffix={args.rollouts}",
        *args.override,
    ]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="xrpo_trainer", overrides=overrides)


class Dataset:
    """Prompt ids, texts, token ids and drifting pass rates."""

    def __init__(self, n: int, steps: int, rng: np.random.Generator) -> None:
        from xrpo_verl.eval.planner_sim import PoolConfig, sample_pool

        p = np.clip(sample_pool(PoolConfig(num_prompts=n), rng), 1e-4, 1 - 1e-4)
        self.logit = np.log(p / (1 - p))
        self.drift = 1.0 / steps
        self.keys = [f"prompt-{i:06d}" for i in range(n)]
        self.texts = [
            f"Problem {i}: find the value of x_{i} given the constraints {i % 97} and {i % 89}." for i in range(n)
        ]
        self.prompt_len = rng.integers(80, 300, size=n)
        self.order = rng.permutation(n)
        self.pos = 0
        self.rng = rng

    def next(self, k: int) -> np.ndarray:
        out = []
        while k:
            if self.pos == len(self.order):
                self.order, self.pos = self.rng.permutation(len(self.order)), 0
            got = self.order[self.pos : self.pos + k]
            self.pos += got.size
            k -= got.size
            out.append(got)
        return np.concatenate(out)

    def pass_rate(self, q: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-self.logit[q]))

    def learn(self) -> None:
        self.logit += self.drift


def responses_for(q_rate: np.ndarray, counts: list[int], args, rng) -> tuple[list[np.ndarray], np.ndarray]:
    """Token ids of every rollout (long-tailed lengths, newlines) and its success."""
    success = np.concatenate([rng.random(k) < r for r, k in zip(q_rate, counts)])
    if success.size == 0:
        return [], success
    median = args.response_tokens / 3.5
    lengths = np.exp(np.log(median) + 0.6 * rng.standard_normal(success.size))
    lengths = np.where(success, lengths, 1.3 * lengths)
    lengths = np.clip(lengths, 8, args.response_tokens).astype(int)
    flat = rng.integers(20, 500, size=int(lengths.sum()))
    flat[rng.random(flat.size) < 1 / NEWLINE_EVERY] = args.newline_id
    ids = np.split(flat, np.cumsum(lengths)[:-1])
    return ids, success


def build_view(keys, uids, kinds, responses, success, rng):
    from xrpo_verl.verl_adapters.batch_view import BatchView

    lengths = torch.tensor([len(r) for r in responses])
    b, t = len(responses), int(lengths.max())
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    rm = torch.zeros(b, t)
    rm[torch.arange(b), lengths - 1] = torch.as_tensor(success, dtype=torch.float32)
    entropy = torch.rand(b, t) * 2 * mask
    return BatchView(
        uids=uids,
        keys=keys,
        kinds=kinds,
        raw_prompts=[[{"role": "user", "content": k}] for k in keys],
        responses=[torch.as_tensor(r, dtype=torch.int64) for r in responses],
        prompts=[torch.arange(16) for _ in responses],
        entropy=entropy,
        mask=mask,
        rm_scores=rm,
        old_log_probs=-torch.rand(b, t) * mask,
        valid=torch.ones(b, dtype=torch.bool),
        acc=torch.as_tensor(success, dtype=torch.float32),
    )


class TqProbe:
    """A real TransferQueue partition holding the step's entries; times `trajectories.listing`."""

    def __init__(self) -> None:
        import ray
        import transfer_queue as tq

        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        tq.init()
        self.tq = tq

    def fill(self, uids: list[str], counts: list[int]) -> None:
        from tensordict import TensorDict

        from xrpo_verl.verl_adapters import trajectories as T

        keys = list(uids)
        tags = [{"is_prompt": True, "status": "finished"} for _ in uids]
        for u, k in zip(uids, counts):
            keys += [T.trajectory_key(u, s) for s in range(k)]
            tags += [{"status": "success"} for _ in range(k)]
        fields = TensorDict({"x": torch.zeros(len(keys), 1)}, batch_size=len(keys))
        self.tq.kv_batch_put(keys=keys, partition_id=T.PARTITION, tags=tags, fields=fields)
        self.keys = keys

    def time_listing(self, uids: set[str], repeats: int = 3) -> float:
        from xrpo_verl.verl_adapters import trajectories as T

        tic = time.perf_counter()
        for _ in range(repeats):
            T.listing(uids)
        return (time.perf_counter() - tic) / repeats

    def clear(self) -> None:
        from xrpo_verl.verl_adapters import trajectories as T

        self.tq.kv_clear(keys=self.keys, partition_id=T.PARTITION)


def advantage_pass(cfg, settings):
    """The trainer's advantage computation for this checkout: `advantages.advantage_parts` and the
    metrics that read its parts, or, in code before that existed, the registered estimator and
    `signal_metrics` recomputing each feature's effect."""
    import numpy as np

    from xrpo_verl import advantages as adv_lib
    from xrpo_verl.verl_adapters import step_metrics as M

    if hasattr(adv_lib, "advantage_parts"):
        from xrpo_verl.verl_adapters.advantage_inputs import view_advantage_parts

        def step(view, novelty, gate):
            p = view_advantage_parts(view, novelty, gate, settings)
            adv_lib.token_advantages(p.advantages, view.mask, view.rm_scores.dtype)
            M.signal_metrics(view, p)

        return step
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    from xrpo_verl.verl_adapters.estimators import XrpoAdvantageInputs

    def step(view, novelty, gate):
        inputs = XrpoAdvantageInputs(seq_logp_mean=view.seq_logp_mean, correct=view.correct, novelty=novelty, gate=gate)
        get_adv_estimator_fn("xrpo_extra")(
            token_level_rewards=view.rm_scores,
            response_mask=view.mask,
            index=np.array(view.uids, dtype=object),
            config=cfg.algorithm,
            xrpo_inputs=inputs,
        )
        M.signal_metrics(view, inputs, cfg.algorithm, settings)

    return step


def polls_over(seconds: float) -> int:
    """Polls the trainer's wait makes over a wait of `seconds` (trajectories.poll_delay)."""
    from xrpo_verl.verl_adapters.trajectories import poll_delay

    t, n = 0.0, 0
    while t < seconds:
        t += poll_delay(t)
        n += 1
    return n + 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=512, help="B, prompts a step")
    ap.add_argument("--rollouts", type=int, default=16, help="n, rollouts a prompt")
    ap.add_argument("--response-tokens", type=int, default=4096, help="max response length")
    ap.add_argument("--dataset-prompts", type=int, default=17000)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--schedule", choices=("phased", "streaming"), default="streaming")
    ap.add_argument("--selection", choices=("batch", "history"), default="batch")
    ap.add_argument("--gen-seconds", type=float, default=180.0, help="a step's generation on the cluster")
    ap.add_argument("--save-every", type=int, default=10, help="verl's save_freq")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        help="a Hydra override of xrpo_trainer.yaml, after the rehearsal's own (repeatable), e.g. "
        "algorithm.extra.prefix.memory_prompts=1024",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)  # the token entropies (`build_view`)

    from transformers import AutoTokenizer

    from xrpo_verl import icl as icl_lib
    from xrpo_verl import planner
    from xrpo_verl.lab import testbed, tiny_model
    from xrpo_verl.verl_adapters import advantage_inputs
    from xrpo_verl.verl_adapters import step_metrics as M
    from xrpo_verl.verl_adapters.advantage_inputs import novelty_scores
    from xrpo_verl.verl_adapters.config import validate_trainer_config
    from xrpo_verl.verl_adapters.prefixes import queue_prefixes
    from xrpo_verl.verl_adapters.state import PluginState

    tokenizer = AutoTokenizer.from_pretrained(tiny_model.build(testbed.MODEL, verbose=False))
    args.newline_id = int(tokenizer.encode("\n", add_special_tokens=False)[0])
    cfg = compose_config(args)
    settings = validate_trainer_config(cfg, check_embedder=False)
    encoder = StandInEncoder()
    state = PluginState(settings, embedder_factory=lambda _cfg: encoder)
    state.build_prompt_selector(args.dataset_prompts, args.prompts)
    rng = np.random.default_rng(args.seed)
    data = Dataset(args.dataset_prompts, args.steps, rng)
    tq_probe = TqProbe()
    p = settings.xrpo.planner
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    import inspect

    from xrpo_verl.verl_adapters.advantage_inputs import variance_gate

    try:
        from xrpo_verl.verl_adapters import text as text_lib
    except ImportError:
        text_lib = None

    def batched_decode_kwargs(fn) -> dict:
        """The trainer's batched decode as `fn` takes it in this checkout (a run of older code may
        take the per-sequence one, or none)."""
        params = inspect.signature(fn).parameters
        if text_lib is None:
            return {}
        if "decode_spans" in params:
            return {"decode_spans": text_lib.span_decoder(tokenizer)}
        if "decode_many" in params and hasattr(text_lib, "batch_decoder"):
            return {"decode_many": text_lib.batch_decoder(tokenizer)}
        return {}

    corpus_successes = getattr(advantage_inputs, "corpus_successes", None)  # older checkouts: None
    novelty_decode_kwargs = batched_decode_kwargs(novelty_scores)
    icl_decode_kwargs = batched_decode_kwargs(corpus_successes) if corpus_successes is not None else {}
    prefix_decode_kwargs = batched_decode_kwargs(queue_prefixes)
    advantage_step = advantage_pass(cfg, settings)
    ckpt = Path(tempfile.mkdtemp(prefix="xrpo-rehearsal-"))
    atexit.register(shutil.rmtree, ckpt, True)  # hundreds of MB of states at cluster size

    def now() -> tuple[float, float]:
        """Wall and CPU clocks less the stand-in encoder's: a part's time is the plugin's own. The CPU
        clock (every thread of the driver process: the Rust tokenizer decodes on threads of its own)
        is stretched far less than the wall clock when other jobs share this machine's cores."""
        return time.perf_counter() - encoder.seconds, time.process_time() - encoder.cpu_seconds

    def spent(part: str, since: tuple[float, float]) -> None:
        wall, cpu = now()
        parts[part] += wall - since[0]
        parts_cpu[part] += cpu - since[1]

    per_step: list[dict] = []
    for step in range(1, args.steps + 1):
        parts: dict[str, float] = defaultdict(float)
        parts_cpu: dict[str, float] = defaultdict(float)
        texts0, chars0, encoder_s0 = encoder.texts, encoder.chars, encoder.seconds
        b = args.prompts
        # --- which prompts
        tic = now()
        if state.prompt_selector is not None:
            cand = data.next(p.candidates * b)
            keys_c = [data.keys[q] for q in cand]
            chosen = state.prompt_selector.choose(keys_c, b, step, args.rollouts, rng)
            qs = cand[chosen]
        else:
            qs = data.next(b)
        spent("select", tic)
        keys = [data.keys[q] for q in qs]
        uids = [f"u{step}x{i}" for i in range(b)]
        rate = data.pass_rate(qs)
        # --- rounds: base, then the planner (the engine's outcomes are stood in)
        base_ids, base_ok = responses_for(rate, [p.n_base] * b, args, rng)
        groups = [base_ok[i * p.n_base : (i + 1) * p.n_base].astype(float) for i in range(b)]
        tic = now()
        if p.schedule == "phased":
            extra = planner.plan_round(groups, b * (p.n_avg - p.n_base), p).extra
        else:
            plan = planner.StreamingRounds(b, p)
            order = rng.permutation(b)  # completion order of the base groups
            extra = [0] * b
            for q in order:
                for q2, k in plan.back(int(q), list(groups[q])).items():
                    extra[q2] += k
            for q in np.flatnonzero(plan.deferred):
                extra[q] += int(plan.deferred[q])
        spent("planner", tic)
        more_ids, more_ok = responses_for(rate, extra, args, rng)
        # --- TransferQueue: the step's entries, a timed listing, the polls the trainer makes
        counts = [p.n_base + e for e in extra]
        tq_probe.fill(uids, counts)
        listing_s = tq_probe.time_listing(set(uids))
        waits = [args.gen_seconds / 2, args.gen_seconds / 2] if p.schedule == "phased" else [args.gen_seconds]
        polls = sum(polls_over(w) for w in waits)
        parts["tq_listing"] += polls * listing_s
        tq_probe.clear()
        # --- assemble the step's rows in group order
        responses, success, row_keys, row_uids, kinds = [], [], [], [], []
        off_b = off_m = 0
        for i in range(b):
            for j in range(p.n_base):
                responses.append(base_ids[off_b + j])
                success.append(base_ok[off_b + j])
                kinds.append("base")
            off_b += p.n_base
            for j in range(extra[i]):
                responses.append(more_ids[off_m + j])
                success.append(more_ok[off_m + j])
                kinds.append("round")
            off_m += extra[i]
            row_keys += [keys[i]] * counts[i]
            row_uids += [uids[i]] * counts[i]
        success = np.asarray(success)
        view = build_view(row_keys, row_uids, kinds, responses, success, rng)
        # --- ICL: all-fail prompts retrieve, successes enter the corpus
        tic = now()
        fail = [i for i in range(b) if not groups[i].any()]
        if fail and len(state.corpus):
            state.corpus.retrieve_many([keys[i] for i in fail], [data.texts[qs[i]] for i in fail], k=2)
        prompt_of = {u: i for i, u in enumerate(uids)}

        prompt_text = [data.texts[qs[prompt_of[u]]] for u in row_uids].__getitem__  # row -> its question
        if corpus_successes is not None:  # the trainer's own choice of what the corpus takes
            examples, _ = corpus_successes(
                view, prompt_text, decode, step, settings.xrpo.icl.max_example_tokens, **icl_decode_kwargs
            )
        else:  # as older trainers did: each prompt's first success, decoded whole
            firsts = {}
            for r in np.flatnonzero(success):
                firsts.setdefault(row_keys[r], r)
            examples = [
                icl_lib.ICLExample(k, prompt_text(r), decode(responses[r].tolist()), step, len(responses[r]))
                for k, r in firsts.items()
            ]
        state.corpus.add_many(examples)
        spent("icl", tic)
        # --- advantages: novelty, the estimator's one pass, its metrics (as `XrpoTrainer._write_advantages`)
        tic = now()
        novelty, _ = novelty_scores(
            view, state.novelty, encoder.encode, decode, settings.extra.novelty, **novelty_decode_kwargs
        )
        gate = variance_gate(view, state.reward_var)
        spent("novelty", tic)
        tic = now()
        advantage_step(view, novelty, gate)
        M.group_signal_metrics(view)
        spent("advantage", tic)
        if state.prompt_selector is not None:
            tic = now()
            bare = [i for i, k in enumerate(kinds) if k in ("base", "round")]
            state.prompt_selector.record([row_keys[i] for i in bare], success[bare].tolist(), step)
            spent("select", tic)
        # --- prefixes of hard prompts
        tic = now()
        rows = {u: {"reward_model": {"ground_truth": "0"}, "data_source": "rehearsal"} for u in uids}
        queued = queue_prefixes(
            view,
            cfg=settings.extra.prefix,
            state=state,
            source_rows=rows,
            newline_ids={args.newline_id},
            end_ids=set(),
            decode=decode,
            max_prefix_len=int(settings.extra.prefix.max_prefix_frac * args.response_tokens),
            **prefix_decode_kwargs,
        )
        spent("prefixes", tic)
        prefix_metrics = queued.metrics()
        # --- checkpoint
        save_s, state_mb = 0.0, None
        if step % args.save_every == 0 or step == args.steps:
            tic = time.perf_counter()
            path = state.save(str(ckpt / f"global_step_{step}"))
            save_s = time.perf_counter() - tic
            state_mb = os.path.getsize(path) / 2**20
            if step > args.save_every:  # verl keeps the newest checkpoints; ours goes with its folder
                old = ckpt / f"global_step_{step - args.save_every}" / "xrpo" / "state.pkl"
                old.unlink(missing_ok=True)
        data.learn()
        plugin = sum(v for k, v in parts.items() if k != "tq_listing")
        per_step.append(
            {
                "step": step,
                "plugin_s": plugin,
                "plugin_cpu_s": sum(parts_cpu.values()),
                **{f"{k}_s": v for k, v in parts.items()},
                **{f"{k}_cpu_s": v for k, v in parts_cpu.items()},
                "tq_calls": polls,
                "tq_listing_s": listing_s,
                "rss_gb": rss_gb(),
                "encoder_texts": encoder.texts - texts0,
                "encoder_chars": encoder.chars - chars0,
                "encoder_standin_s": encoder.seconds - encoder_s0,
                "state_save_s": save_s,
                "state_mb": state_mb,
                "rows": len(responses),
                **{
                    f"prefix_{k.replace('/', '_')}": prefix_metrics.get(f"xrpo/prefix/{k}")
                    for k in ("hard_prompts", "candidates/mean", "memory/mean", "memory/carried/mean")
                },
            }
        )
        print(
            f"step {step}: plugin {plugin:.2f}s, cpu {per_step[-1]['plugin_cpu_s']:.2f}s "
            f"({', '.join(f'{k} {v:.2f}' for k, v in parts.items())}) "
            f"rss {per_step[-1]['rss_gb']:.2f} GB, TQ {polls} listings of {listing_s * 1e3:.1f} ms, "
            f"encoder {per_step[-1]['encoder_texts']} texts"
            + (f", state {state_mb:.0f} MB in {save_s:.1f}s" if state_mb else ""),
            flush=True,
        )
        del view
    # what each component of the last state weighs, pickled alone
    state_mb_by_component = {
        name: len(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)) / 2**20
        for name, v in state.state_dict()["components"].items()
        if v is not None
    }
    tic = time.perf_counter()
    restored = PluginState(settings, embedder_factory=lambda _cfg: encoder)
    restored.build_prompt_selector(args.dataset_prompts, args.prompts)
    restored.load(str(ckpt / f"global_step_{args.steps}"))
    restore_s = time.perf_counter() - tic
    plugin = [s["plugin_s"] for s in per_step]
    saves = [s for s in per_step if s["state_mb"] is not None]
    summary = {
        "args": {k: v for k, v in vars(args).items() if k != "json"},
        "machine": os.uname().machine,
        "plugin_s_p50": statistics.median(plugin),
        "plugin_s_max": max(plugin),
        "parts_s_p50": {
            k: statistics.median(s.get(f"{k}_s", 0.0) for s in per_step)
            for k in ("select", "planner", "icl", "novelty", "advantage", "prefixes")
        },
        "plugin_cpu_s_p50": statistics.median(s["plugin_cpu_s"] for s in per_step),
        "plugin_cpu_s_max": max(s["plugin_cpu_s"] for s in per_step),
        "parts_cpu_s_p50": {
            k: statistics.median(s.get(f"{k}_cpu_s", 0.0) for s in per_step)
            for k in ("select", "planner", "icl", "novelty", "advantage", "prefixes")
        },
        "rss_gb_peak": peak_rss_gb(),
        "rss_gb_final": per_step[-1]["rss_gb"],
        "rss_gb_by_step": [round(s["rss_gb"], 3) for s in per_step],
        "state_mb": saves[-1]["state_mb"],
        "state_mb_by_save": [round(s["state_mb"], 2) for s in saves],
        "state_mb_by_component": {k: round(v, 2) for k, v in state_mb_by_component.items()},
        "state_save_s": max(s["state_save_s"] for s in saves),
        "state_restore_s": restore_s,
        "tq_calls_per_step": statistics.median(s["tq_calls"] for s in per_step),
        "tq_listing_ms": 1e3 * statistics.median(s["tq_listing_s"] for s in per_step),
        "tq_listing_s_per_step": statistics.median(s["tq_listing_s"] * s["tq_calls"] for s in per_step),
        "encoder_texts_per_step": statistics.median(s["encoder_texts"] for s in per_step),
        "encoder_chars_per_step": statistics.median(s["encoder_chars"] for s in per_step),
        "encoder_standin_s_p50": statistics.median(s["encoder_standin_s"] for s in per_step),
        "prefix_memory_prompts": len(state.prefix_memory),
        "novelty_memory_prompts": len(state.novelty),
        "corpus_prompts": len(state.corpus),
        "per_step": per_step,
    }
    print(json.dumps({k: v for k, v in summary.items() if k not in ("per_step", "rss_gb_by_step")}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
