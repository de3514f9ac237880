"""Issue 46's second task: the code task with a hard tail, chosen by probes before any training run.

    OMP_NUM_THREADS=1 python studies/code_tail_probes.py                  # every candidate, in order
    OMP_NUM_THREADS=1 python studies/code_tail_probes.py --tail-share 0.05

The tail (`code_task.CodeConfig.tail_ops`): pair problems with `%` and `//` (`a%3+b`, `b//4*a`),
a third of the task's problems, shown in the warm-up at `tail_share` of its problems, so that the
warmed-up model solves them rarely, as the testbed's model solves its unknown families. Each
candidate share builds the code model (`code_rl.MODEL` with the tail) and measures, before any
training, mean@16 at T = 1 on the setting's 64 held-out problems and on 64 of its training
problems, split into the tail and the rest; judged in the sandbox (bubblewrap).

The rule, written before the first probe ran: candidates are tried in the order of `CANDIDATES`;
the task is the first whose tail is hard and not hopeless and whose rest learns as the code task
does: the tail's mean@16 in [0.02, 0.25] on both sets (the testbed's hard families were 0.02-0.23)
with at least half of its problems solved at least once in 16, and the rest's mean@16 >= 0.3.
If none passes, the second task is not this one, and the records say why.

Writes studies/records/code_tail/<share>.json.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

OUT = Path(__file__).parent / "records" / "code_tail"
CANDIDATES = (0.05, 0.02, 0.1)
K = 16
N_TRAIN_PROBED = 64
TAIL_BAND, SOLVED_ONCE, REST_MIN = (0.02, 0.25), 0.5, 0.3


def tail_model(share: float):
    from xrpo_verl.lab import code_rl, code_task

    return replace(code_rl.MODEL, code=code_task.CodeConfig(tail_ops=code_task.TAIL_OPS, tail_share=share))


def split_rates(problems, rates) -> dict:
    """mean@K, the share solved at least once and the count, for the tail and the rest."""
    from xrpo_verl.lab import code_task

    out = {}
    for name, keep in (("tail", True), ("rest", False)):
        r = [x for p, x in zip(problems, rates, strict=True) if code_task.in_tail(p) == keep]
        out[name] = {
            "n": len(r),
            "mean": sum(r) / len(r) if r else float("nan"),
            "solved_once": sum(x > 0 for x in r) / len(r) if r else float("nan"),
            "below_0.1": sum(x < 0.1 for x in r) / len(r) if r else float("nan"),
        }
    return out


def passes(probe: dict) -> bool:
    lo, hi = TAIL_BAND
    sets = [probe["heldout"], probe["train"]]
    tail_ok = all(lo <= s["tail"]["mean"] <= hi and s["tail"]["solved_once"] >= SOLVED_ONCE for s in sets)
    return tail_ok and all(s["rest"]["mean"] >= REST_MIN for s in sets)


def probe(share: float, backend: str) -> dict:
    from transformers import AutoTokenizer

    from xrpo_verl.lab import code_rl, code_task, tiny_model
    from xrpo_verl.lab.learning_setting import load_actor

    model_cfg = tail_model(share)
    setting = code_rl.CodeSetting(model=model_cfg, backend=backend)
    tic = time.time()
    model_dir = tiny_model.build(model_cfg)
    built_s = time.time() - tic
    train, heldout = code_task.train_and_heldout(setting.n_heldout, setting.data_seed, model_cfg.code)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_actor(model_dir, None)
    out = {"tail_share": share, "model_key": model_cfg.key, "weights_sha256": tiny_model.weights_sha256(model_dir)}
    out["build_s"] = round(built_s, 1)
    for name, problems in (("heldout", heldout), ("train", train[:N_TRAIN_PROBED])):
        rates, verdicts = code_rl.sampled_pass_rates(
            model, tokenizer, problems, K, setting.max_response_length, backend=backend
        )
        out[name] = {**split_rates(problems, rates), "verdicts": verdicts, "per_problem": rates}
        out[name]["ids"] = [p.id for p in problems]
    out["passes"] = passes(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tail-share", type=float, nargs="*", default=list(CANDIDATES))
    ap.add_argument("--backend", default="bwrap", choices=("bwrap", "docker"))
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for share in args.tail_share:
        path = OUT / f"{share}.json"
        result = json.loads(path.read_text()) if path.exists() else probe(share, args.backend)
        path.write_text(json.dumps(result, indent=1) + "\n")
        for name in ("heldout", "train"):
            s = result[name]
            print(
                f"share {share}: {name:7s} tail {s['tail']['mean']:.3f} (n {s['tail']['n']}, solved once "
                f"{s['tail']['solved_once']:.2f}), rest {s['rest']['mean']:.3f} (n {s['rest']['n']})"
            )
        print(f"share {share}: {'passes' if result['passes'] else 'fails'} the rule")
        if result["passes"]:
            break


if __name__ == "__main__":
    main()
