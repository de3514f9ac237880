"""Tiny Qwen2 model (~5M parameters) for CPU runs: `python -m xrpo_verl.lab build`.

Builds, from nothing but a seed: a byte-level BPE tokenizer trained on generated arithmetic
(digits split one per token) with a ChatML chat template, a random-init Qwen2 causal LM, and a
short supervised warm-up on `a+b=?` -> `\\boxed{answer}` so that sampled answers are right often
enough for RL to have signal. The result is cached under `cache_root()/<key>` where the key
hashes the whole `TinyModelConfig`; the build runs in a child process with torch's CPU kernels
pinned (`PINNED_KERNELS`), which holds the weights alike on AVX2 and AVX-512 CPUs but not on one with
AMX. A model that studies share across machines is shipped instead (`SHIPPED`): its built files,
packed in the package's `assets/`, are unpacked into the cache and never trained again.
"""

import hashlib
import json
import lzma
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from xrpo_verl.lab import addition as addition_task
from xrpo_verl.lab import arith, code_task
from xrpo_verl.lab.arith import SOLUTION_FORMAT, ArithConfig, compute_score

TASKS = ("arith", "addition", "code")

PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# ChatML, the template family of Qwen2: verl applies it with add_generation_prompt=True.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
DONE_MARKER = "xrpo_tiny_model.json"
# CPUs differ in the vector width of torch's kernels (AVX2 or AVX-512, picked at run time), hence in
# the last bits of every sum; over a warm-up of hundreds of steps that grows into another model
# (benchmarks/RESULTS.md). The build pins the kernels, which gave the same weights on AVX2 and AVX-512
# machines but not on one with AMX (RESULTS.md, "The code model across CPUs"); the variables are
# read once, when torch and MKL load.
PINNED_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
}
ASSETS = Path(__file__).resolve().parent / "assets"
# Models shipped with the package, by cache key: the sha256 of their `model.safetensors`. Seeds of
# one study must train one model, and pinning the kernels does not make every CPU build the same
# one, so `build` unpacks these bytes (`shipped_archive`) where any other config trains. Add one
# with `python -m xrpo_verl.lab pack <built model dir>`.
SHIPPED = {
    # the premise testbed (`testbed.MODEL`), built on an AMX CPU: the model of the study's set C
    "89aa2aa22d39": "fb2c3cadd3cbd85b15f6a6ccdd593dc194b37fe74212ce7e9aed333014e5920a",
    # the code task with a hard tail (`code_rl.TAIL_MODEL`), built on an AMX CPU: issue 46's second task
    "4416e478b402": "3d247d48bd1e422fca828725d97d9eec4fb70205ad6cf57fe1827cfc198904f5",
}
# xz's LZMA2 with its coder keyed to a byte's place in a 4-byte float (the sign and exponent bytes
# of fp32 weights repeat, their low mantissa bytes do not): smaller than the preset alone, and any
# xz reads it.
PACK_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "lc": 2, "lp": 2, "pb": 2}]


@dataclass(frozen=True)
class TinyModelConfig:
    """Everything that determines the built model; its hash names the cache directory."""

    seed: int = 0
    """seed of the corpus, the weight init and the warm-up batches"""
    vocab_size: int = 384
    """BPE vocabulary size including special tokens (our choice: arithmetic text needs few merges)"""
    hidden_size: int = 320
    """Qwen2 hidden size d (320 with 4 layers gives ~5M parameters)"""
    num_layers: int = 4
    """number of transformer blocks"""
    num_heads: int = 4
    """attention heads (head dim = hidden_size / num_heads)"""
    num_kv_heads: int = 2
    """key/value heads (grouped-query attention, as in Qwen2)"""
    intermediate_size: int = 960
    """MLP width (3 x hidden_size)"""
    max_positions: int = 256
    """max_position_embeddings; CPU recipes use prompts <= 64 and responses <= 32 tokens"""
    sft_steps: int = 250
    """warm-up optimizer steps (our choice: enough for sampled answers to be right often enough that
    RL has signal, few enough that RL still has much to learn)"""
    sft_batch_size: int = 32
    """warm-up sequences per step"""
    sft_lr: float = 1e-3
    """peak AdamW learning rate of the warm-up (linear warm-up 5%, cosine decay)"""
    sft_schedule_steps: int = 0
    """length of the warm-up's lr schedule if longer than sft_steps (0: sft_steps); stopping early
    leaves a model that knows a procedure only partly, without the decay that a short schedule
    starts too soon for the procedure to be picked up at all"""
    sft_stop_at: float = 0.0
    """task 'code': end the warm-up at the first probe (every `sft_probe_every` steps from half of
    sft_steps on) where this share of programs sampled at T = 1 equals the reference program (0:
    run all sft_steps). The share rises steeply with the steps, and a CPU's numerics move the step
    where it does: a target holds the start of RL where a step count does not"""
    sft_probe_every: int = 4
    """steps between two probes of `sft_stop_at`"""
    arith: ArithConfig = field(default_factory=ArithConfig)
    """problem distribution for the corpus and the warm-up (task 'arith')"""
    task: str = "arith"
    """'arith' (one-step a+b, a-b on small operands), 'addition' (multi-digit column addition,
    scratchpad) or 'code' (short stdin Python programs, `xrpo_verl.lab.code_task`)"""
    addition: addition_task.AdditionConfig = field(default_factory=addition_task.AdditionConfig)
    """problem distribution for the corpus and the warm-up (task 'addition')"""
    code: code_task.CodeConfig = field(default_factory=code_task.CodeConfig)
    """problem distribution for the corpus and the warm-up (task 'code')"""
    fewshot_share: float = 0.0
    """share of warm-up rows whose prompt is XRPO's ICL prompt (`icl.render_icl_prompt`) holding
    `fewshot_k` solved neighbours that MiniLM retrieves from a pool of other problems, as XRPO's
    corpus will: pretraining's few-shot text, which teaches a real LLM to learn from its context
    (task 'addition'; examples and target in one style)"""
    fewshot_k: int = 2
    """solved examples in a few-shot warm-up prompt (XRPO's K)"""
    fewshot_pool: int = 2000
    """problems the few-shot examples are retrieved from (disjoint from nothing: warm-up data)"""

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} must divide by num_heads={self.num_heads}, "
                f"which must divide by num_kv_heads={self.num_kv_heads}"
            )
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {list(TASKS)}, got {self.task!r}")
        if not 0.0 <= self.fewshot_share <= 1.0 or self.fewshot_k < 1 or self.fewshot_pool <= self.fewshot_k:
            raise ValueError(
                "need 0 <= fewshot_share <= 1, fewshot_k >= 1 and fewshot_pool > fewshot_k; got "
                f"{self.fewshot_share}, {self.fewshot_k}, {self.fewshot_pool}"
            )
        if self.sft_stop_at and (self.task != "code" or not 0 < self.sft_stop_at <= 1 or self.sft_probe_every < 1):
            raise ValueError(
                "sft_stop_at needs task 'code', 0 < sft_stop_at <= 1 and sft_probe_every >= 1; got "
                f"{self.task!r}, {self.sft_stop_at}, {self.sft_probe_every}"
            )
        if self.fewshot_share and self.task != "addition":
            raise ValueError(f"fewshot_share is implemented for task 'addition' only, not {self.task!r}")
        if self.sft_steps < 0 or self.sft_batch_size < 1 or self.sft_lr <= 0:
            raise ValueError(
                f"need sft_steps >= 0, sft_batch_size >= 1, sft_lr > 0; got {self.sft_steps}, "
                f"{self.sft_batch_size}, {self.sft_lr}"
            )

    @property
    def key(self) -> str:
        fields = asdict(self)
        if self.task == "arith":  # fields added with the addition task: 'arith' models keep their cache key
            del fields["task"], fields["addition"]
        if not self.sft_schedule_steps:
            del fields["sft_schedule_steps"]
        if not self.sft_stop_at:  # fields added with the stopping rule: older models keep their key
            del fields["sft_stop_at"], fields["sft_probe_every"]
        if not self.fewshot_share:  # fields added with the premise testbed: older models keep their key
            del fields["fewshot_share"], fields["fewshot_k"], fields["fewshot_pool"]
        if "addition" in fields:  # fields added with the premise testbed, dropped at their defaults
            for name, default in (("styles", ("columns",)), ("families", 0), ("known_families", 0)):
                if getattr(self.addition, name) == default:
                    del fields["addition"][name]
        extra = {}
        if self.task == "code":
            extra["code_format"] = code_task.CODE_FORMAT
            for name, default in (("tail_ops", ()), ("tail_share", 0.0)):  # added with the tail, dropped at defaults
                if getattr(self.code, name) == default:
                    del fields["code"][name]
        else:  # added with the code task: the other tasks' models keep their cache key
            del fields["code"]
        # models built before the kernels were pinned may differ by CPU: a new key rebuilds them
        extra["kernels"] = PINNED_KERNELS["ATEN_CPU_CAPABILITY"]
        blob = json.dumps({**fields, "solution_format": SOLUTION_FORMAT, **extra}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def sample_problems(self, n: int, seed: int) -> list:
        """`n` problems of this model's task (objects with `.question` and `.answer`)."""
        if self.task == "addition":
            return addition_task.sample_problems(n, seed, self.addition)
        if self.task == "code":
            return code_task.sample_problems(n, seed, self.code)
        return arith.sample_problems(n, seed, self.arith)

    def warmup_problems(self, n: int, seed: int) -> list:
        """The zero-shot warm-up's problems: those of the task, of the known families only if it has families."""
        if self.task == "addition" and self.addition.families:
            return addition_task.known_family_problems(n, seed, self.addition)
        return self.sample_problems(n, seed)

    def solution_text(self, problem, style: str | None = None) -> str:
        """The warm-up's target response for `problem` (task 'addition': in `style`, default the first)."""
        if self.task == "code":
            return code_task.solution_text(problem)
        if self.task == "addition":
            return addition_task.solution_text(problem, style or self.addition.styles[0])
        return arith.solution_text(problem)

    @property
    def max_response_tokens(self) -> int:
        """Longest warm-up response in tokens, with room to spare (digits are one token each)."""
        if self.task == "code":
            return 48
        per_column = 12 if self.addition.styles == ("columns",) else 20  # 'words' names each column
        return 24 if self.task == "arith" else per_column * (self.addition.max_digits + 1) + 8


def cache_root() -> Path:
    return Path(os.environ.get("XRPO_VERL_CACHE", Path.home() / ".cache" / "xrpo_verl")) / "tiny_model"


def chat_prompt(question: str) -> str:
    return f"{BOS}user\n{question}{EOS}\n{BOS}assistant\n"


def build_tokenizer(config: TinyModelConfig, pool: "FewShotPool | None" = None):
    """Byte-level BPE trained on generated problems and solutions; digits are single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    problems = config.sample_problems(4000, config.seed + 1)
    styles = config.addition.styles if config.task == "addition" else (None,)
    corpus = [chat_prompt(p.question) + config.solution_text(p, style) + EOS for p in problems for style in styles]
    if pool is not None:  # the ICL template's words become tokens, so its prompts stay short
        corpus += [chat_prompt(user) + EOS for user, _ in pool.rows(200, seed=0, count_tokens=len)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_model(config: TinyModelConfig, tokenizer):
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    return model


class FewShotPool:
    """Few-shot warm-up rows: a pool of solved problems, each with the `fewshot_k` pool neighbours
    that XRPO's retrieval (`icl.ICLCorpus` over MiniLM embeddings of the problem text, its default
    similarity ceiling) returns, rendered by `icl.render_icl_prompt`: the prompts the RL run's ICL
    seeding will write, with the model's own kind of solutions in them."""

    def __init__(self, config: TinyModelConfig) -> None:
        from xrpo_verl import icl
        from xrpo_verl.config import ICLConfig
        from xrpo_verl.embeddings import get_embedder

        self.config, cfg = config, ICLConfig()
        self.problems = list(dict.fromkeys(config.sample_problems(config.fewshot_pool, config.seed + 4)))
        corpus = icl.ICLCorpus(get_embedder(), per_prompt=1)
        ids = [str(i) for i in range(len(self.problems))]
        for pid, p in zip(ids, self.problems, strict=True):
            corpus.add(pid, p.question, "", step=0, num_tokens=0)
        found = corpus.retrieve_many(
            ids, [p.question for p in self.problems], k=config.fewshot_k, max_similarity=cfg.max_similarity
        )
        self.neighbours = [[int(e.prompt_id) for e in exs] for exs in found]

    def rows(self, n: int, seed: int, count_tokens) -> list[tuple[str, str]]:
        """`n` (user turn, target response) pairs; examples and target share a style.
        `count_tokens`: text -> tokens, for `render_icl_prompt`'s length rule."""
        from xrpo_verl import icl

        rng = random.Random(seed)
        known = set(addition_task.FAMILY_NAMES[: self.config.addition.known_families])
        out = []
        for _ in range(n):
            i = rng.randrange(len(self.problems))
            style = rng.choice(self.config.addition.styles)
            target, shown = self.problems[i], [self.problems[j] for j in self.neighbours[i]]
            if getattr(target, "family", "") and target.family not in known:
                # an unknown family's offset is whatever its examples show: read from context, never memorised
                target = replace(target, offset=rng.randint(1, 9))
                shown = [replace(p, offset=target.offset) if p.family == target.family else p for p in shown]
            shots = [
                icl.ICLExample(str(j), p.question, self.config.solution_text(p, style), 0, 0)
                for j, p in zip(self.neighbours[i], shown, strict=True)
            ]
            user = icl.render_icl_prompt(shots, target.question, count_tokens=count_tokens).text
            out.append((user, self.config.solution_text(target, style)))
        return out


def sft_batch(tokenizer, problems, solution=arith.solution_text) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, labels), labels -100 except on the response + EOS.

    `problems` are objects with `.question` (answered by `solution(p)`) or (user turn, response) pairs.
    """
    rows = []
    for p in problems:
        user, response = p if isinstance(p, tuple) else (p.question, solution(p))
        prompt = tokenizer(chat_prompt(user), add_special_tokens=False)["input_ids"]
        answer = tokenizer(response + EOS, add_special_tokens=False)["input_ids"]
        rows.append((prompt, answer))
    width = max(len(a) + len(b) for a, b in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, (prompt, answer) in enumerate(rows):
        seq = prompt + answer
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(prompt) : len(seq)] = torch.tensor(answer)
    return ids, mask, labels


def _token_mean_loss(model, tokenizer, parts: list[list[tuple[str, str]]]) -> torch.Tensor:
    """The mean token loss over every part's responses, each part padded on its own."""
    total, tokens = 0.0, 0
    for part in (p for p in parts if p):
        ids, mask, labels = sft_batch(tokenizer, part)
        n = int((labels[:, 1:] != -100).sum())  # the causal shift: a row's first label is never predicted
        total = total + model(input_ids=ids, attention_mask=mask, labels=labels).loss * n
        tokens += n
    return total / tokens


PROBE_PROBLEMS = 64  # problems of a `sft_stop_at` probe
PROBE_SAMPLES = 2  # programs sampled per problem


def warm_up(
    model,
    tokenizer,
    config: TinyModelConfig,
    log_every: int = 100,
    pool: FewShotPool | None = None,
    probes: list | None = None,
) -> list[float]:
    """Supervised warm-up; returns the loss per step. With `config.sft_stop_at`, appends each
    probe's (step, share of T = 1 samples equal to the reference) to `probes` and stops at the
    first that reaches it."""
    rng = random.Random(config.seed + 2)
    opt = torch.optim.AdamW(model.parameters(), lr=config.sft_lr, weight_decay=0.0)
    horizon = max(config.sft_steps, config.sft_schedule_steps)
    warm = max(1, horizon // 20)

    def lr_at(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, horizon - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    losses = []
    start = time.time()
    # styles and few-shot rows draw from their own generator: a one-style zero-shot warm-up
    # (every model built before them) sees the same batches as before
    extra_rng = random.Random(config.seed + 5)
    styles = config.addition.styles if config.task == "addition" else (None,)
    if pool is None and config.fewshot_share:
        pool = FewShotPool(config)

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    for step in range(config.sft_steps):
        problems = config.warmup_problems(config.sft_batch_size, rng.randrange(2**31))
        if len(styles) > 1 or pool is not None:
            rows = [(p.question, config.solution_text(p, extra_rng.choice(styles))) for p in problems]
            shots = 0
            if pool is not None:
                shots = sum(extra_rng.random() < config.fewshot_share for _ in rows)
                rows[:shots] = pool.rows(shots, seed=extra_rng.randrange(2**31), count_tokens=count_tokens)
            problems = rows
        if pool is None:
            ids, mask, labels = sft_batch(tokenizer, problems, config.solution_text)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        else:  # few-shot rows apart: padded to their own width, not the zero-shot rows' too
            loss = _token_mean_loss(model, tokenizer, [problems[:shots], problems[shots:]])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if config.sft_stop_at and step + 1 >= config.sft_steps // 2 and (step + 1) % config.sft_probe_every == 0:
            share = sampled_match_rate(model, tokenizer, config, seed=step)
            model.train()
            if probes is not None:
                probes.append((step + 1, share))
            if share >= config.sft_stop_at:
                break
        if log_every and (step + 1) % log_every == 0:
            print(
                f"  warm-up step {step + 1}/{config.sft_steps} loss {loss.item():.3f} ({time.time() - start:.0f}s)",
                flush=True,
            )
    model.eval()
    return losses


@torch.no_grad()
def sampled_match_rate(model, tokenizer, config: TinyModelConfig, seed: int) -> float:
    """Share of programs sampled at T = 1 (no top-k or top-p) that equal the reference program, over
    PROBE_SAMPLES samples of PROBE_PROBLEMS fixed problems. The sampling draws from its own seeded
    generator state, so the warm-up's own randomness is the same with or without probes."""
    from transformers import GenerationConfig

    model.eval()
    problems = config.sample_problems(PROBE_PROBLEMS, config.seed + 11) * PROBE_SAMPLES
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed + 13 + seed)
        sampling = GenerationConfig(
            max_new_tokens=config.max_response_tokens, do_sample=True, temperature=1.0, top_k=0, top_p=1.0
        )
        texts = _responses(model, tokenizer, problems, sampling)
    return _reference_share(problems, texts)


def _responses(model, tokenizer, problems, generation_config) -> list[str]:
    """The model's response to each problem's chat prompt (left-padded batch), special tokens dropped."""
    generation_config.eos_token_id = tokenizer.eos_token_id
    generation_config.pad_token_id = tokenizer.pad_token_id
    prompts = [chat_prompt(p.question) for p in problems]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, generation_config=generation_config)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)


def _reference_share(problems, texts: list[str]) -> float:
    """Task 'code': the share of responses that are the reference program verbatim (no sandbox here)."""
    return sum(t.strip() == p.answer for p, t in zip(problems, texts, strict=True)) / len(problems)


@torch.no_grad()
def greedy_accuracy(model, tokenizer, problems, max_new_tokens: int = 24) -> float:
    """Fraction of problems whose greedy response contains the right `\\boxed{}` answer."""
    from transformers import GenerationConfig

    texts = _responses(model, tokenizer, problems, GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False))
    if isinstance(problems[0], code_task.CodeProblem):
        return _reference_share(problems, texts)
    scores = [compute_score(arith.DATA_SOURCE, t, str(p.answer))["score"] for p, t in zip(problems, texts, strict=True)]
    return sum(scores) / max(1, len(scores))


def build(config: TinyModelConfig = TinyModelConfig(), root: Path | None = None, verbose: bool = True) -> Path:
    """Return the cached model directory for `config`, building it first if absent.

    A config in `SHIPPED` is unpacked from the package instead, its weights checked. The build runs
    in a child process under `PINNED_KERNELS`: this process's torch has already chosen its kernels.
    """
    out = (root or cache_root()) / config.key
    if (out / DONE_MARKER).exists():
        return out
    if config.key in SHIPPED:
        unpack_shipped(config.key, out)
        if verbose:
            print(
                f"tiny model {config.key}: unpacked the shipped build (weights sha256 {SHIPPED[config.key][:12]}) "
                f"into {out} instead of training it",
                flush=True,
            )
        return out
    env = {**os.environ, **PINNED_KERNELS}
    child = (
        "import pickle, sys; from xrpo_verl.lab import tiny_model; tiny_model._build(*pickle.load(sys.stdin.buffer))"
    )
    done = subprocess.run([sys.executable, "-c", child], input=pickle.dumps((config, out, verbose)), env=env)
    if done.returncode != 0 or not (out / DONE_MARKER).exists():
        raise RuntimeError(f"building the tiny model {config.key} in {out} failed (exit {done.returncode}); see above")
    return out


def _build(config: TinyModelConfig, out: Path, verbose: bool) -> None:
    """The build itself, in the child process `build` starts."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if verbose:
        print(f"building tiny model {config.key} (seed {config.seed}) in {out}", flush=True)
    start = time.time()
    pool = FewShotPool(config) if config.fewshot_share else None  # MiniLM encodes the pool once
    tokenizer = build_tokenizer(config, pool)
    model = build_model(config, tokenizer)
    probes: list[tuple[int, float]] = []
    losses = warm_up(model, tokenizer, config, log_every=100 if verbose else 0, pool=pool, probes=probes)
    # task 'code': the share of greedy responses equal to the reference program (a lower bound on AC)
    accuracy = greedy_accuracy(
        model, tokenizer, config.sample_problems(200, config.seed + 3), config.max_response_tokens
    )
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    meta = {
        "config": asdict(config),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "final_sft_loss": losses[-1] if losses else None,
        "sft_steps_run": len(losses),
        "sft_probes": probes,
        "greedy_accuracy": accuracy,
        "build_seconds": round(time.time() - start, 1),
        "cpu_kernels": torch.backends.cpu.get_cpu_capability(),  # AVX2 where PINNED_KERNELS took effect
    }
    (tmp / DONE_MARKER).write_text(json.dumps(meta, indent=1))
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)  # atomic: concurrent builders never see a half-written directory
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    if verbose:
        print(
            f"tiny model: {meta['num_parameters'] / 1e6:.2f}M params, greedy accuracy {accuracy:.2f}, "
            f"{meta['build_seconds']}s",
            flush=True,
        )


def weights_sha256(model_dir) -> str:
    """The sha256 of a model directory's `model.safetensors` (what a study records of its model)."""
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()


def shipped_archive(key: str) -> Path:
    """The package's archive of the model with cache key `key` (`SHIPPED`)."""
    return ASSETS / f"tiny_model-{key}.tar.xz"


def unpack_shipped(key: str, out: Path) -> None:
    """Write the shipped model `key`'s files into `out` (atomically), refusing weights whose sha256
    is not `SHIPPED[key]`."""
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(shipped_archive(key), "r:xz") as tar:
            for member in tar.getmembers():
                if not member.isfile() or Path(member.name).name != member.name:
                    raise RuntimeError(f"{shipped_archive(key)}: unexpected member {member.name!r}")
                (tmp / member.name).write_bytes(tar.extractfile(member).read())
        found = weights_sha256(tmp)
        if found != SHIPPED[key] or not (tmp / DONE_MARKER).exists():
            raise RuntimeError(
                f"{shipped_archive(key)} holds weights {found[:12]}, not the shipped {SHIPPED[key][:12]} "
                f"of model {key} (or lacks {DONE_MARKER})"
            )
        try:
            tmp.rename(out)  # atomic: concurrent builders never see a half-written directory
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pack(model_dir, dest: Path | None = None) -> Path:
    """Write a built model directory's files to `dest` (default `shipped_archive(<dir name>)`) as a
    .tar.xz that is the same bytes for the same files; returns its path. Shipping it is then one
    line in `SHIPPED`: the directory name (the cache key) and `weights_sha256(model_dir)`."""
    import io

    src = Path(model_dir)
    if not (src / DONE_MARKER).exists():
        raise ValueError(f"{src} is not a built tiny model (no {DONE_MARKER})")
    dest = Path(dest) if dest else shipped_archive(src.name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in src.iterdir() if p.is_file()):
            info = tarfile.TarInfo(path.name)
            info.size, info.mode = path.stat().st_size, 0o644  # no owner or time: the bytes are the files'
            with path.open("rb") as f:
                tar.addfile(info, f)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, filters=PACK_FILTERS))
    return dest


def untied_copy(model_dir, out_dir=None):
    """The model with its output layer untied from the input embedding (a copy, cached beside it).

    With tied embeddings a weight push that dropped `lm_head.weight` would go unnoticed (vLLM reuses
    the embedding); untied, the served output layer only follows the actor if it is pushed too.
    """
    from safetensors.torch import load_file, save_file

    src = Path(model_dir)
    out = Path(out_dir) if out_dir else src.with_name(src.name + "-untied")
    if (out / "config.json").exists():
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("*.safetensors", "config.json"))
    weights = load_file(str(src / "model.safetensors"))
    if "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
    save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((src / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
