"""The premise testbed: the learning setting's column addition, with a model built to have what
each exploration mechanism is built on (issue 24; measured by `studies/premise_probes.py`).

- Two correct styles (`addition.STYLES`), taught equally: a policy that collapses onto one loses
  the problems only the other solves (ExTra's premise).
- A few-shot warm-up (`tiny_model.FewShotPool`): a share of the warm-up prompts are XRPO's own ICL
  prompts, neighbours retrieved by MiniLM as the RL run's corpus will, as pretraining's few-shot
  text teaches every real LLM to use its context (XRPO's ICL premise).
- Families of problems with a convention that only examples reveal (`addition` "Families"): half
  of them the warm-up shows zero-shot, the other half only in few-shot prompts, so on those the
  model must guess zero-shot and can read the answer's offset from XRPO's retrieved examples.
  This is what the testbed was built to have (XRPO's ICL premise, P2), not a finding about the
  model; the learning setting's task, without families, is the control.
- A vocabulary that holds the ICL template's words, and room for its prompts.
"""

from __future__ import annotations

from dataclasses import replace

from xrpo_verl.lab import addition, tiny_model
from xrpo_verl.lab.learning_setting import LearningSetting

MODEL = tiny_model.TinyModelConfig(
    task="addition",
    vocab_size=512,
    max_positions=512,
    addition=addition.AdditionConfig(styles=addition.STYLES, families=16, known_families=8),
    fewshot_share=0.3,
    sft_steps=600,
    sft_schedule_steps=900,
)

SETTING = LearningSetting(model=MODEL, max_response_length=96)

# The multi-epoch protocol (issue 46), fixed before its first run: the same model, measurement and
# sizes over 128 training prompts for 64 steps, so GRPO's sampler visits each prompt about four
# times, as a cluster run over DAPO-Math-17k at 512 prompts a step for 300 steps visits each about
# nine times; `SETTING` trains 4,096 prompts for 50 steps, each about once, where a prompt's own
# record (prompt selection) has nothing to go on.
EPOCHS = replace(SETTING, n_train=128, steps=64)
