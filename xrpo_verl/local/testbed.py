"""The premise testbed: the learning setting's column addition, with a model built to have what
each exploration mechanism is built on (issue 24; measured by `benchmarks/premise_probes.py`).

- Two correct styles (`addition.STYLES`), taught equally: a policy that collapses onto one loses
  the problems only the other solves (ExTra's premise).
- A few-shot warm-up (`tiny_model.FewShotPool`): a share of the warm-up prompts are XRPO's own ICL
  prompts, neighbours retrieved by MiniLM as the RL run's corpus will, as pretraining's few-shot
  text teaches every real LLM to use its context (XRPO's ICL premise).
- A vocabulary that holds the ICL template's words, and room for its prompts.
"""

from __future__ import annotations

from xrpo_verl.local import addition, tiny_model
from xrpo_verl.local.learning import LearningSetting

MODEL = tiny_model.TinyModelConfig(
    task="addition",
    vocab_size=512,
    max_positions=512,
    addition=addition.AdditionConfig(styles=addition.STYLES),
    fewshot_share=0.3,
    sft_steps=300,
    sft_schedule_steps=900,
)

SETTING = LearningSetting(model=MODEL, max_response_length=96)
