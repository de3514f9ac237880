"""`python -m xrpo_verl.config_reference > docs/config.md`: every typed setting of ours, one page.

The algorithm settings (`algorithm.xrpo.*`, `algorithm.extra.*`, `xrpo_verl/config.py`), the
reward manager's (`reward.reward_kwargs.*`, `xrpo_verl/rewards/`), the CPU runs' (the demo,
the tests and the benchmarks, `xrpo_verl/lab/`, `xrpo_verl/cpu/`), the evaluation's sampling and the sandbox's
backends, all written in `config.py`'s style: a type, a default and one help line per field, from
which this page is generated. The sandbox imports nothing of ours (it has its own `option`), so its
configs are no `Config`s: they come last, in SANDBOX_SECTIONS.
"""

import sys

from sandbox.backends.bwrap import BwrapConfig
from sandbox.backends.docker import DockerConfig
from xrpo_verl import config as C
from xrpo_verl.cpu.hf_rollout import HFEngineConfig
from xrpo_verl.eval.generate import SamplingConfig
from xrpo_verl.lab.code_rl import CodeSetting
from xrpo_verl.lab.launch import CpuRun
from xrpo_verl.lab.learning_setting import LearningSetting
from xrpo_verl.rewards.code import CodeRewardConfig
from xrpo_verl.rewards.manager import OverlongConfig, XrpoRewardConfig
from xrpo_verl.rewards.math import MathRewardConfig

SECTIONS = [
    (
        "Algorithms: `algorithm.xrpo.*`, `algorithm.extra.*`",
        "Set in verl's Hydra config (`xrpo_verl/hydra_config/xrpo_trainer.yaml` holds the defaults).",
        C.ALL_CONFIGS,
    ),
    (
        "Rewards: `reward.reward_kwargs.*`",
        "With `reward.reward_manager.name=xrpo`; `math.*`, `code.*` and `overlong_buffer_cfg.*` are nested keys.",
        (XrpoRewardConfig, MathRewardConfig, CodeRewardConfig, OverlongConfig),
    ),
    (
        "CPU runs: `xrpo_verl/lab/`, `xrpo_verl/cpu/`",
        "The sizes of the demo's, the tests' and the benchmarks' CPU runs of verl; the `hf` rollout's engine.",
        (CpuRun, LearningSetting, CodeSetting, HFEngineConfig),
    ),
    (
        "Evaluation: `python -m xrpo_verl.eval`",
        "Its `--k`, `--temperature`, `--top-p`, `--max-new-tokens` and `--seed` flags.",
        (SamplingConfig,),
    ),
]
ALL_SETTINGS = tuple(cls for _, _, classes in SECTIONS for cls in classes)
SANDBOX_SECTIONS = [
    (
        "Sandbox backends: `reward.reward_kwargs.code.backend_options`",
        "With `code.backend=bwrap` or `docker`; the same fields are `sandbox.get_backend(name, **options)`'s.",
        (BwrapConfig, DockerConfig),
    ),
]

if __name__ == "__main__":
    sys.stdout.write(C.markdown_docs(SECTIONS + SANDBOX_SECTIONS))
