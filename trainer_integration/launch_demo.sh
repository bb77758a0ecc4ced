#!/usr/bin/env bash
# Runs the demo job of run_demo.sh from built programs, without building (e.g. on a GPU machine
# that has the binaries but not the build dependencies):
#   trainer_integration/launch_demo.sh <build dir> [arguments for both programs...]
# <build dir> holds trainer_integration/wsync-trainer-demo and rollout_integration/wsync-rollout-demo.
# Memory: auto (device memory when the programs find a usable GPU) when `nvidia-smi -L` lists one,
# else host; a --memory among the arguments overrides it (the last one given counts).
set -euo pipefail
build_dir=${1:?usage: launch_demo.sh <build dir> [arguments...]}
shift
if gpus=$(nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
  memory=auto
  echo "launch_demo: nvidia-smi -L lists $(echo "$gpus" | wc -l) GPU(s), first $(echo "$gpus" | head -n 1): device memory if this build has CUDA"
else
  memory=host
  echo "launch_demo: no GPU (nvidia-smi -L lists none): host memory"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
exec mpirun --oversubscribe --mca btl self,vader \
  -np 2 "$build_dir/trainer_integration/wsync-trainer-demo" --memory "$memory" "$@" \
  : -np 4 "$build_dir/rollout_integration/wsync-rollout-demo" --replicas 2 --memory "$memory" "$@"
