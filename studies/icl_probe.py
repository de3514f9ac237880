"""Can ICL seeding flip an all-fail prompt of the learning setting? An offline probe of the model.

XRPO re-prompts a prompt whose rollouts all failed with K solved examples (the ICL template of
`xrpo_verl.icl.render_icl_prompt`). That helps only a model that learns from context. This takes
3-digit training sums, finds those the learning setting's model fails in k samples at T=1, and
samples them again k times: with a 2-shot ICL prompt of two other solved 3-digit sums (whole
scratchpad solutions), and zero-shot (the control: fresh samples of a prompt that failed once
succeed sometimes by chance). Reported: how many of the all-fail prompts each flips.

    OMP_NUM_THREADS=1 python studies/icl_probe.py --problems 48 --k 8
"""

from __future__ import annotations

import argparse
import sys


def pass_rates(model, tok, texts: list[str], answers: list[int], k: int, max_new_tokens: int) -> list[float]:
    """Per prompt, the share of k samples at T=1 whose boxed answer is right."""
    import torch
    from transformers import GenerationConfig

    from xrpo_verl.lab import addition, tiny_model
    from xrpo_verl.lab.arith import compute_score

    config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    enc = tok([tiny_model.chat_prompt(t) for t in texts], return_tensors="pt", padding=True, add_special_tokens=False)
    width, out = enc["input_ids"].shape[1], [0.0] * len(texts)
    for _ in range(k):
        with torch.no_grad():
            ids = model.generate(**enc, generation_config=config)
        for i, text in enumerate(tok.batch_decode(ids[:, width:], skip_special_tokens=True)):
            out[i] += compute_score(addition.DATA_SOURCE, text, str(answers[i]))["score"] / k
    return out


def main(argv: list[str] | None = None) -> int:
    import torch
    from transformers import AutoTokenizer

    from xrpo_verl import icl
    from xrpo_verl.lab import addition, learning_setting, tiny_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=48, help="3-digit training sums to try")
    p.add_argument("--k", type=int, default=8, help="samples per prompt at T=1")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    setting = learning_setting.LearningSetting()
    model_dir = tiny_model.build(setting.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = learning_setting.load_actor(model_dir)
    train, _ = addition.train_and_heldout(setting.n_train, setting.n_heldout, setting.data_seed)
    three = [s for s in train if s.a >= 100 and s.b >= 100]
    probes, shots = three[: args.problems], three[args.problems : args.problems + 2]
    first = pass_rates(model, tok, [s.question for s in probes], [s.answer for s in probes], args.k, 48)
    failed = [s for s, r in zip(probes, first, strict=True) if r == 0]
    print(
        f"zero-shot: mean {sum(first) / len(first):.3f}; all {args.k} samples failed on {len(failed)} of {len(probes)}"
    )
    if not failed:
        return 0
    examples = [
        icl.ICLExample(str(i), s.question, addition.solution_text(s), step=0, num_tokens=0) for i, s in enumerate(shots)
    ]

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    with_icl = [icl.render_icl_prompt(examples, s.question, count_tokens=count, max_example_tokens=48) for s in failed]
    assert all(len(r.examples) == 2 for r in with_icl), "an ICL prompt lost an example"
    answers = [s.answer for s in failed]
    seeded = pass_rates(model, tok, [r.text for r in with_icl], answers, args.k, 48)
    again = pass_rates(model, tok, [s.question for s in failed], answers, args.k, 48)
    for name, rates in (("2-shot ICL", seeded), ("zero-shot again (control)", again)):
        flipped = sum(r > 0 for r in rates)
        print(
            f"{name:26s} flipped {flipped} of {len(failed)} all-fail prompts; "
            f"mean pass rate {sum(rates) / len(rates):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
