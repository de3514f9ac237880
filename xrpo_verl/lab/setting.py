"""What every CPU setting of the lab fixes: a model, the sizes of a run and its held-out measurement.

`Setting` writes these fields once, with their types and help lines. A task's setting adds its own
fields and states only the defaults it changes, as keywords of its class statement
(`class CodeSetting(Setting, steps=..., model=lambda: MODEL)` in `code_rl.py`); a default built
per instance (the model) is given as a function of no arguments.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from xrpo_verl.config import Config, option
from xrpo_verl.lab import tiny_model


@dataclass(frozen=True)
class Setting(Config):
    """Sizes and trainer settings of a CPU run on one task, and its held-out measurement."""

    steps: int = option(50, "Training steps. [I]")
    prompts_per_step: int = option(8, "Prompts per step (B). [I]")
    n: int = option(8, "Rollouts per prompt (GRPO's n; XRPO's n_avg). [I]")
    lr: float = option(3e-5, "Actor learning rate (constant, AdamW, no KL). [I]")
    max_response_length: int = option(48, "Response budget in tokens. [I]")
    n_heldout: int = option(100, "Held-out problems of verl's in-run validation, disjoint from the training set. [I]")
    val_samples: int = option(
        4, "k samples per held-out problem at the training temperature (T=1): their mean is mean@k. [I]"
    )
    data_seed: int = option(11, "Seed of the training and held-out problems. [I]")
    model: tiny_model.TinyModelConfig = option(
        help="The warmed-up model. [I]", factory=lambda: tiny_model.TinyModelConfig()
    )

    def __init_subclass__(cls, **defaults) -> None:
        """Give the subclass `defaults` for these fields: each is declared again on the subclass,
        with this class's type and help line, before `@dataclass` reads the subclass's fields."""
        super().__init_subclass__()
        own = Setting.__dataclass_fields__
        unknown = sorted(set(defaults) - set(own))
        if unknown:
            raise TypeError(f"{cls.__name__}: {unknown} are not fields of Setting; known: {sorted(own)}")
        hints = typing.get_type_hints(Setting)
        annotations = cls.__dict__.get("__annotations__", {})
        for name, value in defaults.items():
            help_line = own[name].metadata["help"]
            annotations[name] = hints[name]
            if callable(value):
                setattr(cls, name, option(help=help_line, factory=value))
            else:
                setattr(cls, name, option(value, help_line))
        cls.__annotations__ = annotations

    def __post_init__(self) -> None:
        self._check_fields()

    def reward_overrides(self) -> typing.Sequence[str]:
        """The task's reward, as Hydra overrides of verl's trainer."""
        raise NotImplementedError
