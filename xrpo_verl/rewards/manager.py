"""The `xrpo` reward-loop manager (`reward.reward_manager.name=xrpo`).

verl's reward-loop workers call `run_single` once per trajectory, concurrently. This adapter
decodes the response, routes it by `data_source` to the math or code scorer
(`xrpo_verl.rewards.routing`), limits how many scorer calls run at once, and optionally adds
DAPO's overlong penalty. Imported by `import verl` in every process (through our plugin), so
its imports stay light: math-verify and the sandbox are imported when first used.

Settings come from `reward.reward_kwargs` (unknown keys raise):
  max_concurrency: int                 scorer calls in flight per reward worker
  math: {answer_formats, timeout_s, num_workers}     MathRewardConfig
  code: {reward_mode, backend, url (one or a list: spread, fail-over), protocol, default_language,
         se_retries, retry_backoff_s, memo_size, backend_options}  CodeRewardConfig
  math_sources / code_sources: [str]   data_source prefixes per scorer
  overlong_buffer_cfg: {enable, len, penalty_factor, log}, max_resp_len: int   as verl's `dapo`
A configured `reward.custom_reward_function` replaces the routing (its results are reduced to
the same keys).
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.reward_loop.reward_manager import register
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.utils.reward_score import default_compute_score

from xrpo_verl.config import Config, option
from xrpo_verl.rewards.code import CodeRewardConfig
from xrpo_verl.rewards.math import MathRewardConfig
from xrpo_verl.rewards.result import RESULT_KEYS, ScoreResult
from xrpo_verl.rewards.routing import DEFAULT_CODE_SOURCES, DEFAULT_MATH_SOURCES, RoutingConfig
from xrpo_verl.rewards.routing import compute_score as routed_compute_score


@dataclass(frozen=True)
class OverlongConfig(Config):
    """DAPO soft overlong punishment (arXiv 2503.14476, §3.4); same keys as verl's `dapo` manager."""

    enable: bool = option(
        False, "Add R_len to the task reward (off, as in the DAPO baseline of docs/algorithms.md). [P]"
    )
    len: int = option(0, "L_cache: tokens before L_max over which the penalty ramps from 0 to -penalty_factor. [P]")
    penalty_factor: float = option(1.0, "Penalty at |y| = L_max (DAPO recipe: 1.0). [P]")
    log: bool = option(True, "Report overlong_reward and overlong in reward_extra_info. [I]")

    def __post_init__(self):
        self._check_fields()


@dataclass(frozen=True)
class XrpoRewardConfig(Config):
    """`reward.reward_kwargs` of the xrpo manager (`reward.reward_manager.name=xrpo`), key for key."""

    max_concurrency: int = option(32, "Most scorer calls running at once in one reward worker. [I]")
    math: MathRewardConfig = option(help="The math scorer.", factory=MathRewardConfig)
    code: CodeRewardConfig = option(help="The code scorer.", factory=CodeRewardConfig)
    math_sources: tuple[str, ...] = option(
        DEFAULT_MATH_SOURCES, "data_source prefixes scored by the math scorer (case-insensitive). [I]"
    )
    code_sources: tuple[str, ...] = option(
        DEFAULT_CODE_SOURCES, "data_source prefixes scored by the code scorer (case-insensitive). [I]"
    )
    overlong_buffer_cfg: OverlongConfig = option(
        help="DAPO's soft overlong penalty (verl's key).", factory=OverlongConfig
    )
    max_resp_len: int | None = option(None, "L_max in tokens; required when the overlong penalty is on. [P]")

    def __post_init__(self):
        self._check_fields()
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        self.routing  # noqa: B018 - a prefix claimed by both scorers is an error now, not at the first sample
        if self.overlong.enable:
            if self.overlong.len <= 0:
                raise ValueError(f"overlong_buffer_cfg.len must be > 0 when enabled, got {self.overlong.len}")
            if self.max_resp_len is None or self.max_resp_len < self.overlong.len:
                raise ValueError(
                    f"max_resp_len ({self.max_resp_len}) must be set and "
                    f">= overlong_buffer_cfg.len ({self.overlong.len})"
                )

    @property
    def routing(self) -> RoutingConfig:
        return RoutingConfig(self.math_sources, self.code_sources, self.math, self.code)

    @property
    def overlong(self) -> OverlongConfig:
        return self.overlong_buffer_cfg


def parse_reward_kwargs(reward_kwargs: dict | None) -> XrpoRewardConfig:
    """The typed config from the plain dict in `reward.reward_kwargs`; unknown keys raise, nested ones too."""
    try:
        return XrpoRewardConfig.from_dict(dict(reward_kwargs or {}))
    except ValueError as e:
        raise ValueError(f"reward.reward_kwargs: {e}") from None


def overlong_reward(length: int, max_resp_len: int, buffer_len: int, penalty_factor: float) -> float:
    """DAPO soft overlong punishment.

    R_len(y) = min( -(|y| - (L_max - L_cache)) / L_cache * penalty_factor, 0 )
    """
    exceed = length - (max_resp_len - buffer_len)
    return min(-exceed / buffer_len * penalty_factor, 0.0)


def _is_verl_default(fn) -> bool:
    return fn is None or fn is default_compute_score or getattr(fn, "func", None) is default_compute_score


def normalise_result(result) -> dict:
    """A scorer result (float or dict) reduced to the one schema, `ScoreResult` (result.py)."""
    return ScoreResult.of(result).to_dict()


@register("xrpo")
class XrpoRewardManager(RewardManagerBase):
    """Routes each trajectory to our math or code scorer; see the module docstring."""

    def __init__(self, config, tokenizer, compute_score, **kwargs):
        # kwargs: verl passes reward_router_address / reward_model_tokenizer (unused: rule rewards only).
        super().__init__(config, tokenizer, compute_score)
        reward_kwargs = config.reward.get("reward_kwargs", None)  # optional section, as for verl's `dapo`
        if OmegaConf.is_config(reward_kwargs):
            reward_kwargs = OmegaConf.to_container(reward_kwargs, resolve=True)
        self.settings = parse_reward_kwargs(reward_kwargs)
        if _is_verl_default(compute_score):
            self.score_fn = partial(routed_compute_score, routing=self.settings.routing)
            # a sandbox service that is down would fail every code row of the first step: stop here
            self.settings.code.check_service()
        else:
            self.score_fn = compute_score
        self.is_async_score = inspect.iscoroutinefunction(self.score_fn)
        # asyncio primitives bind to the loop that first uses them: one semaphore per running loop.
        self._semaphores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._executor = ThreadPoolExecutor(self.settings.max_concurrency, thread_name_prefix="xrpo-reward")

    async def _score(self, data_source, solution_str, ground_truth, extra_info) -> dict:
        kwargs = dict(
            data_source=data_source, solution_str=solution_str, ground_truth=ground_truth, extra_info=extra_info
        )
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.setdefault(loop, asyncio.Semaphore(self.settings.max_concurrency))
        async with semaphore:
            if self.is_async_score:
                return await self.score_fn(**kwargs)
            return await loop.run_in_executor(self._executor, partial(self.score_fn, **kwargs))

    async def run_single(self, data: DataProto) -> dict:
        received_at = time.time()  # the trajectory's generation has just ended (the sandbox's share reads it)
        item = data[-1:][0]  # multi-output trajectories: the last sequence carries the final answer
        response_ids = item.batch["responses"]
        length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        response_str = self.tokenizer.decode(response_ids[:length], skip_special_tokens=True)
        extra_info = dict(item.non_tensor_batch.get("extra_info", None) or {})  # copied: never mutate the batch
        result = normalise_result(
            await self._score(
                item.non_tensor_batch["data_source"],
                response_str,
                item.non_tensor_batch["reward_model"]["ground_truth"],
                extra_info,
            )
        )
        reward = result["score"]
        info = {**result, "length": length, "received_at": received_at}
        overlong = self.settings.overlong
        if overlong.enable:
            penalty = overlong_reward(length, self.settings.max_resp_len, overlong.len, overlong.penalty_factor)
            reward += penalty
            if overlong.log:
                info["overlong_reward"] = penalty
                info["overlong"] = penalty < 0
        return {"reward_score": reward, "reward_extra_info": info}


__all__ = ["RESULT_KEYS", "XrpoRewardConfig", "XrpoRewardManager", "overlong_reward", "parse_reward_kwargs"]
