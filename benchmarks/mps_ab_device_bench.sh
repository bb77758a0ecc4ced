#!/usr/bin/env bash
# One GPU shared by several processes, with and without MPS (benchmarks/with_mps.sh), alternating
# ROUNDS times so that drift of the machine hits both alike: for 1 -> 1 and 2 -> 2 processes, the
# Llama-3-8B-shaped bf16 model (mixed layout: ratio to a device copy) and a 1 MB generic model
# (the per-version fixed cost). Prints one line per run.
# Usage: benchmarks/mps_ab_device_bench.sh <dir> [out dir]
#   dir holds wsync-sync-bench and its libwsync.so.0 (a build's programs, copied).
# Environment: ROUNDS (default 3), NPS (default "2 4").
set -u
dir=$1
out=${2:-.}
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_one() {  # mode np round
  local mode=$1 np=$2 round=$3 mps_args=() log
  [ "$mode" = mps ] && mps_args=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
  for model in llama3-8b 1MB; do
    local model_args=(--model llama3-8b --warmup 1 --iters 5)
    [ "$model" = 1MB ] && model_args=(--bytes 1048576 --warmup 3 --iters 200)
    log="$out/mps_ab_${mode}_${model}_np${np}_r$round.log"
    LD_LIBRARY_PATH=$dir timeout 60 mpirun --oversubscribe --mca btl self,vader "${mps_args[@]}" \
      -np "$np" "$dir/wsync-sync-bench" --memory device --dtype bfloat16 --layout mixed \
      --baseline-iters 1 "${model_args[@]}" >"$log" 2>&1
    echo "$mode $model np$np round $round rc=$? $(grep -E '^\{' "$log" | tail -1 |
      grep -o -E '"(wsync_seconds|ratio_to_device_copy)": [0-9.]+' | tr '\n' ' ')"
  done
}
for round in $(seq 1 "${ROUNDS:-3}"); do
  for np in ${NPS:-2 4}; do
    run_one plain "$np" "$round"
    "$here/with_mps.sh" bash -c "$(declare -f run_one); dir='$dir' out='$out'; run_one mps $np $round"
  done
done
