"""Premise probes: does a model have what each exploration mechanism is built on? Inference only.

Each probe samples the initial policy at T = 1 and measures one premise (issue 24), with the same
code for the tiny testbed model and a real LLM. q ranges over problems, k is the samples a
problem gets, c_q the correct ones among them.

P1 spread (the planner needs mixed groups, and a hard tail that can be learnt):
    p_q = c_q / k on held-out problems;  never = #{q: p_q = 0} / Q,  always = #{q: p_q = 1} / Q.
P2 in-context learning (XRPO's ICL seeding), on F = the training prompts with c_q = 0:
    ICL arm: k samples of the user turn `icl.icl_decision` writes for q from an `icl.ICLCorpus` of
    the model's own verified successes of other training prompts (the trainer's code path);
    control: k fresh zero-shot samples of q (fresh, so unbiased by F's selection).
    rate_arm = mean_{q in F} c_q^arm / k;  flips_arm = #{q in F: c_q^arm > 0};
    d_q = c_q^icl / k - c_q^zs / k, reported as mean(d) ± SE(d) over q.
P3 styles that matter (ExTra's novelty bonus, pass@k), given `style(text) -> name | None`:
    shares s_j = correct samples in style j / correct samples;  H = -sum_j s_j log2 s_j (bits);
    only_j = #{q: solved in style j and in no other};
    collapse: with p_{q,j} = correct / samples of q in style j (q with no sample in j count 0),
    pass@k of the mix = mean_q [1 - C(k_q - c_q, k) / C(k_q, k)] (the unbiased estimator), and of
    a policy that kept style j only: mean_q [1 - (1 - p_{q,j})^k]; cost = mix - max_j collapsed.
    1 - (1 - p)^k is concave, so from a few samples per style it comes out low and the cost high;
    where a style can be forced by a response prefix (`forced_pass_at_k`), k samples of each style
    measure it directly: collapsed_j = mean_q [any of q's k forced samples correct].
P5 hint reliance (HiLL, arXiv 2604.00698), on the ICL arm's verified successes y of P2:
    rel(y) = log pi(y | ICL prompt) - log pi(y | bare prompt), teacher-forced, per sequence and per
    token: how much less likely the hinted success is without the examples. A success that the bare
    prompt finds as likely (rel ~ 0) can teach the bare prompt; one it finds far less likely cannot,
    whether trained with the examples (`icl.mode=with_icl`) or on the bare prompt (`strip_icl`).
P4 prefixes worth keeping (ExTra's regeneration), on F: b* = ExTra's choice over q's k failed
    samples (`prefix.group_candidates` + `prefix.select_prefix`, MiniLM embeddings of the prefix
    texts, the recipe's settings); k continuations of prompt + b*, against P2's k fresh samples:
    rate_prefix vs rate_zs, d_q as in P2.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Sample:
    """One sampled response: its text, token ids (no EOS/padding) and per-token entropies H_t (nats)."""

    text: str
    token_ids: tuple[int, ...]
    entropies: tuple[float, ...]


@dataclass(frozen=True)
class Problem:
    """A prompt (the user turn), its id and how to score a response (1.0 = verified success)."""

    prompt_id: str
    user: str
    score: Callable[[str], float]


class Sampler:
    """k samples at T = 1 of a Hugging Face causal LM for each (user turn, response prefix).

    Args:
        render: user turn -> the model's prompt text (its chat template, generation prompt on).
        max_new_tokens: response budget; a prefix's tokens count against it.
        chunk: rows per `generate` call (prompts x k).
    """

    def __init__(self, model, tokenizer, render: Callable[[str], str], max_new_tokens: int, chunk: int = 256) -> None:
        self.model, self.tok, self.render = model, tokenizer, render
        self.max_new_tokens, self.chunk = max_new_tokens, chunk
        self.tok.padding_side = "left"
        if self.tok.pad_token is None:
            self.tok.pad_token = self.tok.eos_token
        self.end_ids = {i for i in (self.tok.eos_token_id, self.tok.pad_token_id) if i is not None}

    def sample(self, users: Sequence[str], k: int, prefixes: Sequence[str] | None = None) -> list[list[Sample]]:
        """For each user turn (and response prefix, continued by the samples), k samples."""
        import torch

        prefixes = list(prefixes) if prefixes is not None else [""] * len(users)
        if len(prefixes) != len(users):
            raise ValueError(f"{len(users)} user turns but {len(prefixes)} prefixes")
        per = max(1, self.chunk // k)
        out: list[list[Sample]] = []
        for at in range(0, len(users), per):
            texts = [self.render(u) + p for u, p in zip(users[at : at + per], prefixes[at : at + per])]
            enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            width = enc["input_ids"].shape[1]
            with torch.no_grad():
                gen = self.model.generate(
                    **enc,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=self.max_new_tokens,
                    num_return_sequences=k,
                    pad_token_id=self.tok.pad_token_id,
                    eos_token_id=self.tok.eos_token_id,
                    output_scores=True,
                    return_dict_in_generate=True,
                )
            entropy = torch.stack([_entropy(step) for step in gen.scores], dim=1)  # (rows, T), one step at a time
            for r in range(len(texts)):
                group = []
                for j in range(k):
                    row = r * k + j
                    ids = gen.sequences[row, width:].tolist()
                    n = next((i for i, t in enumerate(ids) if t in self.end_ids), len(ids))
                    text = self.tok.decode(ids[:n], skip_special_tokens=True)
                    group.append(Sample(text, tuple(ids[:n]), tuple(entropy[row, :n].tolist())))
                out.append(group)
        return out


def _entropy(logits):
    """H = -sum_v p_v log p_v over the last axis, from logits (-inf where a token is masked)."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)


def rates(problems: Sequence[Problem], groups: Sequence[Sequence[Sample]], prefixes: Sequence[str] | None = None):
    """Per problem, the share of its samples scored a verified success (1.0); a prefix is part of the
    scored response."""
    prefixes = prefixes or [""] * len(problems)
    return [
        sum(p.score(pre + s.text) >= 1.0 for s in g) / len(g)
        for p, g, pre in zip(problems, groups, prefixes, strict=True)
    ]


def mean_se(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 SE for fewer than 2 values)."""
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


@dataclass(frozen=True)
class Spread:
    """P1 over Q problems."""

    problems: int
    never: float
    always: float
    mean: float


def spread(pass_rates: Sequence[float]) -> Spread:
    """P1: shares of problems never and always solved in their k samples."""
    if not pass_rates:
        raise ValueError("spread needs at least one problem")
    q = len(pass_rates)
    return Spread(
        q, sum(r == 0 for r in pass_rates) / q, sum(r == 1 for r in pass_rates) / q, statistics.fmean(pass_rates)
    )


@dataclass(frozen=True)
class ArmComparison:
    """P2 or P4: an arm against fresh zero-shot samples on the same all-fail prompts."""

    prompts: int
    arm_rate: float
    control_rate: float
    arm_flips: int
    control_flips: int
    diff: float  # mean over prompts of (arm - control) pass rate
    diff_se: float


def compare_arms(arm: Sequence[float], control: Sequence[float]) -> ArmComparison:
    """Paired per prompt: pass rates of the arm and of the control."""
    if len(arm) != len(control):
        raise ValueError(f"{len(arm)} arm rates but {len(control)} control rates")
    d, se = mean_se([a - c for a, c in zip(arm, control)])
    return ArmComparison(
        len(arm),
        statistics.fmean(arm) if arm else float("nan"),
        statistics.fmean(control) if control else float("nan"),
        sum(a > 0 for a in arm),
        sum(c > 0 for c in control),
        d,
        se,
    )


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True)
class Styles:
    """P3 over Q problems."""

    shares: dict[str, float]  # among correct samples
    entropy_bits: float
    only: dict[str, int]  # problems solved in this style alone
    pass_at_k_mix: float
    pass_at_k_collapsed: dict[str, float]  # had the policy kept this style only
    k: int
    unclassified: int = 0  # correct samples of no known style
    per_problem: dict[str, list[float]] = field(default_factory=dict, repr=False)

    @property
    def collapse_cost(self) -> float:
        return self.pass_at_k_mix - max(self.pass_at_k_collapsed.values(), default=float("nan"))


def styles(problems: Sequence[Problem], groups: Sequence[Sequence[Sample]], style, k: int) -> Styles:
    """P3 from the samples of each problem; `style(text)` names a response's style or returns None."""
    names: list[str] = sorted({s for g in groups for x in g if (s := style(x.text)) is not None})
    correct_styles: Counter[str] = Counter()
    unclassified = 0
    only = dict.fromkeys(names, 0)
    per_problem: dict[str, list[float]] = {j: [] for j in names}
    mix = []
    for p, g in zip(problems, groups, strict=True):
        ok = [p.score(x.text) >= 1.0 for x in g]
        st = [style(x.text) for x in g]
        mix.append(pass_at_k(len(g), sum(ok), min(k, len(g))))
        solved_in = {s for s, o in zip(st, ok) if o and s is not None}
        for s, o in zip(st, ok):
            if o:
                if s is None:
                    unclassified += 1
                else:
                    correct_styles[s] += 1
        if len(solved_in) == 1:
            only[next(iter(solved_in))] += 1
        for j in names:
            tried = [o for s, o in zip(st, ok) if s == j]
            per_problem[j].append(sum(tried) / len(tried) if tried else 0.0)
    total = sum(correct_styles.values())
    shares = {j: correct_styles[j] / total if total else 0.0 for j in names}
    entropy = 0.0 - sum(s * math.log2(s) for s in shares.values() if s > 0)  # 0.0 -: no "-0.0"
    collapsed = {j: statistics.fmean(1 - (1 - r) ** k for r in per_problem[j]) for j in names}
    return Styles(shares, entropy, only, statistics.fmean(mix), collapsed, k, unclassified, per_problem)


def chosen_prefixes(
    groups: Sequence[Sequence[Sample]],
    newline_ids: set[int],
    decode: Callable[[list[int]], str],
    encode: Callable[[list[str]], np.ndarray],
    *,
    min_gap: int,
    max_candidates: int,
    max_len: int | None,
    tau: float,
) -> list[str | None]:
    """P4: for each failed group, the text of ExTra's lowest smoothed-entropy prefix (None: no candidate)."""
    from xrpo_verl import prefix

    out: list[str | None] = []
    for g in groups:
        cands = prefix.group_candidates(
            [list(s.token_ids) for s in g],
            [np.asarray(s.entropies) for s in g],
            newline_ids,
            min_gap=min_gap,
            max_candidates=max_candidates,
            max_len=max_len,
        )
        if not cands:
            out.append(None)
            continue
        texts = [decode(list(c.prefix_ids)) for c in cands]
        choice = prefix.select_prefix(np.array([c.score for c in cands]), encode(texts), tau=tau)
        out.append(texts[choice.index])
    return out


def forced_pass_at_k(forced_rates: Sequence[float]) -> float:
    """P3, forced: the share of problems with a correct sample among k samples forced into one style."""
    if not forced_rates:
        raise ValueError("forced_pass_at_k needs at least one problem")
    return sum(r > 0 for r in forced_rates) / len(forced_rates)


def response_logprobs(model, tok, prompts: Sequence[str], responses: Sequence[Sequence[int]], chunk: int = 64):
    """Teacher-forced sum of log pi(y_t | prompt, y_<t) over each response's tokens: (list of floats)."""
    import torch

    out: list[float] = []
    for at in range(0, len(prompts), chunk):
        rows, spans = [], []
        for text, resp in zip(prompts[at : at + chunk], responses[at : at + chunk], strict=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            rows.append(list(ids) + list(resp))
            spans.append((len(ids), len(resp)))
        width = max(len(r) for r in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        with torch.no_grad():
            logp = model(input_ids=input_ids, attention_mask=mask).logits.float().log_softmax(-1)
        for i, (start, n) in enumerate(spans):
            targets = input_ids[i, start : start + n]
            out.append(float(logp[i, start - 1 : start + n - 1].gather(-1, targets[:, None]).sum()))
    return out


@dataclass(frozen=True)
class Reliance:
    """P5 over the ICL arm's successes: log pi(y | ICL) - log pi(y | bare), mean ± SE."""

    successes: int
    seq_mean: float
    seq_se: float
    token_mean: float
    share_over_1_nat: float  # successes at least e times less likely without the examples


def hint_reliance(with_hint: Sequence[float], bare: Sequence[float], lengths: Sequence[int]) -> Reliance:
    """P5 from the teacher-forced log-likelihoods of each success with and without the examples."""
    d = [a - b for a, b in zip(with_hint, bare, strict=True)]
    if not d:
        return Reliance(0, 0.0, 0.0, 0.0, 0.0)
    mean, se = mean_se(d)
    return Reliance(len(d), mean, se, sum(d) / max(1, sum(lengths)), sum(x >= 1.0 for x in d) / len(d))
