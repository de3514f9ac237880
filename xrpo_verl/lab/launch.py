"""Launch verl's real trainer (`python -m verl.trainer.main_ppo`) on CPU with the `hf` rollout.

`cpu_env()` turns the CPU switch on for the launched process and every Ray worker it starts;
`cpu_overrides()` holds the Hydra overrides a CPU run needs (each with the reason); the task's
reward comes with the run (`CpuRun.reward`), and the recipe files in
`xrpo_verl/lab/recipes/<name>.yaml` add the algorithm. `launch_vllm` runs the same with verl's
vLLM rollout on vLLM's CPU build (`.venv-vllm`). Used by the tests, the demo, the benchmarks and
`recipes/cpu/run.sh` (through `python -m xrpo_verl.lab train`).
"""

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from xrpo_verl import recipe_files
from xrpo_verl.config import Config, option
from xrpo_verl.cpu import vllm_cpu
from xrpo_verl.cpu.switches import CPU_SWITCH, VLLM_SWITCH

# Package data, so an installed wheel runs the CPU recipes and the demo from any directory.
RECIPE_DIR = Path(__file__).resolve().parent / "recipes"
RAY_START_TIMEOUT = "The current node timed out during startup"
RAY_START_ATTEMPTS = 3
# The arith and addition tasks' reward: the in-process arithmetic scorer as verl's custom reward.
ARITH_REWARD = (
    "reward.custom_reward_function.path=pkg://xrpo_verl.lab.arith",
    "reward.custom_reward_function.name=compute_score",
)


@dataclass(frozen=True)
class CpuRun(Config):
    """Size of one CPU training run."""

    model_path: str = option(help="HF model directory (the tiny model from `xrpo_verl.lab.tiny_model`). [I]")
    train_file: str = option(help="verl RL parquet for training. [I]")
    val_file: str = option(help="verl RL parquet for validation. [I]")
    out_dir: str = option(help="Run directory: checkpoints, metrics.jsonl, trainer.log. [I]")
    steps: int = option(2, "trainer.total_training_steps. [I]")
    prompts_per_step: int = option(4, "data.train_batch_size (prompts per step). [I]")
    n: int = option(4, "actor_rollout_ref.rollout.n, responses per prompt (the planner's average n for XRPO). [I]")
    max_prompt_length: int = option(64, "data.max_prompt_length, tokens. [I]")
    max_response_length: int = option(24, "data.max_response_length, tokens (responses here are 12-17 tokens). [I]")
    lr: float = option(
        3e-5,
        "Actor learning rate (the learning setting's: 1e-4 made the arith model forget, not learn addition). [I]",
    )
    save_freq: int = option(-1, "trainer.save_freq (-1: never). [I]")
    micro_batch_size: int = option(
        16,
        "Rows per padded micro-batch of the actor's passes (cut to divide a step's rows); the xrpo trainer "
        "sorts each mini-batch by length, so an ICL or guided row pads only its own micro-batch. [I]",
    )
    reward: tuple[str, ...] = option(
        ARITH_REWARD,
        "The task's reward, as Hydra overrides (default: the arithmetic scorer of the arith and addition tasks). [I]",
    )

    def __post_init__(self):
        self._check_fields()
        if self.steps < 1 or self.prompts_per_step < 1 or self.n < 1 or self.micro_batch_size < 1:
            raise ValueError(
                "steps, prompts_per_step, n and micro_batch_size must be >= 1; got "
                f"{self.steps}, {self.prompts_per_step}, {self.n}, {self.micro_batch_size}"
            )

    @classmethod
    def from_setting(cls, setting, model_dir, train_file, val_file, out_dir, save_freq: int = -1) -> "CpuRun":
        """The run of a task's setting (`learning_setting.LearningSetting`, `code_rl.CodeSetting`): its
        steps, prompts_per_step, n, max_response_length, lr and reward, on the given model and data."""
        sizes = ("steps", "prompts_per_step", "n", "max_response_length", "lr")
        return cls(
            str(model_dir),
            str(train_file),
            str(val_file),
            str(out_dir),
            save_freq=save_freq,
            reward=tuple(setting.reward_overrides()),
            **{k: getattr(setting, k) for k in sizes},
        )

    @property
    def metrics_path(self) -> Path:
        return Path(self.out_dir) / "metrics.jsonl"

    @property
    def ckpt_dir(self) -> Path:
        return Path(self.out_dir) / "ckpt"


def cpu_env(base: dict | None = None) -> dict:
    """Environment for a CPU run; Ray workers inherit it from the launched driver."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            CPU_SWITCH: "1",
            # Imported at `import verl` before entry points, so the CPU platform registers even if
            # another plugin module fails to import (verl logs plugin errors at DEBUG only).
            "VERL_USE_EXTERNAL_MODULES": "xrpo_verl.cpu.register",
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DEDUP_LOGS": "0",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    for key, value in LEAN_RAY_ENV.items():
        env.setdefault(key, value)
    return env


# Ray's background work, sized for a cluster node, on a 2-core machine. Read by the raylet and
# every worker, which the driver starts with its own environment. With `num_cpus=16` (see
# cpu_overrides) Ray prestarts a Python worker per logical CPU; most are never used and all start
# at once on 2 cores. Metrics collection makes every worker and agent report every few seconds.
# Measured by benchmarks/cpu_step_profile.py (RESULTS.md, "CPU step").
LEAN_RAY_ENV = {
    "RAY_prestart_worker_first_driver": "0",
    "RAY_enable_worker_prestart": "0",
    "RAY_enable_metrics_collection": "0",
}


def cpu_overrides(run: CpuRun) -> list[str]:
    """Hydra overrides for verl on CPU, each with its reason."""
    mini = run.prompts_per_step
    # verl cuts a mini-batch into equal micro-batches: the size must divide its rows
    micro = math.gcd(run.micro_batch_size, mini * run.n)
    return [
        f"data.train_files={run.train_file}",
        f"data.val_files={run.val_file}",
        f"data.train_batch_size={run.prompts_per_step}",
        f"data.max_prompt_length={run.max_prompt_length}",
        f"data.max_response_length={run.max_response_length}",
        "data.dataloader_num_workers=0",  # 8 loader processes would swamp 2 cores
        f"actor_rollout_ref.model.path={run.model_path}",
        # True packs the batch into one row, and sdpa on CPU then attends over all of it under a
        # block mask: cost grows with the square of the batch's tokens (slower here, RESULTS.md)
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # default flash_attention_2
        # verl's default recomputes each layer's forward in the backward pass to save memory, which
        # a tiny model on CPU does not need: it only makes the update dearer (RESULTS.md)
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 wants an accelerator
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
        "actor_rollout_ref.ref.fsdp_config.model_dtype=fp32",
        # FSDP computes in bf16 unless told (transformer_impl.py:391-398): slow on CPU, and the
        # actor's log-probs would drift from the fp32 rollout's far past the e2e tests' bound on
        # training/rollout_probs_diff_max.
        "++actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "++actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"actor_rollout_ref.actor.optim.lr={run.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
        # one micro-batch per step padded every row to the step's longest (an ICL prompt); smaller
        # ones, length-sorted by the xrpo trainer, keep the gradient (test_micro_batches.py)
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.rollout.name=hf",
        f"actor_rollout_ref.rollout.n={run.n}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        *run.reward,
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        f"trainer.save_freq={run.save_freq}",
        f"trainer.total_training_steps={run.steps}",
        "trainer.logger=[console,file]",
        "trainer.project_name=xrpo_cpu",
        "trainer.experiment_name=run",
        f"trainer.default_local_dir={run.ckpt_dir}",
        # TaskRunner, TQ controller, storage units, agent-loop and reward workers each reserve a
        # logical CPU: 2 real ones would hang the scheduler. The fake GPU is the FSDP rank's bundle.
        "ray_kwargs.ray_init.num_cpus=16",
        "+ray_kwargs.ray_init.num_gpus=1",
        "+ray_kwargs.ray_init.include_dashboard=False",  # its server and heads poll every worker
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """verl's console logger line `step:3 - key:value - ...` (after any Ray prefix) as (step, metrics)."""
    at = line.find("step:")
    if at < 0:
        return None
    fields = line[at:].strip().split(" - ")
    try:
        step = int(fields[0].removeprefix("step:"))
    except ValueError:
        return None
    metrics = {}
    for item in fields[1:]:
        key, _, value = item.rpartition(":")
        try:
            metrics[key] = float(value)
        except ValueError:
            continue
    return step, metrics


def read_metrics(path: Path) -> dict[int, dict]:
    """verl's file-logger lines (`metrics.jsonl`) merged per step: {step: {metric: value}}; {} if absent."""
    if not path.exists():
        return {}
    out: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out.setdefault(row["step"], {}).update(row["data"])
    return out


def load_recipe(name: str) -> dict:
    """`RECIPE_DIR/<name>.yaml` with the files it extends: {"config_name", "overrides"} (recipe_files.py)."""
    path = recipe_files.recipe_path(RECIPE_DIR, name)
    if not path.exists():
        known = sorted(p.stem for p in RECIPE_DIR.glob("[!_]*.yaml"))
        raise ValueError(f"unknown CPU recipe {name!r}; available in {RECIPE_DIR}: {known}")
    stack = recipe_files.layers([path], RECIPE_DIR)
    return {"config_name": recipe_files.config_name(stack), "overrides": recipe_files.overrides(stack)}


def xrpo_sizes(run: CpuRun) -> list[str]:
    """Planner and prefix sizes tied to rollout.n, so XRPO/ExTra stay compute-matched to GRPO."""
    return [
        f"algorithm.xrpo.planner.n_avg={run.n}",
        f"algorithm.xrpo.planner.n_base={max(2, run.n // 2)}",
        f"algorithm.xrpo.planner.n_max={2 * run.n}",
        f"algorithm.extra.prefix.n_suffix={run.n}",
    ]


def trainer_command(run: CpuRun, recipe: dict, extra: list[str] = ()) -> list[str]:
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo"]
    overrides = cpu_overrides(run)
    if recipe.get("config_name"):
        from xrpo_verl.verl_adapters.config import CONFIG_DIR

        cmd += ["--config-path", str(CONFIG_DIR), "--config-name", recipe["config_name"]]
        overrides += xrpo_sizes(run)
    # Later overrides of the same key win in Hydra, so the recipe and the caller come last.
    return cmd + overrides + list(recipe.get("overrides", [])) + list(extra)


PARTS = ("planner", "icl", "sharpening", "novelty", "prefix")


def compose_recipe(name: str):
    """The trainer config of a recipe on our trainer config (`config_name`), composed by Hydra as
    `main_ppo` composes it, for a placeholder run of 8 prompts x 8 rollouts."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    run = CpuRun("/model", "/train.parquet", "/val.parquet", "/out", steps=3, prompts_per_step=8, n=8)
    cmd = trainer_command(run, load_recipe(name))
    if "--config-path" not in cmd:
        raise ValueError(f"recipe {name!r} runs verl's own config, not the xrpo trainer's")
    config_dir, config_name = cmd[cmd.index("--config-path") + 1], cmd[cmd.index("--config-name") + 1]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=config_name, overrides=cmd[cmd.index("--config-name") + 2 :])


def recipe_parts(name: str) -> dict[str, bool]:
    """Which of XRPO's and ExTra's parts (`PARTS`) a CPU recipe switches on (all off for plain verl)."""
    if not load_recipe(name).get("config_name"):
        return dict.fromkeys(PARTS, False)
    from xrpo_verl.verl_adapters.config import validate_trainer_config

    settings = validate_trainer_config(compose_recipe(name), check_embedder=False)
    return {part: bool(getattr(settings, f"use_{part}")) for part in PARTS}


COMMAND_SEPARATOR = " \\\n  "  # one argument a line, as a shell continues a command


def write_command(out_dir: Path, cmd: list[str]) -> None:
    """Keep a run's trainer command in `<out_dir>/command.txt`, readable and runnable from a shell."""
    (Path(out_dir) / "command.txt").write_text(COMMAND_SEPARATOR.join(cmd) + "\n")


def read_command(out_dir: Path) -> list[str]:
    """The trainer command `write_command` kept for a run."""
    return (Path(out_dir) / "command.txt").read_text().rstrip("\n").split(COMMAND_SEPARATOR)


def launch(
    run: CpuRun,
    recipe_name: str,
    extra: list[str] = (),
    timeout_s: float = 900,
    echo: bool = False,
    env_updates: dict | None = None,
    on_line: Callable[[str], None] | None = None,
) -> subprocess.CompletedProcess:
    """Run the trainer to completion (killed after `timeout_s`). Its output is appended to
    `<out_dir>/trainer.log` and returned as `stdout`; its metrics are appended to `metrics.jsonl`.
    `on_line` sees each output line as it comes (the demo's progress bar); if it raises, the
    trainer is killed and the exception propagates."""
    out = Path(run.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = cpu_env()
    env.update(env_updates or {})
    # verl's FileLogger truncates its file (utils/tracking.py:541); log each launch to its own
    # file and append it to metrics.jsonl, so a resumed run keeps the earlier steps.
    part = out / "metrics.part.jsonl"
    part.unlink(missing_ok=True)
    env["VERL_FILE_LOGGER_PATH"] = str(part)
    cmd = trainer_command(run, load_recipe(recipe_name), extra)
    write_command(out, cmd)
    start = time.time()
    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        lines: list[str] = []
        with open(out / "trainer.log", "a") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            watchdog = threading.Timer(timeout_s, proc.kill)  # a hung trainer still ends the call
            watchdog.start()
            try:
                for line in proc.stdout:
                    log.write(line)
                    lines.append(line)
                    if on_line is not None:
                        on_line(line)
                    if echo and ("step:" in line or "Error" in line or "Traceback" in line):
                        print(f"  [{time.time() - start:5.0f}s] {line.rstrip()[:200]}", flush=True)
                proc.wait()
            except BaseException:  # on_line raised, or an interrupt: the trainer must not outlive the call
                proc.kill()
                proc.wait()
                raise
            finally:
                watchdog.cancel()
        # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py); on a machine
        # loaded by other jobs it misses that before any step ran, and starting again is safe.
        if proc.returncode == 0 or RAY_START_TIMEOUT not in "".join(lines[-40:]) or part.exists():
            break
        if echo:
            print(f"  Ray did not start in time (attempt {attempt}/{RAY_START_ATTEMPTS}); starting again", flush=True)
    if time.time() - start >= timeout_s:
        lines.append(f"\n[xrpo_verl.lab.launch] killed after the {timeout_s:.0f}s timeout\n")
    if part.exists():
        with open(run.metrics_path, "a") as merged:
            merged.write(part.read_text())
        part.unlink()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout="".join(lines))


def vllm_env(base: dict | None = None) -> dict:
    """Environment for a vLLM-on-CPU trainer run: the CPU switch, the vLLM switch and vLLM's CPU knobs."""
    env = cpu_env(base)
    env[VLLM_SWITCH] = "1"
    for key, value in vllm_cpu.VLLM_CPU_ENV.items():
        env.setdefault(key, value)
    # vLLM's engine and the FSDP rank share 2 cores; one OpenMP thread each would leave vLLM's
    # batched decode idle half the time.
    env["OMP_NUM_THREADS"] = env.get("XRPO_VLLM_OMP_THREADS", "2")
    return env


def vllm_overrides(max_model_len: int, max_num_seqs: int = 64) -> list[str]:
    """Hydra overrides turning a CPU run (`launch.cpu_overrides`) into a vLLM one; applied after it."""
    return [
        "actor_rollout_ref.rollout.name=vllm",
        # fp32 on both sides: the rollout's log-probs can then be compared with the actor's.
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.rollout.enforce_eager=True",  # no CUDA graphs on CPU
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",  # vLLM's CPU worker refuses sleep mode
        # ...so verl must not call the engine's sleep/wake_up between rollout and training (the
        # hybrid replica does when free_cache_engine is on); there is no device memory to free anyway.
        "actor_rollout_ref.rollout.free_cache_engine=False",
        f"actor_rollout_ref.rollout.max_model_len={max_model_len}",
        f"actor_rollout_ref.rollout.max_num_seqs={max_num_seqs}",
        # The default `dummy` load format is kept, as on GPU: the served weights are random until
        # verl's first push, so a working rollout proves that push.
        "actor_rollout_ref.rollout.load_format=dummy",
    ]


def launch_vllm(
    run: CpuRun, recipe_name: str, extra: list[str] = (), timeout_s: float = 1800, env_updates: dict | None = None
) -> subprocess.CompletedProcess:
    """`launch` with verl's vLLM rollout: the same CPU run, the vLLM switch and overrides added last.

    Checks this environment first, so a wrong one fails here with one line instead of inside a Ray worker.
    """
    problem = vllm_cpu.environment_problem(True, True, vllm_cpu.installed_vllm(), vllm_cpu.cpu_flags())
    if problem:
        raise vllm_cpu.WrongEnvironment(problem)
    max_positions = json.loads((Path(run.model_path) / "config.json").read_text())["max_position_embeddings"]
    knobs = {VLLM_SWITCH, "OMP_NUM_THREADS", *vllm_cpu.VLLM_CPU_ENV}
    env = {k: v for k, v in vllm_env().items() if k in knobs}
    env.update(env_updates or {})
    return launch(run, recipe_name, [*vllm_overrides(max_positions), *extra], timeout_s=timeout_s, env_updates=env)
