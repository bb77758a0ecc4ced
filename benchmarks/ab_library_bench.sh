#!/usr/bin/env bash
# A/B of two builds of the library on one GPU: alternates ROUNDS times between libwsync.so.0 of
# <before dir> and of <after dir> (the same wsync-sync-bench, from <after dir>; LD_LIBRARY_PATH picks
# the library), so that drift of the machine hits both alike. Per round and build: the 1 MB model
# 1 -> 1 (the per-version fixed cost) and Llama-3-8B bf16 mixed 1 -> 1 and 2 -> 2 (ratio to a device
# copy). Prints one line per run; the benchmark's output goes to <out dir>.
# Usage: benchmarks/ab_library_bench.sh <before dir> <after dir> [out dir]
# Environment: ROUNDS (default 3), NPS (default "2 4"), EXTRA (more wsync-sync-bench arguments),
# OWN_BENCH=1: each side runs its own wsync-sync-bench (needed when the header changed in a way the
# other library refuses, e.g. a new initializer value).
set -u
before=$1
after=$2
out=${3:-.}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run_one() {  # label lib_dir np model round
  local label=$1 lib=$2 np=$3 model=$4 round=$5 model_args log
  model_args=(--model llama3-8b --warmup 2 --iters 10)
  [ "$model" = 1MB ] && model_args=(--bytes 1048576 --warmup 20 --iters 200)
  log="$out/ab_${label}_${model}_np${np}_r$round.log"
  LD_LIBRARY_PATH=$lib timeout 120 mpirun --oversubscribe --mca btl self,vader -x LD_LIBRARY_PATH \
    -np "$np" "$([ "${OWN_BENCH:-0}" = 1 ] && echo "$lib" || echo "$after")/wsync-sync-bench" --memory device --dtype bfloat16 --layout mixed \
    --no-baseline "${model_args[@]}" ${EXTRA:-} >"$log" 2>&1
  local rc=$?
  echo "$label $model np$np round $round rc=$rc $(grep -E '^\{' "$log" | tail -1 | python3 -c '
import json, sys
d = json.loads(sys.stdin.read() or "{}")
print(" ".join(f"{k} {d.get(k)}" for k in
               ("wsync_seconds", "wsync_seconds_min", "ratio_to_device_copy", "verified")))')"
}
for round in $(seq 1 "${ROUNDS:-3}"); do
  for np in ${NPS:-2 4}; do
    for model in 1MB llama3-8b; do
      [ "$model" = 1MB ] && [ "$np" != 2 ] && continue
      run_one before "$before" "$np" "$model" "$round"
      run_one after "$after" "$np" "$model" "$round"
    done
  done
done
