"""The eval tool's vLLM backend (`xrpo_verl.eval.generate.VLLMGenerator`) on vLLM's real engine (CPU
build): k samples per problem with the problem's own seed, on the warmed-up tiny model."""

import os

import pytest

from xrpo_verl.cpu.switches import VLLM_SWITCH
from xrpo_verl.eval import generate as G
from xrpo_verl.lab import arith, tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generator(untied_model_dir):
    os.environ[VLLM_SWITCH] = "1"  # the explicit switch; the Makefile sets vLLM's CPU knobs
    sampling = G.SamplingConfig(k=4, temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
    gen = G.make_generator(str(untied_model_dir), sampling, backend="vllm")
    assert isinstance(gen, G.VLLMGenerator)
    return gen


def test_k_samples_per_problem_are_real_and_reproducible_by_seed(generator):
    problems = arith.sample_problems(8, seed=21)
    messages = [[{"role": "user", "content": p.question}] for p in problems]
    seeds = [3 + i for i in range(len(problems))]
    first = generator.generate(messages, seeds)
    again = generator.generate(messages[:2], seeds[:2])
    other = generator.generate(messages[:2], [100, 101])
    assert [len(row) for row in first] == [4] * len(problems)
    assert all(0 < s.num_tokens <= 24 for row in first for s in row)
    # same problem, same seed: the same k samples (evaluation resumes draw what they drew before)
    assert [[s.text for s in row] for row in again] == [[s.text for s in row] for row in first[:2]]
    assert [[s.text for s in row] for row in other] != [[s.text for s in row] for row in first[:2]]
    # the warmed-up model answers some problems correctly when sampled through vLLM
    scores = [
        arith.compute_score(arith.DATA_SOURCE, s.text, str(p.answer))["score"]
        for p, row in zip(problems, first)
        for s in row
    ]
    print(f"\n[eval_vllm] sampled accuracy {sum(scores) / len(scores):.2f} over {len(scores)} samples")
    assert sum(scores) > 0


def test_the_tiny_model_prompt_format_is_what_vllm_applies(untied_model_dir, generator):
    """vLLM's chat() renders the model's own chat template: the same prompt the trainer uses."""
    tok = generator.llm.get_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "1+1"}], tokenize=False, add_generation_prompt=True)
    assert text == tiny_model.chat_prompt("1+1")
