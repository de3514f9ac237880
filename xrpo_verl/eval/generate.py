"""k samples per problem: vLLM on GPU when importable, else transformers (CPU works).

Every problem is sampled with its own seed (seed + problem number), so a resumed evaluation
draws the same samples as an uninterrupted one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Protocol

from xrpo_verl.config import Config, option

Backend = Literal["auto", "vllm", "hf"]
BACKENDS = ("auto", "vllm", "hf")


@dataclass(frozen=True)
class SamplingConfig(Config):
    """Decoding for evaluation (ExTra's val_kwargs: T = 0.7, top_p = 0.9)."""

    k: int = option(16, "Samples per problem (pass@k and cons@k need k >= the largest reported k). [I]")
    temperature: float = option(0.7, "Sampling temperature; 0 means greedy (then all k samples are equal). [C]")
    top_p: float = option(0.9, "Nucleus mass. [C]")
    max_new_tokens: int = option(4096, "Response token cap. [I]")
    seed: int = option(0, "Base seed; problem i uses seed + i. [I]")

    def __post_init__(self) -> None:
        if self.k < 1 or self.max_new_tokens < 1:
            raise ValueError(f"k = {self.k} and max_new_tokens = {self.max_new_tokens} must be >= 1")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need temperature >= 0 and top_p in (0, 1], got {self.temperature}, {self.top_p}")


@dataclass(frozen=True)
class Sample:
    text: str
    num_tokens: int  # generated tokens, EOS excluded


class Generator(Protocol):
    name: str

    def generate(self, messages: list[list[dict]], seeds: list[int]) -> list[list[Sample]]:
        """One list of k samples per conversation."""


def check_model_path(path: str) -> None:
    """A HF model directory or hub name; a raw verl FSDP checkpoint gets the merge command."""
    if os.path.isdir(path) and any(f.startswith("model_world_size_") for f in os.listdir(path)):
        raise ValueError(
            f"{path} is a sharded verl FSDP checkpoint; merge it first: python -m verl.model_merger merge "
            f"--backend fsdp --local_dir {path} --target_dir {path}/merged_hf, then pass that directory"
        )
    if os.path.isabs(path) and not os.path.isdir(path):
        raise ValueError(f"model path {path!r} does not exist")


class HFGenerator:
    """transformers `generate` with num_return_sequences = k, one problem at a time."""

    name = "hf"

    def __init__(self, model_path: str, sampling: SamplingConfig, device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.sampling = sampling
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(self.device).eval()
        self.eos = self.tokenizer.eos_token_id
        self.pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos

    def generate(self, messages: list[list[dict]], seeds: list[int]) -> list[list[Sample]]:
        import torch

        s = self.sampling
        out = []
        for conv, seed in zip(messages, seeds, strict=True):
            text = self.tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
            enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self.device)
            torch.manual_seed(seed)
            greedy = s.temperature == 0
            with torch.no_grad():
                ids = self.model.generate(
                    **enc,
                    do_sample=not greedy,
                    temperature=None if greedy else s.temperature,
                    top_p=None if greedy else s.top_p,
                    top_k=None,
                    max_new_tokens=s.max_new_tokens,
                    num_return_sequences=s.k,
                    eos_token_id=self.eos,
                    pad_token_id=self.pad,
                )
            gen = ids[:, enc["input_ids"].shape[1] :]
            samples = []
            for row in gen.tolist():
                n = row.index(self.eos) if self.eos in row else len(row)
                n = min(n, next((i for i, t in enumerate(row) if t == self.pad), n))
                samples.append(Sample(self.tokenizer.decode(row[:n], skip_special_tokens=True), n))
            out.append(samples)
        return out


class VLLMGenerator:
    """vLLM offline engine; every problem is one request with n = k and its own seed."""

    name = "vllm"

    def __init__(self, model_path: str, sampling: SamplingConfig, tensor_parallel_size: int = 1) -> None:
        from vllm import LLM

        self.sampling = sampling
        # vLLM's CPU build (.venv-vllm) has no CUDA graphs; eager mode also skips minutes of compiling.
        cpu = {"enforce_eager": True} if _vllm_cpu_build() else {}
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size, seed=sampling.seed, **cpu)

    def generate(self, messages: list[list[dict]], seeds: list[int]) -> list[list[Sample]]:
        from vllm import SamplingParams

        s = self.sampling
        params = [
            SamplingParams(n=s.k, temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_new_tokens, seed=seed)
            for seed in seeds
        ]
        results = self.llm.chat(messages, params, use_tqdm=False)
        return [[Sample(o.text, len(o.token_ids)) for o in r.outputs] for r in results]


def _vllm_cpu_build() -> bool:
    """vLLM's CPU build, switched on explicitly (xrpo_verl/cpu/vllm_cpu.py, `make vllm-env`)."""
    from xrpo_verl.cpu.switches import vllm_cpu_enabled
    from xrpo_verl.cpu.vllm_cpu import installed_vllm

    return vllm_cpu_enabled() and (installed_vllm() or "").endswith("+cpu")


def vllm_usable() -> bool:
    try:
        import torch
        import vllm  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available() or _vllm_cpu_build()


def make_generator(
    model_path: str, sampling: SamplingConfig, backend: Backend = "auto", tensor_parallel_size: int = 1
) -> Generator:
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r}; choose one of {list(BACKENDS)}")
    check_model_path(model_path)
    if backend == "vllm" or (backend == "auto" and vllm_usable()):
        if not vllm_usable():
            raise ValueError(
                "backend 'vllm' needs the vllm package and a CUDA GPU; use --backend hf on CPU "
                "(or vLLM's CPU build: XRPO_VERL_VLLM_CPU=1 in .venv-vllm, make vllm-env)"
            )
        return VLLMGenerator(model_path, sampling, tensor_parallel_size)
    return HFGenerator(model_path, sampling)
