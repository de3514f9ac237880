"""The learning setting: a model, task and trainer settings on which plain GRPO measurably learns
on CPU (the name is the setting's, not a learning procedure).

Used by `make demo`, the CI learning test (tests/e2e/test_grpo.py) and
studies/convergence_study.py, so all three run the same thing. The task is multi-digit
column addition with a scratchpad (`xrpo_verl.lab.addition`); the tiny model's warm-up teaches
the procedure only partly, so sampled answers are right on some problems, never on others, and
what RL fixes in a column fact carries over to held-out sums it never trained on. Why these
numbers, and what did not learn: benchmarks/RESULTS.md ("A CPU task on which GRPO learns").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xrpo_verl.config import option
from xrpo_verl.lab import addition, launch, tiny_model
from xrpo_verl.lab.setting import Setting

# The model: the default 5M architecture, warmed up on 1-3 digit sums for fewer steps than it
# would take to learn them, so that RL has something left to learn.
MODEL = tiny_model.TinyModelConfig(task="addition", sft_steps=200, sft_schedule_steps=600)


# The defaults are `Setting`'s: the setting measured in benchmarks/RESULTS.md, where a 1e-4
# learning rate did not learn; the response budget holds a 3-digit sum's scratchpad.
@dataclass(frozen=True)
class LearningSetting(Setting, model=lambda: MODEL):
    """Sizes and trainer settings of a learning run (defaults: the setting measured in RESULTS.md)."""

    n_train: int = option(4096, "Training problems (more than steps x prompts: each is seen about once). [I]")
    n_eval: int = option(
        400, "Problems of the before/after measurement: the held-out ones and more, none in the training set. [I]"
    )

    def reward_overrides(self) -> tuple[str, ...]:
        """The reward of this task: the in-process arithmetic scorer."""
        return launch.ARITH_REWARD


def prepare(out_dir: str | Path, setting: LearningSetting = LearningSetting()) -> tuple[Path, Path, Path]:
    """Build (or reuse) the model and write the data; returns (model_dir, train.parquet, heldout.parquet)."""
    model_dir = tiny_model.build(setting.model)
    train, heldout = addition.write_parquets(
        Path(out_dir) / "data", setting.n_train, setting.n_heldout, setting.data_seed, setting.model.addition
    )
    return model_dir, train, heldout


def heldout_problems(setting: LearningSetting = LearningSetting(), n: int | None = None) -> list[addition.Sum]:
    """The held-out sums, extended to `n` with more sums that are not in the training set either.

    The final before/after measurement uses more problems than verl's in-run validation, because
    greedy answers are 0/1 per problem, so the standard error of a greedy change shrinks only as
    the square root of the number of problems.
    """
    train, heldout = addition.train_and_heldout(
        setting.n_train, setting.n_heldout, setting.data_seed, setting.model.addition
    )
    n = setting.n_heldout if n is None else n
    if n <= len(heldout):
        return heldout[:n]
    seen = {(min(p.a, p.b), max(p.a, p.b)) for p in train + heldout}
    more, seed = [], setting.data_seed + 2
    while len(heldout) + len(more) < n:
        for p in addition.sample_problems(4 * n, seed, setting.model.addition):
            key = (min(p.a, p.b), max(p.a, p.b))
            if key not in seen:
                seen.add(key)
                more.append(p)
        seed += 1000
    return heldout + more[: n - len(heldout)]


def cpu_run(out_dir: str | Path, setting: LearningSetting = LearningSetting(), save_freq: int = -1) -> launch.CpuRun:
    """The `CpuRun` of this setting under `out_dir` (model and data prepared on the way)."""
    model_dir, train, heldout = prepare(out_dir, setting)
    return launch.CpuRun.from_setting(setting, model_dir, train, heldout, out_dir, save_freq)


def validation_overrides(setting: LearningSetting, every: int, greedy: bool = False) -> list[str]:
    """Validate before training and every `every` steps: k samples at T=1 (mean@k), or greedy."""
    sampling = (
        ["actor_rollout_ref.rollout.val_kwargs.do_sample=False", "actor_rollout_ref.rollout.val_kwargs.n=1"]
        if greedy
        else [
            "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            f"actor_rollout_ref.rollout.val_kwargs.n={setting.val_samples}",
        ]
    )
    return ["trainer.val_before_train=True", f"trainer.test_freq={every}", *sampling]


@dataclass(frozen=True)
class Accuracy:
    """Held-out accuracy: mean over problems of each problem's pass rate, and its standard error."""

    mean: float
    se: float
    per_problem: tuple[float, ...]

    @property
    def never(self) -> int:
        return sum(p == 0 for p in self.per_problem)

    @property
    def always(self) -> int:
        return sum(p == 1 for p in self.per_problem)

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.se:.3f}"


def accuracy(pass_rates: list[float]) -> Accuracy:
    """Mean and standard error over problems (the samples of one problem are not independent, so
    the SE is taken over problems' pass rates, not over all samples)."""
    import statistics

    n = len(pass_rates)
    if n < 2:
        raise ValueError(f"need at least 2 problems for a standard error, got {n}")
    return Accuracy(statistics.fmean(pass_rates), statistics.stdev(pass_rates) / n**0.5, tuple(pass_rates))


def paired_change(before: Sequence[float], after: Sequence[float]) -> tuple[float, float]:
    """Mean change of per-problem pass rates and its standard error, the same problems before and
    after (pairing removes the spread of problem difficulty from the SE)."""
    diffs = accuracy([b - a for a, b in zip(before, after, strict=True)])
    return diffs.mean, diffs.se


def load_actor(model_dir: str | Path, checkpoint: str | Path | None = None):
    """The model of `model_dir`, with the weights of a verl actor checkpoint directory
    (`.../global_step_N/actor`, FSDP2 state dict of one rank) if given."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if checkpoint is not None:
        import logging

        # unpickling the FSDP2 DTensors warns that no process group exists yet: none is needed here
        logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)
        state = torch.load(Path(checkpoint) / "model_world_size_1_rank_0.pt", weights_only=False, map_location="cpu")
        state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embedding
            raise ValueError(f"checkpoint {checkpoint} does not fit {model_dir}: {missing=} {unexpected=}")
        model.tie_weights()
    return model.eval()


def _sample(model, tokenizer, problems, config, reps: int, chunk: int) -> list[list[str]]:
    """`reps` responses per problem under `config`, in batches of `chunk` problems."""
    import torch

    texts: list[list[str]] = []
    for at in range(0, len(problems), chunk):  # past a size, a padded batch costs more than it shares
        part = problems[at : at + chunk]
        enc = tokenizer(
            [tiny_model.chat_prompt(p.question) for p in part],
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        width, found = enc["input_ids"].shape[1], [[] for _ in part]
        for _ in range(reps):
            with torch.no_grad():
                ids = model.generate(**enc, generation_config=config)
            for i, text in enumerate(tokenizer.batch_decode(ids[:, width:], skip_special_tokens=True)):
                found[i].append(text)
        texts += found
    return texts


def _generation_configs(tokenizer, max_new_tokens: int):
    from transformers import GenerationConfig

    common = dict(
        max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return GenerationConfig(do_sample=False, **common), GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, **common
    )


def _solved(problem, text: str) -> float:
    from xrpo_verl.lab.arith import compute_score

    return compute_score(addition.DATA_SOURCE, text, str(problem.answer))["score"]


def heldout_accuracy(
    model, tokenizer, problems, k: int, max_new_tokens: int, seed: int = 0, chunk: int = 100, greedy: bool = True
) -> dict[str, Accuracy]:
    """`{"greedy": ..., "mean@k": ...}` on `problems`: greedy answers (unless `greedy` is False), and
    k samples at T=1 per problem. Greedy draws no random numbers, so mean@k is the same either way."""
    import torch

    greedy_config, sampled_config = _generation_configs(tokenizer, max_new_tokens)
    out = {}
    torch.manual_seed(seed)
    for name, config, reps in (("greedy", greedy_config, 1), (f"mean@{k}", sampled_config, k)):
        if name == "greedy" and not greedy:
            continue
        texts = _sample(model, tokenizer, problems, config, reps, chunk)
        out[name] = accuracy([sum(_solved(p, t) for t in ts) / reps for p, ts in zip(problems, texts, strict=True)])
    return out


def breadth(problems, texts: Sequence[Sequence[str]], k: int, embed=None) -> dict[str, Accuracy]:
    """What k samples per problem cover: mean@k, pass@k (a problem solved by any of its k
    samples), Self-BLEU of the k texts (lower = more diverse) and, with `embed(texts) -> (k, d)`,
    their LogDet (higher = more diverse); and how the correct samples split between the solution
    styles (`addition.style_of`): the share of problems whose correct samples use both styles, and
    the entropy of the styles' shares of all correct samples (bits; 1 = two styles equally). Each an
    `Accuracy`, a mean over problems and its SE; the entropy is one figure of the run (SE NaN)."""
    import math

    from xrpo_verl.metrics import logdet_diversity, self_bleu

    if any(len(ts) != k for ts in texts):
        raise ValueError(f"breadth needs exactly k = {k} texts per problem")
    rates, solved, bleus, logdets, both, style_counts = [], [], [], [], [], []
    for problem, ts in zip(problems, texts, strict=True):
        correct = [t for t in ts if _solved(problem, t) >= 1.0]
        rates.append(len(correct) / k)
        solved.append(float(bool(correct)))
        bleus.append(self_bleu(list(ts)))
        if embed is not None:
            logdets.append(logdet_diversity(embed(list(ts))))
        styles = [addition.style_of(t) for t in correct]
        both.append(float(len({s for s in styles if s is not None}) >= 2))
        style_counts.append(styles)
    counts = [sum(s == name for ss in style_counts for s in ss) for name in addition.STYLES]
    shares = [c / sum(counts) for c in counts if c] if sum(counts) else []
    entropy = 0.0 - sum(p * math.log2(p) for p in shares)
    out = {
        f"mean@{k}": accuracy(rates),
        f"pass@{k}": accuracy(solved),
        "self_bleu": accuracy(bleus),
        "both_styles": accuracy(both),
        "style_entropy": Accuracy(entropy, float("nan"), ()),
    }
    if logdets:
        out["logdet"] = accuracy(logdets)
    return out


def heldout_breadth(model, tokenizer, problems, k: int, max_new_tokens: int, seed: int = 0, embed=None, chunk=100):
    """`breadth` of k samples at T=1 per problem."""
    import torch

    _, sampled_config = _generation_configs(tokenizer, max_new_tokens)
    torch.manual_seed(seed)
    return breadth(problems, _sample(model, tokenizer, problems, sampled_config, k, chunk), k, embed)


def measure(model_dir: str | Path, checkpoint: str | Path | None, setting: LearningSetting) -> dict[str, Accuracy]:
    """Held-out accuracy on `setting.n_eval` sums: greedy, and the mean of k samples at T=1."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    heldout = heldout_problems(setting, setting.n_eval)
    model = load_actor(model_dir, checkpoint)
    return heldout_accuracy(model, tokenizer, heldout, setting.val_samples, setting.max_response_length)
