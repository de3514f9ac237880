"""The `hf` rollout backend: verl's replica / server / adapter interface on transformers' `generate`.

verl 0.9.1 only knows vLLM, SGLang and TRT-LLM (workers/rollout/base.py:89-93, replica.py:388-390).
Selected with `actor_rollout_ref.rollout.name=hf`; registered by `xrpo_verl.cpu.register` when the CPU switch
is on. Three pieces, as verl wires hybrid (colocated, `sync`) rollout:

- `HFReplica` (driver/TaskRunner side): launches one `HFServer` Ray actor per replica.
- `HFServer` (Ray actor): token ids plus per-token log-probs for each request, returned as soon as
  its row is finished (so its reward is judged while longer rows still decode); takes weights as a
  state dict. Two engines (`HFEngineConfig.engine`, set by `rollout.engine_kwargs.hf.engine`):
  `generate` (default) batches the requests that arrive together into `model.generate` calls, each
  of which runs to its longest row before the next call starts; `continuous` hands every request to
  transformers' continuous batching, which admits it into the running batch between decoding steps
  as vLLM's scheduler does, with no padding.
- `HFServerAdapter` (inside each actor worker): receives the actor's weights each step
  (workers/engine_workers.py:728-826, naive sync path) and forwards them to its server.
"""

import asyncio
import itertools
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import ray
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.generation.configuration_utils import ContinuousBatchingConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from xrpo_verl.config import Config, check_range, option
from xrpo_verl.verl_adapters.micro_batches import padded_cuts

BACKEND_NAME = "hf"
ADAPTER_PATH = "xrpo_verl.cpu.hf_rollout.HFServerAdapter"
# A batch closes once no request has arrived for BATCH_QUIET_S (or BATCH_MAX_WAIT_S after its
# first request). The agent loop submits a step's prompts concurrently, but each one first goes
# through a tokenizer thread and the load balancer actor, so on a busy machine they trickle in: a
# fixed window split a step into several `generate` calls, each paying the full number of decoding
# steps. Waiting for a quiet gap costs at most one gap per call.
BATCH_QUIET_S = 0.05
BATCH_MAX_WAIT_S = 1.0
# A batch is left-padded to its longest prompt, and prefill pays for every padded position: one ICL
# prompt (worked examples) among plain ones made every row of its `generate` call as wide as the
# ICL prompt. So a batch is cut into calls of similar prompt lengths when that saves more than the
# extra call costs. A call's fixed cost (the decoding loop's per-step overhead) is about what this
# many padded prompt positions cost on the tiny model: the ratio of the two, fitted on `generate`
# calls of 8-64 rows x 16-200 prompt tokens (RESULTS.md, "Step cost", the hf path).
CALL_COST_POSITIONS = 512


@dataclass
class HFEngineConfig(Config):
    """The hf server's engine (`actor_rollout_ref.rollout.engine_kwargs.hf.*`)."""

    engine: Literal["generate", "continuous"] = option(
        "generate",
        "generate: requests arriving together share `model.generate` calls, each run to its longest row; "
        "continuous: requests join the running batch between decoding steps (transformers' continuous "
        "batching), so a planner round's rollouts start while the last round's still decode (no faster on "
        "the CPU settings: benchmarks/RESULTS.md). [I]",
    )
    max_batch_tokens: int = option(
        1024, "Continuous engine: most tokens (prompt chunks and decoding rows) in one forward pass. [I]"
    )
    block_size: int = option(32, "Continuous engine: tokens per block of its paged KV cache. [I]")
    cache_tokens: int = option(
        16384,
        "Continuous engine: KV cache size in tokens (at least one max_model_len sequence); requests beyond it "
        "wait for blocks to free. [I]",
    )

    def __post_init__(self) -> None:
        self._check_fields()
        check_range("HFEngineConfig.max_batch_tokens", self.max_batch_tokens, lo=1)
        check_range("HFEngineConfig.block_size", self.block_size, lo=1)
        check_range("HFEngineConfig.cache_tokens", self.cache_tokens, lo=1)


def server_actor_name(replica_rank: int, node_rank: int = 0) -> str:
    """The Ray actor name shared by the replica (creates it) and the adapter (looks it up)."""
    return f"hf_server_{replica_rank}_{node_rank}"


def max_new_tokens(num_prompt_tokens: int, prompt_length: int, response_length: int, max_model_len: int) -> int:
    """Token budget of one request, the rule of vLLM's server (vllm_async_server.py:601-615).

    min(response_length, prompt_length + response_length - |prompt|), clamped to
    [1, max_model_len - |prompt|]; a prompt with no room left is an error.
    """
    room = max_model_len - num_prompt_tokens
    if room < 1:
        raise ValueError(
            f"prompt of {num_prompt_tokens} tokens leaves no room to generate within max_model_len={max_model_len}"
        )
    budget = min(response_length, prompt_length + response_length - num_prompt_tokens)
    return max(1, min(budget, room))


@dataclass(frozen=True)
class SamplingSettings:
    """verl's sampling params in HF terms; requests with equal settings share a batch."""

    do_sample: bool  # False for temperature 0 (verl's greedy validation)
    temperature: float
    top_k: int  # 0 = off (verl sends -1 for off)
    top_p: float
    repetition_penalty: float

    @classmethod
    def from_verl(cls, params: dict) -> "SamplingSettings":
        temperature = float(params.get("temperature", 1.0))
        top_k = int(params.get("top_k", -1))
        top_p = float(params.get("top_p", 1.0))
        if temperature < 0:
            raise ValueError(f"temperature={temperature}: must be >= 0 (0 means greedy)")
        if top_k < -1:
            raise ValueError(f"top_k={top_k}: must be -1 (off), 0 (off) or a positive count")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p}: must be in (0, 1]")
        do_sample = temperature > 0
        return cls(
            do_sample=do_sample,
            temperature=temperature if do_sample else 1.0,
            top_k=max(top_k, 0),
            top_p=top_p,
            repetition_penalty=float(params.get("repetition_penalty", 1.0)),
        )

    def generation_config(
        self, max_tokens: int, eos_ids: list[int], pad_id: int, scores: bool = True
    ) -> GenerationConfig:
        # A fresh config, so defaults from the model's generation_config.json (e.g. top_k=50) never leak in.
        return GenerationConfig(
            max_new_tokens=max_tokens,
            do_sample=self.do_sample,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            repetition_penalty=self.repetition_penalty,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
            **({"output_scores": True, "return_dict_in_generate": True} if scores else {}),
        )


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    settings: SamplingSettings
    future: asyncio.Future


def trim_response(tokens: list[int], max_tokens: int, eos_ids: set[int]) -> int:
    """Length of a generated row kept as the response: up to and including the first EOS."""
    tokens = tokens[:max_tokens]
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return i + 1
    return len(tokens)


def length_buckets(lengths: list[int], max_batch: int, call_cost: int = CALL_COST_POSITIONS) -> list[list[int]]:
    """Requests (by prompt length) grouped into `generate` calls: the indices of each call.

    Sorted by length, then cut into consecutive runs of at most `max_batch` that minimise
    sum over calls of (rows x longest prompt + call_cost): the actor's micro-batch cut
    (`micro_batches.padded_cuts`), with a `generate` call's fixed cost.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch = {max_batch} must be >= 1")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    cuts = padded_cuts([lengths[i] for i in order], max_batch, call_cost)
    return [order[cut.start : cut.stop] for cut in cuts]


class EarlyReturn(StoppingCriteria):
    """Hands each row of a `generate` call to `deliver(row, tokens, log_probs)` at the decoding step
    that finishes it (its first EOS, or its own token budget), while longer rows still decode.

    A stopping criterion that never stops anything: HF calls it after every step with the ids so far
    and the processed scores the step sampled from (`output_scores=True`), which is all a finished
    row's result needs; the row is then the same as the one read from `generate`'s output.
    """

    def __init__(self, width: int, max_tokens: list[int], eos_ids: set[int], deliver: Callable) -> None:
        self.width, self.max_tokens, self.eos_ids, self.deliver = width, max_tokens, eos_ids, deliver
        self.delivered: set[int] = set()

    def __call__(self, input_ids: torch.Tensor, scores: tuple, **kwargs) -> torch.Tensor:
        steps = input_ids.shape[1] - self.width
        last = input_ids[:, -1].tolist()
        for row, token in enumerate(last):
            if row in self.delivered or not (token in self.eos_ids or steps >= self.max_tokens[row]):
                continue
            tokens = input_ids[row, self.width :].tolist()
            row_scores = torch.stack([step[row] for step in scores[:steps]]).float()  # (T, V)
            logps = torch.log_softmax(row_scores, dim=-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
            keep = trim_response(tokens, self.max_tokens[row], self.eos_ids)
            self.delivered.add(row)
            self.deliver(row, (tokens[:keep], logps[:keep].tolist()))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _resolve(future: asyncio.Future, result) -> None:
    """Set a request's result unless it already has one (a row delivered early is also in the call's output)."""
    if not future.done():
        future.set_result(result)


class HFServer:
    """Token-in/token-out server on one HF causal LM; made a Ray actor by `HFReplica`.

    Duck-types the methods verl calls on a vLLM server (`generate`, lifecycle hooks).
    """

    def __init__(
        self,
        model_path: str,
        prompt_length: int,
        response_length: int,
        max_model_len: int,
        max_batch: int,
        name: str = "hf_server",
        engine: HFEngineConfig | None = None,
    ):
        self.name = name
        self.engine = engine or HFEngineConfig()
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="sdpa")
        self.model.eval()
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.model.config.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos)
        pad = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else self.model.config.pad_token_id
        self.pad_id = self.eos_ids[0] if pad is None else int(pad)
        self.prompt_length, self.response_length = prompt_length, response_length
        self.max_model_len, self.max_batch = max_model_len, max_batch
        self.global_steps = None
        self.num_generate_calls = 0  # model.generate calls; with batching < number of requests
        self.num_requests = 0
        self._model_lock = threading.Lock()  # generation and weight loads never overlap
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        # continuous engine: one manager per sampling settings (its sampler is fixed when it starts)
        self._managers: dict[SamplingSettings, object] = {}
        self._request_ids = itertools.count()
        self._in_flight = 0

    # ---- generation ----------------------------------------------------------------------
    async def generate(
        self, prompt_ids, sampling_params: dict, request_id: str, image_data=None, video_data=None, **kwargs
    ) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise ValueError("the hf rollout backend serves text only; got image_data/video_data")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        budget = max_new_tokens(len(prompt_ids), self.prompt_length, self.response_length, self.max_model_len)
        requested = params.pop("max_tokens", params.pop("max_new_tokens", None))
        max_tokens = budget if requested is None else max(1, min(int(requested), self.max_model_len - len(prompt_ids)))
        want_logprobs = bool(params.pop("logprobs", False))
        settings = SamplingSettings.from_verl(params)
        if self.engine.engine == "continuous":
            token_ids, log_probs = await self._generate_continuous(prompt_ids, max_tokens, settings)
        else:
            if self._worker is None:
                self._queue = asyncio.Queue()
                self._worker = asyncio.create_task(self._serve_batches())
            future = asyncio.get_running_loop().create_future()
            await self._queue.put(_Request(prompt_ids, max_tokens, settings, future))
            token_ids, log_probs = await future
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if want_logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    # ---- continuous engine ---------------------------------------------------------------------
    async def _generate_continuous(
        self, prompt_ids: list[int], max_tokens: int, settings: SamplingSettings
    ) -> tuple[list[int], list[float]]:
        """One request through the continuous-batching manager of its sampling settings: admitted into
        the running batch at the next decoding step, handed back at the step that finishes it."""
        manager = self._manager(settings)
        future = asyncio.get_running_loop().create_future()
        request_id = f"hf{next(self._request_ids)}"

        def on_output(output) -> None:  # on this event loop, from the manager's thread
            if future.done():
                return
            if output.error is not None:
                future.set_exception(RuntimeError(f"hf continuous engine failed request {request_id}: {output.error}"))
            elif output.is_finished():
                future.set_result((list(output.generated_tokens), list(output.logprobs)))

        manager.register_result_handler(request_id, on_output)
        self._in_flight += 1
        try:
            manager.add_request(prompt_ids, request_id=request_id, max_new_tokens=max_tokens, eos_token_id=self.eos_ids)
            tokens, log_probs = await future
        finally:
            self._in_flight -= 1
        self.num_requests += 1
        keep = trim_response(tokens, max_tokens, set(self.eos_ids))
        return tokens[:keep], log_probs[:keep]

    def _manager(self, settings: SamplingSettings):
        """The running manager for `settings`, started on first use; its thread is a daemon, so it
        never holds the process open."""
        manager = self._managers.get(settings)
        if manager is not None:
            return manager
        cfg = ContinuousBatchingConfig(
            return_logprobs=True,
            block_size=self.engine.block_size,
            num_blocks=math.ceil(max(self.engine.cache_tokens, self.max_model_len) / self.engine.block_size),
            max_batch_tokens=self.engine.max_batch_tokens,
        )
        generation = settings.generation_config(self.response_length, self.eos_ids, self.pad_id, scores=False)
        with self._model_lock:
            manager = self.model.init_continuous_batching(generation_config=generation, continuous_batching_config=cfg)
        starter = threading.Thread(target=manager.start, daemon=True)  # the manager's thread inherits daemon
        starter.start()
        starter.join()
        self._managers[settings] = manager
        return manager

    def close(self) -> None:
        """Stop the continuous engine's managers (their requests finish first)."""
        for manager in self._managers.values():
            manager.stop(block=True)
        self._managers.clear()

    async def _next_batch(self) -> list[_Request]:
        """The first waiting request and every one that follows it with gaps under BATCH_QUIET_S."""
        batch = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BATCH_MAX_WAIT_S
        while (left := deadline - loop.time()) > 0:
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), min(BATCH_QUIET_S, left)))
            except TimeoutError:
                break
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def _serve_batches(self) -> None:
        while True:
            batch = await self._next_batch()
            groups: dict[SamplingSettings, list[_Request]] = {}
            for request in batch:
                groups.setdefault(request.settings, []).append(request)
            loop = asyncio.get_running_loop()
            for settings, requests in groups.items():
                for call in length_buckets([len(r.prompt_ids) for r in requests], self.max_batch):
                    chunk = [requests[i] for i in call]

                    def deliver(row: int, result, chunk=chunk, loop=loop) -> None:  # from the generating thread
                        loop.call_soon_threadsafe(_resolve, chunk[row].future, result)

                    try:
                        results = await asyncio.to_thread(self._generate_batch, settings, chunk, deliver)
                    except Exception as exc:  # hand the failure to every caller still waiting
                        for request in chunk:
                            if not request.future.done():
                                request.future.set_exception(exc)
                        continue
                    for request, result in zip(chunk, results, strict=True):
                        _resolve(request.future, result)

    def _generate_batch(
        self, settings: SamplingSettings, requests: list[_Request], deliver: Callable | None = None
    ) -> list[tuple[list[int], list[float]]]:
        """One left-padded `generate` for B requests; per-token log-probs of the sampled tokens.
        `deliver(row, result)`, if given, gets each row's result at the step that finishes it.

        Log-probs are log_softmax of HF's processed scores (after temperature/top-k/top-p), i.e.
        verl's default `rollout.logprobs_mode=processed_logprobs`.
        """
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)  # (B, P)
        attention_mask = torch.zeros_like(input_ids)
        for row, request in enumerate(requests):
            n = len(request.prompt_ids)
            input_ids[row, width - n :] = torch.tensor(request.prompt_ids)
            attention_mask[row, width - n :] = 1
        max_tokens = max(r.max_tokens for r in requests)
        config = settings.generation_config(max_tokens, self.eos_ids, self.pad_id)
        early = []
        if deliver is not None:
            early = [EarlyReturn(width, [r.max_tokens for r in requests], set(self.eos_ids), deliver)]
        with self._model_lock, torch.no_grad():
            out = self.model.generate(
                input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                stopping_criteria=StoppingCriteriaList(early),
            )
        self.num_generate_calls += 1
        self.num_requests += len(requests)
        generated = out.sequences[:, width:]  # (B, T)
        scores = torch.stack(out.scores, dim=0).float()  # (T, B, V)
        token_logps = torch.log_softmax(scores, dim=-1).gather(-1, generated.T.unsqueeze(-1)).squeeze(-1).T  # (B, T)
        eos = set(self.eos_ids)
        results = []
        for row, request in enumerate(requests):
            tokens = generated[row].tolist()
            keep = trim_response(tokens, request.max_tokens, eos)
            results.append((tokens[:keep], token_logps[row, :keep].tolist()))
        return results

    # ---- weights ---------------------------------------------------------------------------
    def update_weights_from_state_dict(self, state: dict[str, torch.Tensor], global_steps=None) -> int:
        """Copy tensors in place; `state_dict(keep_vars=True)` includes tied aliases (lm_head)."""
        if self._in_flight:
            raise RuntimeError(
                f"weights pushed while {self._in_flight} requests are generating; verl syncs between steps"
            )
        params = self.model.state_dict(keep_vars=True)
        unknown = sorted(set(state) - set(params))
        if unknown:
            raise ValueError(f"weights {unknown[:5]} are not in the rollout model; it has e.g. {sorted(params)[:5]}")
        with self._model_lock, torch.no_grad():
            for name, tensor in state.items():
                target = params[name]
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(f"weight {name}: shape {tuple(tensor.shape)} != rollout's {tuple(target.shape)}")
                target.data.copy_(tensor.to(target.dtype))
        if global_steps is not None:
            self.global_steps = global_steps
        return len(state)

    def stats(self) -> dict[str, int]:
        return {"generate_calls": self.num_generate_calls, "requests": self.num_requests}

    def get_server_address(self) -> str:
        # verl's router only uses the address as a dict key; there is no HTTP endpoint.
        return f"ray://{self.name}"

    def set_global_steps(self, global_steps) -> None:
        self.global_steps = global_steps

    # ---- lifecycle hooks verl calls on every server; weights stay resident on CPU ------------
    async def wake_up(self, tags=None) -> None:
        pass

    async def sleep(self) -> None:
        pass

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def wait_for_requests_to_drain(self) -> None:
        pass

    async def abort_all_requests(self, reject_request: bool = False) -> None:
        pass

    async def abort_request(self, request_id: str) -> None:
        pass

    async def resume_generation(self) -> None:
        pass

    async def start_profile(self, **kwargs) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


def model_dir(model_config) -> str:
    """Local model directory from an HFModelConfig or the raw `actor_rollout_ref.model` DictConfig."""
    from verl.utils.fs import copy_to_local

    local = getattr(model_config, "local_path", None) if not hasattr(model_config, "_get_node") else None
    return local or copy_to_local(model_config.path)


class HFReplica(RolloutReplica):
    """One `HFServer` actor per replica (replica.py: `launch_servers` is the only abstract method)."""

    async def launch_servers(self):
        if self.nnodes != 1:
            raise ValueError(f"the hf rollout backend runs on one node; replica needs nnodes={self.nnodes}")
        name = server_actor_name(self.replica_rank)
        cfg = self.config
        max_model_len = cfg.max_model_len or (cfg.prompt_length + cfg.response_length)
        server = (
            ray.remote(HFServer)
            # num_cpus=0: the TQ, agent-loop and reward actors already hold the logical CPUs.
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(
                model_dir(self.model_config),
                cfg.prompt_length,
                cfg.response_length,
                max_model_len,
                max(1, cfg.max_num_seqs),
                name,
                HFEngineConfig.from_dict(dict((cfg.engine_kwargs or {}).get("hf") or {})),
            )
        )
        address = await server.get_server_address.remote()  # surfaces a failed model load here
        self.servers = [server]
        self._server_handle = server
        self._server_address = address


class HFServerAdapter(BaseRollout):
    """Lives in each hybrid actor worker; pushes the actor's weights to its replica's server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        cfg = self.config
        world = cfg.tensor_model_parallel_size * cfg.data_parallel_size * cfg.pipeline_model_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.is_leader_rank = self.rollout_rank == 0  # read by CheckpointEngineWorker
        self.sleep_level = 1

    async def resume(self, tags: list[str]):
        pass

    async def release(self):
        pass

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise ValueError(f"hf rollout takes wire_format='named_tensors', got {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise ValueError("hf rollout has no LoRA adapter path; use model.lora.merge=True or no LoRA")
        state = {}
        # Every rank drains the generator: FSDP's full_tensor() inside it is a collective.
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            if self.is_leader_rank:
                state[name] = tensor.detach().to("cpu", copy=True)
        if self.is_leader_rank:
            server = ray.get_actor(server_actor_name(self.replica_rank))
            await server.update_weights_from_state_dict.remote(state, kwargs.get("global_steps"))
