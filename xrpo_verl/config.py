"""Typed configuration for the XRPO and ExTra components.

One dataclass per component. Every field has a type, a default and one help string giving the
paper symbol, the unit and the provenance of the default:

- [P] the paper, [R] a public review quoting the paper, [C] the official code (ExTra),
- [I] our own choice where no source exists; docs/algorithms.md gives each one's reason.

Choices between formulas are `Literal` fields. `from_dict` rejects unknown keys (nested too) and
`__post_init__` checks ranges, so a misspelt option is an error, never a silent default.

`python -m xrpo_verl.config_reference` prints the Markdown field reference (docs/config.md) of
these and of the other settings written in the same style (reward kwargs, CPU runs).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

C = TypeVar("C", bound="Config")


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None) -> Any:
    """A dataclass field with its one help line; `factory` for a default computed per instance."""
    if not help:
        raise ValueError("every option needs its help line")
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    if isinstance(default, Config):
        return field(default_factory=lambda: type(default)(), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def check_range(
    name: str,
    value: float,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> None:
    """Raise ValueError naming `name` when `value` is outside [lo, hi] (open ends if asked)."""
    bad = (lo is not None and (value <= lo if lo_open else value < lo)) or (
        hi is not None and (value >= hi if hi_open else value > hi)
    )
    if bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else lo
        hi_s = "inf" if hi is None else hi
        raise ValueError(f"{name} = {value!r} is out of range; allowed {left}{lo_s}, {hi_s}{right}")


_SCALAR_TYPES: dict[Any, tuple[type, ...]] = {
    bool: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
    int | None: (int, type(None)),
    str | None: (str, type(None)),
}


class Config:
    """Shared behaviour: Literal checks, `from_dict` with unknown-key errors, `to_dict`."""

    def _check_fields(self) -> None:
        """Check Literal choices and scalar types (bool is not accepted as a number)."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            hint = hints[f.name]
            value = getattr(self, f.name)
            allowed_types = _SCALAR_TYPES.get(hint)
            if allowed_types is not None and (
                not isinstance(value, allowed_types) or (hint is not bool and isinstance(value, bool))
            ):
                raise ValueError(
                    f"{type(self).__name__}.{f.name} = {value!r} has type {type(value).__name__}; "
                    f"expected {_type_name(hint)}"
                )
            if isinstance(hint, type) and issubclass(hint, Config) and not isinstance(value, hint):
                raise ValueError(
                    f"{type(self).__name__}.{f.name} must be a {hint.__name__} "
                    f"(use from_dict for mappings), got {type(value).__name__}"
                )
            if typing.get_origin(hint) is Literal:
                allowed = typing.get_args(hint)
                if value not in allowed:
                    raise ValueError(
                        f"{type(self).__name__}.{f.name} = {value!r} is not an allowed value; "
                        f"choose one of {list(allowed)}"
                    )

    @classmethod
    def from_dict(cls: type[C], d: Mapping[str, Any] | None) -> C:
        """Build from a (possibly nested) mapping; unknown keys raise ValueError naming them."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__}.from_dict expects a mapping, got {type(d).__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(known)}")
        kwargs: dict[str, Any] = {}
        for key, value in d.items():
            sub = hints[key]
            if isinstance(sub, type) and issubclass(sub, Config):
                try:
                    kwargs[key] = value if isinstance(value, sub) else sub.from_dict(value)
                except ValueError as e:
                    raise ValueError(f"{cls.__name__}.{key}: {e}") from None
            elif isinstance(value, list) and typing.get_origin(sub) is tuple:
                kwargs[key] = tuple(value)  # YAML and Hydra give lists; the fields are tuples
            else:
                kwargs[key] = value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict; `from_dict(to_dict())` round-trips."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclass
class PlannerConfig(Config):
    """Hierarchical rollout planner (XRPO §2.2)."""

    enable: bool = option(True, "Use the phased planner; off means a fixed n_avg rollouts per prompt (plain GRPO). [I]")
    n_base: int = option(8, "Phase-0 rollouts per prompt, before any priority is known. [I]")
    n_avg: int = option(16, "Average rollouts per prompt per step; total budget is B*n_avg (compute-matched GRPO). [I]")
    rounds: int = option(2, "R, dynamic rounds after the base phase (3 phases in total). [R]")
    n_max: int = option(32, "Cap on rollouts for one prompt in one step, n_q <= n_max. [I]")
    alpha: float = option(0.05, "alpha, Student-t confidence level of h_q(n) = t_{1-alpha/2,n-1} s_q/sqrt(n). [I/3P]")
    lam: float = option(
        0.03,
        "lambda, exploration-bonus coefficient in phi_q; T, n_q count this step's rollouts. [I] (docs/algorithms.md)",
    )
    bonus_form: Literal["sqrt", "inverse"] = option(
        "sqrt", "phi_q form: sqrt = lambda*sqrt(ln(1+T)/n_q) (UCB1-shaped), inverse = lambda*ln(1+T)/n_q. [3P]"
    )
    allocation: Literal["priority", "uniform"] = option(
        "priority",
        "How a round splits its budget: by Pi_q (XRPO), or evenly (the paper's ICL-without-planner ablation). [I]",
    )
    shrink_steps: int = option(1, "k in Delta_q = h_q(n_q) - h_q(n_q+k); 1 is the one-step form. [3P]")
    smoothed_std: bool = option(
        False, "Replace s_q by sqrt(p(1-p)), p = (sum r + 0.5)/(n+1), so all-fail != all-pass. Not from the paper. [I]"
    )
    fail_floor: int = option(
        0,
        "f, rollouts a prompt with no success yet this step gets before Pi_q splits the rest of a round; "
        "0 = off (the paper). n_avg keeps GRPO's fresh rollouts on hard prompts. [I] (docs/algorithms.md)",
    )
    schedule: Literal["auto", "phased", "streaming"] = option(
        "auto",
        "phased: each round waits for every rollout of the last (the paper); streaming: a prompt's next round "
        "is decided once its own rollouts are back, for engines with continuous batching; auto: streaming on "
        "rollout.name vllm or sglang, phased otherwise (hf), said in one log line at start-up. [I]",
    )
    selection: Literal["batch", "history", "pilot_commit"] = option(
        "batch",
        "Which prompts a step trains: batch = the dataloader's B; history = the B of C*B candidates whose groups are "
        "most likely mixed, I_q(n) from each prompt's discounted pass record (planner.py), with the rounds on or "
        "off; pilot_commit = Pilot-Commit, the baseline (planner off). [I] (docs/algorithms.md, prompt selection)",
    )
    candidates: int = option(3, "C, candidate prompts fetched per trained prompt with selection=history. [I]")
    history_half_life: float = option(
        0.0, "Steps after which a visit's record weighs half; 0 = one epoch of the dataset at B prompts a step. [I]"
    )
    pilot_rollouts: int = option(
        4, "k_e, Pilot-Commit's pilot rollouts per prompt; a passed prompt gets rollout.n - k_e more. [C]"
    )
    pilot_lower: float = option(0.25, "Pilot-Commit: a pilot success rate below this is too hard. [C]")
    pilot_upper: float = option(0.25, "Pilot-Commit: a pilot success rate above 1 - this is too easy. [C]")
    pilot_max_rounds: int = option(10, "Pilot-Commit: most pilot batches a step before it stops with an error. [C]")

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("PlannerConfig.n_base", self.n_base, lo=1)
        check_range("PlannerConfig.rounds", self.rounds, lo=0)
        check_range("PlannerConfig.alpha", self.alpha, lo=0, hi=1, lo_open=True, hi_open=True)
        check_range("PlannerConfig.lam", self.lam, lo=0)
        check_range("PlannerConfig.shrink_steps", self.shrink_steps, lo=1)
        check_range("PlannerConfig.fail_floor", self.fail_floor, lo=0)
        check_range("PlannerConfig.candidates", self.candidates, lo=1)
        check_range("PlannerConfig.history_half_life", self.history_half_life, lo=0)
        check_range("PlannerConfig.pilot_rollouts", self.pilot_rollouts, lo=1)
        check_range("PlannerConfig.pilot_lower", self.pilot_lower, lo=0, hi=1)
        check_range("PlannerConfig.pilot_upper", self.pilot_upper, lo=0, hi=1)
        check_range("PlannerConfig.pilot_max_rounds", self.pilot_max_rounds, lo=1)
        if self.pilot_lower > 1 - self.pilot_upper:
            raise ValueError(
                f"PlannerConfig needs pilot_lower <= 1 - pilot_upper, got {self.pilot_lower} and {self.pilot_upper}"
            )
        if not self.n_base <= self.n_avg <= self.n_max:
            raise ValueError(
                f"PlannerConfig needs n_base <= n_avg <= n_max, got n_base={self.n_base}, "
                f"n_avg={self.n_avg}, n_max={self.n_max}"
            )
        if self.fail_floor > self.n_max:
            raise ValueError(f"PlannerConfig.fail_floor = {self.fail_floor} exceeds n_max = {self.n_max}")
        if self.rounds == 0 and self.n_avg != self.n_base:
            raise ValueError(f"PlannerConfig.rounds = 0 leaves n_avg - n_base = {self.n_avg - self.n_base} unspent")


@dataclass
class SharpeningConfig(Config):
    """Novelty-guided advantage sharpening (XRPO §2.4)."""

    enable: bool = option(True, "Apply A+ = A + min(max(lambda_nov(1-eta), 0), kappa A) to correct responses. [P]")
    coef: float = option(2.5, "lambda_novelty, slope of the bonus in (1 - eta). [R]")
    cap_frac: float = option(0.5, "kappa_clip, the bonus is at most kappa*A (at most +50% by default). [R]")

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("SharpeningConfig.coef", self.coef, lo=0)
        check_range("SharpeningConfig.cap_frac", self.cap_frac, lo=0)


@dataclass
class ICLConfig(Config):
    """ICL seeding of all-fail prompts from a corpus of verified successes (XRPO §2.3)."""

    enable: bool = option(True, "Re-prompt all-fail prompts with retrieved solved examples. [P]")
    k: int = option(2, "K, examples per ICL prompt. [R]")
    min_similarity: float = option(0.0, "tau_icl, minimum cosine similarity of a retrieved prompt. [I]")
    max_similarity: float = option(
        0.98, "Ceiling on retrieval similarity: near-duplicates of the query (its answer) are never shown. [I]"
    )
    per_prompt: int = option(1, "m, successes kept per training prompt in the corpus. [I]")
    keep: Literal["recent", "shortest"] = option(
        "recent", "Which m successes a prompt keeps: most recent or shortest. [I]"
    )
    max_example_tokens: int = option(
        1024,
        "L_ex, longest example solution in tokens; longer ones are never cut (answer kept), shown or stored. [I]",
    )
    max_prompt_tokens: int | None = option(
        None, "Cap on the whole ICL prompt in tokens; None means the trainer's max_prompt_length. [I]"
    )
    mode: Literal["with_icl", "strip_icl"] = option(
        "with_icl",
        "Train ICL rows with the ICL context (on-policy) or on the bare prompt (strip_icl: off-policy; pair it with "
        "algorithm.rollout_correction.rollout_is=sequence for a truncated IS weight, docs/algorithms.md). [I]",
    )
    gate: Literal["earned", "always"] = option(
        "earned",
        "earned: an all-fail prompt gets ICL as often as ICL beat zero-shot resampling on all-fail prompts "
        "(xrpo_verl/icl_gate.py); always: every one does (the paper). [I]",
    )
    gate_min_share: float = option(0.1, "m, the least share of all-fail prompts either arm (ICL, zero-shot) keeps. [I]")
    gate_decay: float = option(0.9, "gamma, per-step decay of the gate's success counts, so they follow the model. [I]")

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("ICLConfig.k", self.k, lo=1)
        check_range("ICLConfig.gate_min_share", self.gate_min_share, lo=0, hi=0.5)
        check_range("ICLConfig.gate_decay", self.gate_decay, lo=0, hi=1, lo_open=True)
        check_range("ICLConfig.min_similarity", self.min_similarity, lo=-1, hi=1)
        check_range("ICLConfig.max_similarity", self.max_similarity, lo=-1, hi=1)
        if self.max_similarity < self.min_similarity:
            raise ValueError(
                f"ICLConfig.max_similarity = {self.max_similarity} is below min_similarity = {self.min_similarity}"
            )
        check_range("ICLConfig.per_prompt", self.per_prompt, lo=1)
        check_range("ICLConfig.max_example_tokens", self.max_example_tokens, lo=1)
        if self.max_prompt_tokens is not None:
            check_range("ICLConfig.max_prompt_tokens", self.max_prompt_tokens, lo=1)


@dataclass
class NoveltyBonusConfig(Config):
    """Correctness-gated embedding novelty bonus (ExTra §3.1)."""

    enable: bool = option(True, "Add alpha * 1[R>0] * (1 - max cos) to correct responses. [P]")
    scale: float = option(
        0.01, "alpha, novelty scale; 0.01 is the released script's value for before_norm (docs/algorithms.md). [C]"
    )
    memory_size: int = option(16, "|Phi(x)|, response embeddings kept per prompt (ring buffer). [C]")
    warmup: int = option(
        1, "Novelty is 0 while memory + this step's siblings hold fewer embeddings; 1 = from the first visit. [I]"
    )
    placement: Literal["after_norm", "before_norm"] = option(
        "before_norm",
        "before_norm: shape R by alpha*g*nov/max nov, then normalise (released code and script, option A); "
        "after_norm: A = GRPO(R) + alpha*nov (paper, option B; needs alpha ~ 1 to matter). [C]/[P]",
    )
    tail_tokens: int = option(
        512, "Decode the last this-many response tokens; the encoder then keeps the end that fits its window. [C]"
    )
    var_coef: float = option(1.0, "before_norm only: lambda in the gate g = exp(-lambda * EMA reward variance). [C]")
    var_ema_rate: float = option(0.1, "before_norm only: EMA rate of the per-prompt group reward variance. [C]")

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("NoveltyBonusConfig.scale", self.scale, lo=0)
        check_range("NoveltyBonusConfig.memory_size", self.memory_size, lo=1)
        check_range("NoveltyBonusConfig.warmup", self.warmup, lo=1, hi=self.memory_size)
        check_range("NoveltyBonusConfig.tail_tokens", self.tail_tokens, lo=1)
        check_range("NoveltyBonusConfig.var_coef", self.var_coef, lo=0)
        check_range("NoveltyBonusConfig.var_ema_rate", self.var_ema_rate, lo=0, hi=1, lo_open=True)


@dataclass
class PrefixConfig(Config):
    """Entropy-guided prefix regeneration for hard prompts (ExTra §3.2)."""

    enable: bool = option(True, "Queue low-entropy prefixes of hard prompts and inject them as guided prompts. [P]")
    hard_threshold: Literal["all_fail", "at_most_one"] = option(
        "all_fail",
        "Hard prompt: all rollouts fail (paper) or at most one succeeds, pass rate <= 1/n (released code). [P]/[C]",
    )
    min_gap: int = option(
        32, "A newline boundary after the first is kept only if >= this many tokens after the last kept one. [C]"
    )
    max_candidates: int = option(
        15, "K: keep at most K step boundaries per response, b[floor(i*n/K)], after the length filter. [C]"
    )
    tau: float = option(0.1, "tau, softmax temperature of the semantic smoothing W = softmax(cos/tau). [C]")
    max_prefixes_per_prompt: int = option(128, "Prefix memory ring buffer per original prompt. [C]")
    embed_tail_tokens: int = option(
        512,
        "A prefix is embedded from its last this many policy tokens, decoded: the encoder keeps only the end "
        "of a text that fits its window, so the rest is never decoded (as the novelty bonus's tail_tokens). [I]",
    )
    memory_prompts: int = option(
        1024,
        "Prompts the prefix memory holds at most; the one hard least recently is dropped first (the released "
        "code keeps every prompt ever hard, which grows with the run). [I]",
    )
    queue_size: int = option(512, "Guided-prompt FIFO capacity; the newest entries are kept. [C-script]")
    per_step: int = option(16, "Guided prompts injected per step (they replace the batch's tail rows). [C-script]")
    warmup_steps: int = option(
        30, "No prefix memory, queueing or injection up to this global step, inclusive. [C-script]"
    )
    n_suffix: int = option(8, "Suffix rollouts per guided prompt (its own GRPO group). [C]")
    max_prefix_frac: float = option(
        0.5,
        "Longest prefix as a fraction of max_response_length, applied before thinning; 1.0 = no cap, the "
        "released code's boundaries except a lone one at the response's end. [I]",
    )

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("PrefixConfig.min_gap", self.min_gap, lo=1)
        check_range("PrefixConfig.max_candidates", self.max_candidates, lo=1)
        check_range("PrefixConfig.tau", self.tau, lo=0, lo_open=True)
        check_range("PrefixConfig.max_prefixes_per_prompt", self.max_prefixes_per_prompt, lo=1)
        check_range("PrefixConfig.memory_prompts", self.memory_prompts, lo=1)
        check_range("PrefixConfig.embed_tail_tokens", self.embed_tail_tokens, lo=1)
        check_range("PrefixConfig.queue_size", self.queue_size, lo=1)
        check_range("PrefixConfig.per_step", self.per_step, lo=0)
        check_range("PrefixConfig.warmup_steps", self.warmup_steps, lo=0)
        check_range("PrefixConfig.n_suffix", self.n_suffix, lo=1)
        check_range("PrefixConfig.max_prefix_frac", self.max_prefix_frac, lo=0, hi=1, lo_open=True)


@dataclass
class EmbedderConfig(Config):
    """Sentence encoder (ICL retrieval, novelty, prefixes) and the ICL corpus's FAISS index.

    The novelty and prefix memories hold at most a few vectors per prompt and compare them
    directly, so `index` and `use_gpu` matter for algorithm.xrpo.embedder only.
    """

    model: str | None = option(
        None,
        "sentence-transformers name or path; None is the bundled all-MiniLM-L6-v2 (the paper uses "
        "Qwen3-Embedding-8B for ICL). [C]/[R]",
    )
    device: str | None = option(
        None,
        "Torch device for the encoder, checked at start-up (a GPU the trainer cannot see is an error); None picks "
        "cuda when available, else cpu, and logs it. The GPU recipes set cuda (docs/algorithms.md, section 7). [I]",
    )
    batch_size: int = option(256, "Encoder batch size. [I]")
    index: Literal["flat", "ivf", "hnsw"] = option(
        "flat",
        "FAISS index of the ICL corpus: exact inner product, or IVF/HNSW for a corpus too large to search "
        "exactly (where they pay: benchmarks/RESULTS.md, FAISS scaling). [I]",
    )
    use_gpu: Literal["auto", "never", "always"] = option(
        "auto", "Put the ICL corpus's FAISS index on GPU: auto when faiss.get_num_gpus() > 0. [I]"
    )

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("EmbedderConfig.batch_size", self.batch_size, lo=1)


@dataclass
class XRPOConfig(Config):
    """XRPO: planner, ICL seeding and novelty sharpening."""

    planner: PlannerConfig = option(PlannerConfig(), "Rollout planner (XRPO §2.2).")
    sharpening: SharpeningConfig = option(SharpeningConfig(), "Advantage sharpening (XRPO §2.4).")
    icl: ICLConfig = option(ICLConfig(), "ICL seeding (XRPO §2.3).")
    embedder: EmbedderConfig = option(EmbedderConfig(), "Encoder for ICL retrieval.")

    def __post_init__(self) -> None:
        self._check_fields()


@dataclass
class ExTraConfig(Config):
    """ExTra: embedding novelty bonus and entropy-guided prefix regeneration."""

    novelty: NoveltyBonusConfig = option(NoveltyBonusConfig(), "Novelty bonus (ExTra §3.1).")
    prefix: PrefixConfig = option(PrefixConfig(), "Prefix regeneration (ExTra §3.2).")
    embedder: EmbedderConfig = option(EmbedderConfig(), "Encoder for response tails and prefixes.")

    def __post_init__(self) -> None:
        self._check_fields()


ALL_CONFIGS: tuple[type[Config], ...] = (
    XRPOConfig,
    PlannerConfig,
    SharpeningConfig,
    ICLConfig,
    ExTraConfig,
    NoveltyBonusConfig,
    PrefixConfig,
    EmbedderConfig,
)


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(hint))
    if isinstance(hint, type):
        return hint.__name__
    return str(hint).replace("typing.", "").replace("|", "\\|")


def markdown_docs(sections: list[tuple[str, str, tuple[type[Config], ...]]]) -> str:
    """Markdown reference of every field of the given config classes, from their help strings.

    Args:
        sections: (title, where the classes are set, the classes) per section.
    """
    lines = [
        "# Configuration reference",
        "",
        "Generated by `python -m xrpo_verl.config_reference` from the help text of each dataclass.",
        "Tags: [P] paper, [R] review quoting the paper, [C] official code, [S] project summary, "
        "[3P] third-party, [I] our choice.",
        "",
    ]
    for title, where, classes in sections:
        lines += [f"# {title}", "", where, ""]
        for cls in classes:
            hints = typing.get_type_hints(cls)
            lines += [
                f"## `{cls.__name__}`",
                "",
                (cls.__doc__ or "").strip(),
                "",
                "| field | type | default | meaning |",
                "|---|---|---|---|",
            ]
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                hint = hints[f.name]
                if isinstance(hint, type) and issubclass(hint, Config):
                    default = f"`{hint.__name__}()`"
                elif f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
                    default = "computed"
                elif f.default is dataclasses.MISSING:
                    default = "required"
                else:
                    default = f"`{f.default!r}`"
                help_ = f.metadata["help"].replace("|", "/")
                lines.append(f"| `{f.name}` | {_type_name(hint)} | {default} | {help_} |")
            lines.append("")
    return "\n".join(lines)
