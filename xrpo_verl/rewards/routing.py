"""Route a sample to the math or code scorer by its `data_source`.

Also usable on its own as verl's custom reward function:
`reward.custom_reward_function.path=pkg://xrpo_verl.rewards.routing`, `name=compute_score`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xrpo_verl.config import Config, option
from xrpo_verl.rewards import code as code_reward
from xrpo_verl.rewards import math as math_reward

# data_source prefixes (case-insensitive). Ours are "math/<set>" and "code/<set>"; the others are
# the names upstream verl datasets use, so their parquet files route without conversion.
DEFAULT_MATH_SOURCES = ("math", "openai/gsm8k", "gsm8k", "lighteval/math", "huggingfaceh4/math", "aime", "amc")
DEFAULT_CODE_SOURCES = ("code", "livecodebench", "codeforces", "open-r1/codeforces", "humaneval")


@dataclass(frozen=True)
class RoutingConfig(Config):
    """Which scorer handles which data_source, and their settings."""

    math_sources: tuple[str, ...] = option(
        DEFAULT_MATH_SOURCES, "data_source prefixes scored by the math scorer (case-insensitive). [I]"
    )
    code_sources: tuple[str, ...] = option(
        DEFAULT_CODE_SOURCES, "data_source prefixes scored by the code scorer (case-insensitive). [I]"
    )
    math: math_reward.MathRewardConfig = option(
        help="The math scorer (reward_kwargs.math).", factory=math_reward.MathRewardConfig
    )
    code: code_reward.CodeRewardConfig = option(
        help="The code scorer (reward_kwargs.code).", factory=code_reward.CodeRewardConfig
    )

    def __post_init__(self):
        self._check_fields()
        overlap = {m for m in self.math_sources for c in self.code_sources if m.startswith(c) or c.startswith(m)}
        if overlap:
            raise ValueError(f"data_source prefixes {sorted(overlap)} would match both math and code")


DEFAULT_ROUTING = RoutingConfig()


def scorer_kind(data_source: str, routing: RoutingConfig = DEFAULT_ROUTING) -> str:
    """'math' or 'code'; an unknown data_source raises `ValueError` listing the known prefixes."""
    if not isinstance(data_source, str):
        raise ValueError(f"data_source must be str, got {type(data_source).__name__}: {data_source!r}")
    name = data_source.lower()
    if any(name.startswith(p.lower()) for p in routing.code_sources):
        return "code"
    if any(name.startswith(p.lower()) for p in routing.math_sources):
        return "math"
    raise ValueError(
        f"data_source {data_source!r} matches no scorer; math prefixes: {list(routing.math_sources)}, "
        f"code prefixes: {list(routing.code_sources)}"
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: object,
    extra_info: dict | None = None,
    routing: RoutingConfig = DEFAULT_ROUTING,
) -> dict:
    """Score with the math or code scorer chosen by `data_source` (see `scorer_kind`)."""
    if scorer_kind(data_source, routing) == "code":
        return code_reward.compute_score(data_source, solution_str, ground_truth, extra_info, routing.code)
    return math_reward.compute_score(data_source, solution_str, ground_truth, extra_info, routing.math)
