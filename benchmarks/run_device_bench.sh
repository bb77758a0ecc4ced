#!/usr/bin/env bash
# Records wsync-sync-bench on device memory: the Llama-3-8B-shaped bfloat16 model (16.06 GB, real
# tensor names and shapes), 2 trainer ranks (FSDP-like) -> 2 rollout ranks (one replica of TP 2),
# all four processes on one GPU (CUDA IPC one-sided writes), warmup 1 + 3 timed versions each.
#
# Usage:
#   benchmarks/run_device_bench.sh <wsync-sync-bench binary> [results.jsonl]
# Appends one JSON line per configuration to the results file (default: ./device_bench_results.jsonl;
# a failed run appends {"args": ..., "failed": <exit status>}), and the full output to the
# matching .log file. Configurations, in order of priority:
#   1. --layout mixed                        (vLLM-like TP: ratio to the device copy, flip p99)
#   2. --layout differ                       (every tensor split along its last dim)
#   3. --layout mixed --snapshot --copy-flip (publish blocking time, copy flip)
#   4. --layout match                        (the trainers' own boxes)
# Each run is bounded by RUN_TIMEOUT_S (default 110 s) and the whole script by TOTAL_BUDGET_S
# (default 330 s): a configuration that cannot start with at least 40 s left is skipped.
# Environment: MPIRUN (default mpirun), MPIRUN_ARGS (default "--mca btl self,vader"), CUDA_DEVICE
# (default 0), BENCH_ARGS (extra flags for every run).
# Exit status: 0 when every configuration ran and verified; 77 when there is no usable GPU; 1 else.
set -u

if [[ $# -lt 1 || ! -x "$1" ]]; then
  echo "usage: $0 <path to wsync-sync-bench> [results.jsonl]" >&2
  exit 2
fi
BIN=$1
RESULTS=${2:-device_bench_results.jsonl}
LOG=${RESULTS%.jsonl}.log
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_ARGS=${MPIRUN_ARGS:---mca btl self,vader}
# Under benchmarks/with_mps.sh the ranks are clients of its MPS daemon.
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && MPIRUN_ARGS+=" -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY"
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-110}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-330}
CUDA_DEVICE=${CUDA_DEVICE:-0}
BENCH_ARGS=${BENCH_ARGS:-}

CONFIGS=(
  "--layout mixed"
  "--layout differ"
  "--layout mixed --snapshot --copy-flip"
  "--layout match"
)
COMMON="--memory device --model llama3-8b --dtype bfloat16 --warmup 1 --iters 3 --cuda-device $CUDA_DEVICE"

start=$(date +%s)
status=0
echo "# $(date -u +%FT%TZ) $BIN" >>"$LOG"
for cfg in "${CONFIGS[@]}"; do
  left=$((TOTAL_BUDGET_S - ($(date +%s) - start)))
  if ((left < 40)); then
    echo "[run_device_bench] skipping '$cfg': ${left}s of the budget left" | tee -a "$LOG" >&2
    status=1
    continue
  fi
  limit=$((left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S))
  args="$COMMON $cfg $BENCH_ARGS"
  echo "[run_device_bench] $(date +%T) $args (limit ${limit}s)" | tee -a "$LOG"
  out=$(mktemp)
  # shellcheck disable=SC2086  # the flag strings are meant to split
  timeout -k 10 "$limit" "$MPIRUN" --allow-run-as-root --oversubscribe $MPIRUN_ARGS -np 4 \
    "$BIN" $args >"$out" 2>&1
  rc=$?
  cat "$out" >>"$LOG"
  grep -E '^\[(bench|phases|wsync)\]' "$out"
  json=$(grep -E '^\{' "$out" | tail -n 1)
  rm -f "$out"
  if [[ $rc -eq 0 && -n $json ]]; then
    echo "$json" >>"$RESULTS"
  else
    echo "{\"args\": \"$args\", \"failed\": $rc}" >>"$RESULTS"
    echo "[run_device_bench] '$cfg' failed with exit status $rc (see $LOG)" >&2
    status=1
    if [[ $rc -eq 77 ]]; then
      echo "[run_device_bench] no usable GPU: stopping" >&2
      exit 77
    fi
  fi
done
echo "[run_device_bench] done in $(($(date +%s) - start)) s; results in $RESULTS" | tee -a "$LOG"
exit $status
