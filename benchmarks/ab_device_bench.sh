#!/usr/bin/env bash
# A/B of two builds of wsync-sync-bench on device memory (the Llama-3-8B-shaped bf16 model, 16.06 GB,
# all ranks on one GPU), alternating A and B, ROUNDS rounds per layout and process count, so that
# drift of the machine hits both alike. Prints one line per run with its ratio to a device copy.
# Usage: benchmarks/ab_device_bench.sh <dir A> <dir B> [out dir]
#   each dir holds wsync-sync-bench and its libwsync.so.0 (e.g. a build's programs, copied).
# Environment: ROUNDS (default 3), LAYOUTS (default "mixed differ match"), NPS (default "2 4").
# Under benchmarks/with_mps.sh (CUDA_MPS_PIPE_DIRECTORY set) the ranks are MPS clients.
set -u
a=$1
b=$2
out=${3:-.}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mps_args=()
[ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ] && mps_args=(-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY)
for layout in ${LAYOUTS:-mixed differ match}; do
  for np in ${NPS:-2 4}; do
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for dir in "$a" "$b"; do
        log="$out/ab_${layout}_$(basename "$dir")_np${np}_r$round.log"
        LD_LIBRARY_PATH=$dir timeout 60 mpirun --oversubscribe --mca btl self,vader "${mps_args[@]}" -np "$np" \
          "$dir/wsync-sync-bench" --memory device --model llama3-8b --dtype bfloat16 --warmup 1 \
          --iters 5 --layout "$layout" >"$log" 2>&1
        ratio=$(grep -E '^\{' "$log" | tail -1 | grep -o '"ratio_to_device_copy": [0-9.]*')
        echo "$layout np$np round $round $(basename "$dir") $ratio"
      done
    done
  done
done
