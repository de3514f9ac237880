"""Plugin state that must survive a checkpoint: ICL corpus, novelty memory, prefix memory, guided queue,
prompt history.

Saved as `{default_local_dir}/global_step_{N}/xrpo/state.pkl` *before* verl writes
`latest_checkpointed_iteration.txt`, so a checkpoint that verl would resume from always holds it.
Everything is filled during a step (rounds and `_compute_advantage`) and never in
`on_step_end`, which runs after the save; so a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any

from xrpo_verl.verl_adapters.config import PluginSettings

STATE_DIR = "xrpo"
STATE_FILE = "state.pkl"
STATE_VERSION = 4  # 2: a guided prompt carries its dataset row (no separate guided_rows); 3: the ICL gate;
# 4: the prompt history of selection=history
# components added after version 2: a checkpoint of an older version starts them empty
ADDED_IN = {"icl_gate": 3, "prompt_selector": 4}


class PluginState:
    """Holds the stateful parts; each is built on first use (the embedder loads lazily).

    Args:
        settings: the validated plugin settings.
        embedder_factory: `(EmbedderConfig) -> object with encode(list[str]) -> (N, d) float32`;
            defaults to `xrpo_verl.embeddings.get_embedder`.
    """

    def __init__(self, settings: PluginSettings, embedder_factory: Callable[[Any], Any] | None = None):
        self.settings = settings
        self._embedder_factory = embedder_factory or _default_embedder
        # one metered encoder per role; both load on their first encode (the factory may share one model)
        self._encoders = {
            "icl": _LazyEmbedder(lambda: self._embedder_factory(settings.xrpo.embedder)),
            "extra": _LazyEmbedder(lambda: self._embedder_factory(settings.extra.embedder)),
        }
        self._pending: dict[str, dict] = {}  # state loaded before its component was built
        self.corpus = None
        self.novelty = None
        self.prefix_memory = None
        self.guided_queue = None
        self.reward_var = None
        self.icl_gate = None
        self.prompt_selector = None  # built by `build_prompt_selector` once the dataset's size is known
        self.counters: dict[str, int] = {"icl_triggers": 0, "icl_flips": 0, "guided_injected": 0}
        self._build()

    # ------------------------------------------------------------------ building
    def icl_embedder(self) -> _LazyEmbedder:
        """The ICL corpus's encoder (`algorithm.xrpo.embedder`), metered."""
        return self._encoders["icl"]

    def extra_embedder(self) -> _LazyEmbedder:
        """The novelty and prefix encoder (`algorithm.extra.embedder`), metered."""
        return self._encoders["extra"]

    def encoder_metrics(self) -> dict[str, float]:
        """The sentence encoders' work since the last call, as trainer metrics, and the counters
        reset: texts, calls and seconds of `encode` (per role and in all), and once an encoder has
        loaded its device (`device_is_cuda`), batch size, load time and CUDA peak. The trainer calls it
        once a step, after the last encode of the step."""
        out: dict[str, float] = {}
        totals = {"texts": 0.0, "calls": 0.0, "seconds": 0.0}
        for role, enc in self._encoders.items():
            m = enc.take_metrics()
            if m is None:
                continue  # this role was never used
            for key in totals:
                totals[key] += m[key]
                out[f"xrpo/encoder/{role}/{key}"] = m[key]
            for key in ("device_is_cuda", "batch_size", "cuda_peak_gb", "load_seconds"):
                if key in m:
                    out[f"xrpo/encoder/{key}"] = max(out.get(f"xrpo/encoder/{key}", 0.0), m[key])
        if out:
            out.update({f"xrpo/encoder/{k}": v for k, v in totals.items()})
        return out

    def _build(self) -> None:
        s = self.settings
        if s.use_icl:
            from xrpo_verl.icl import ICLCorpus

            self.corpus = ICLCorpus(
                self.icl_embedder(),
                per_prompt=s.xrpo.icl.per_prompt,
                keep=s.xrpo.icl.keep,
                index=s.xrpo.embedder.index,
                use_gpu=s.xrpo.embedder.use_gpu,
            )
            from xrpo_verl.icl_gate import ICLGate

            icl = s.xrpo.icl
            self.icl_gate = ICLGate(icl.gate, min_share=icl.gate_min_share, decay=icl.gate_decay)
        if s.use_novelty:
            from xrpo_verl.novelty import NoveltyMemory

            nov = s.extra.novelty
            self.novelty = NoveltyMemory(capacity=nov.memory_size, warmup=nov.warmup)
            if nov.placement == "before_norm":
                from xrpo_verl.novelty import RewardVarianceEMA

                self.reward_var = RewardVarianceEMA(rate=nov.var_ema_rate, coef=nov.var_coef)
        if s.use_prefix:
            from xrpo_verl.prefix import GuidedQueue, PrefixMemory

            self.prefix_memory = PrefixMemory(
                capacity=s.extra.prefix.max_prefixes_per_prompt, max_prompts=s.extra.prefix.memory_prompts
            )
            self.guided_queue = GuidedQueue(capacity=s.extra.prefix.queue_size)

    def build_prompt_selector(self, dataset_prompts: int, batch_prompts: int) -> None:
        """The prompt history of selection=history, sized by the dataset (called when it is loaded)."""
        p = self.settings.xrpo.planner
        if p.selection != "history":
            return
        from xrpo_verl.verl_adapters.selection import PromptSelector

        half_life = p.history_half_life or dataset_prompts / batch_prompts  # 0: one epoch at B a step
        self.prompt_selector = PromptSelector(dataset_prompts, half_life=half_life)

    def _components(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "novelty": self.novelty,
            "prefix_memory": self.prefix_memory,
            "guided_queue": self.guided_queue,
            "reward_var": self.reward_var,
            "icl_gate": self.icl_gate,
            "prompt_selector": self.prompt_selector,
        }

    # ------------------------------------------------------------------ (de)serialisation
    def state_dict(self) -> dict:
        return {
            "version": STATE_VERSION,
            "components": {k: (v.state_dict() if v is not None else None) for k, v in self._components().items()},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, d: dict) -> None:
        version = d.get("version")
        if version not in (2, 3, STATE_VERSION):
            raise ValueError(
                f"xrpo plugin state version {version!r} is not supported (expected 2, 3 or {STATE_VERSION})"
            )
        for name, component in self._components().items():
            saved = d["components"].get(name)
            if component is None:
                continue  # feature switched off since the checkpoint: its state is not needed
            if saved is None and version < ADDED_IN.get(name, 0):
                continue  # written before this component existed: it starts empty
            if saved is None:
                raise ValueError(
                    f"checkpoint has no state for {name!r}, but that feature is on now; resuming would not be exact"
                )
            component.load_state_dict(saved)
        self.counters = dict(d["counters"])

    def save(self, step_dir: str) -> str:
        """Write atomically to `{step_dir}/xrpo/state.pkl`; returns the path."""
        folder = os.path.join(step_dir, STATE_DIR)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, STATE_FILE)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(self.state_dict(), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
        return path

    def load(self, step_dir: str) -> None:
        path = os.path.join(step_dir, STATE_DIR, STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"resuming from {step_dir} but it has no xrpo plugin state ({path}); "
                "it was not written by trainer mode 'xrpo'"
            )
        with open(path, "rb") as f:
            self.load_state_dict(pickle.load(f))


def prune_orphan_states(checkpoint_dir: str, actor_dir: str = "actor") -> list[str]:
    """Remove the plugin state of every `global_step_N` whose actor checkpoint verl's retention removed.

    verl's `max_actor_ckpt_to_keep` deletes `global_step_N/actor`, not the folder, so a state saved
    beside it would stay for the whole run; run after each save, this makes the state follow verl's
    retention. Returns the state folders removed.
    """
    import shutil

    removed = []
    if not os.path.isdir(checkpoint_dir):
        return removed
    for name in os.listdir(checkpoint_dir):
        step_dir = os.path.join(checkpoint_dir, name)
        state_dir = os.path.join(step_dir, STATE_DIR)
        if (
            name.startswith("global_step_")
            and os.path.isdir(state_dir)
            and not os.path.exists(os.path.join(step_dir, actor_dir))
        ):
            shutil.rmtree(state_dir, ignore_errors=True)
            removed.append(state_dir)
            if not os.listdir(step_dir):
                os.rmdir(step_dir)
    return removed


class _LazyEmbedder:
    """Loads the sentence encoder on the first `encode`, so start-up and state loading stay cheap, and
    counts what every `encode` costs (texts, calls, seconds) until `take_metrics` reads and resets it.

    The encoder may sit on the GPU of an FSDP rank and a vLLM replica (docs/algorithms.md, section 7),
    so its time and its CUDA peak are reported every step rather than inferred from the step's time.
    """

    def __init__(self, factory: Callable[[], Any], clock: Callable[[], float] = time.perf_counter):
        self._factory = factory
        self._clock = clock
        self._model = None
        self._used = False
        self._load_s: float | None = None
        self._reset()

    def _reset(self) -> None:
        self.texts, self.calls, self.seconds, self.cuda_peak_bytes = 0, 0, 0.0, 0

    @property
    def device(self) -> str | None:
        """The loaded encoder's device (None before the first encode)."""
        return None if self._model is None else str(getattr(self._model, "device", "cpu"))

    def encode(self, texts: list[str]):
        self._used = True
        if self._model is None:
            t0 = self._clock()
            self._model = self._factory()
            self._load_s = self._clock() - t0
        t0 = self._clock()
        out = self._model.encode(texts)
        self.seconds += self._clock() - t0
        self.calls += 1
        self.texts += len(texts)
        if self.device.startswith("cuda"):
            import torch

            self.cuda_peak_bytes = max(self.cuda_peak_bytes, torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
        return out

    def take_metrics(self) -> dict[str, float] | None:
        """texts, calls, seconds since the last call (then reset); device_is_cuda, batch_size and
        cuda_peak_gb once loaded, load_seconds on the call after the load; None if never used."""
        if not self._used:
            return None
        m = {"texts": float(self.texts), "calls": float(self.calls), "seconds": self.seconds}
        if self._model is not None:
            m["device_is_cuda"] = float(self.device.startswith("cuda"))
            batch = getattr(self._model, "batch_size", None)
            if batch is not None:
                m["batch_size"] = float(batch)
            if m["device_is_cuda"]:
                m["cuda_peak_gb"] = self.cuda_peak_bytes / 2**30
        if self._load_s is not None:
            m["load_seconds"], self._load_s = self._load_s, None
        self._reset()
        return m


def _default_embedder(cfg):
    from xrpo_verl.embeddings import get_embedder

    return get_embedder(cfg.model, device=cfg.device, batch_size=cfg.batch_size)
