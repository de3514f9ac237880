"""Scouting loop: plain GRPO in one process (no verl, no Ray) on the learning setting, to try settings cheaply.

Same estimator as verl's GRPO on CPU here: group-normalised advantages, token-mean policy-gradient
loss, one AdamW step per batch (on-policy, so no ratio clipping acts), grad-norm clip 1.0,
sampling at T=1 with `transformers` generate. Measures the held-out sums of the learning setting
(greedy and mean@k, standard errors over problems) every `--eval-every` steps. Not a substitute
for a verl run: a setting found here is then confirmed through `python -m xrpo_verl.lab demo`.

    python studies/grpo_scout.py --lr 3e-5 --steps 40 --eval-every 20
"""

from __future__ import annotations

import argparse
import random
import time

import torch


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    from xrpo_verl.lab import addition, learning_setting, tiny_model
    from xrpo_verl.lab.arith import compute_score

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, nargs="+", default=[learning_setting.LearningSetting.lr])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0, help="data order and sampling")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    setting = learning_setting.LearningSetting()
    model_dir = tiny_model.build(setting.model)
    tok = AutoTokenizer.from_pretrained(model_dir)
    train, heldout = addition.train_and_heldout(
        setting.n_train, setting.n_heldout, setting.data_seed, setting.model.addition
    )
    B, n, max_new = setting.prompts_per_step, setting.n, setting.max_response_length

    def measure(model) -> str:
        found = learning_setting.heldout_accuracy(model, tok, heldout, setting.val_samples, max_new)
        return "  ".join(f"{k} {v} (never {v.never}, always {v.always})" for k, v in found.items())

    sampling = GenerationConfig(
        max_new_tokens=max_new, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    for lr in args.lr:
        model = learning_setting.load_actor(model_dir)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        order = list(range(len(train)))
        random.Random(args.seed).shuffle(order)
        torch.manual_seed(args.seed)
        print(f"lr {lr}: step 0  {measure(model)}", flush=True)
        rewards, start = [], time.time()
        for step in range(1, args.steps + 1):
            batch = [train[order[((step - 1) * B + i) % len(train)]] for i in range(B)]
            group = [q for q in batch for _ in range(n)]
            prompts = [tiny_model.chat_prompt(q.question) for q in group]
            enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(**enc, generation_config=sampling)
            width = enc["input_ids"].shape[1]
            resp = out[:, width:]
            texts = tok.batch_decode(resp, skip_special_tokens=True)
            r = torch.tensor([compute_score("", t, str(q.answer))["score"] for q, t in zip(group, texts, strict=True)])
            g = r.view(B, n)
            adv = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).view(-1)
            rewards.append(r.mean().item())
            is_eos = resp == tok.eos_token_id  # the response runs up to and including its first EOS
            last = torch.where(is_eos.any(1), is_eos.float().argmax(1), resp.shape[1] - 1)
            mask = (torch.arange(resp.shape[1])[None] <= last[:, None]).float()
            model.train()
            attention = torch.cat([enc["attention_mask"], mask.long()], 1)
            logits = model(input_ids=out, attention_mask=attention).logits[:, width - 1 : -1]
            logp = torch.log_softmax(logits.float(), -1).gather(-1, resp[..., None]).squeeze(-1)
            loss = -(adv[:, None] * logp * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            model.eval()
            if step % args.eval_every == 0:
                recent = rewards[-args.eval_every :]
                print(
                    f"lr {lr}: step {step}  train reward (last {len(recent)}) {sum(recent) / len(recent):.3f}  "
                    f"{(time.time() - start) / step:.2f} s/step  {measure(model)}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
