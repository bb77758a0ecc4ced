#!/usr/bin/env bash
# Runs the demo job of run_demo.sh from built programs, without building (e.g. on a GPU machine
# that has the binaries but not the build dependencies):
#   trainer_integration/launch_demo.sh <build dir> [arguments for both programs...]
# <build dir> holds trainer_integration/wsync-trainer-demo and rollout_integration/wsync-rollout-demo.
# Memory: the programs' --memory auto, device memory when they find a usable GPU (a CUDA build and a
# GPU that cudaGetDeviceCount sees), else host memory; the summary says which and why. Pass
# --memory host or --memory device to choose.
set -euo pipefail
build_dir=${1:?usage: launch_demo.sh <build dir> [arguments...]}
shift
if gpus=$(nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
  echo "launch_demo: nvidia-smi -L lists $(echo "$gpus" | wc -l) GPU(s), first $(echo "$gpus" | head -n 1 | cut -d'(' -f1): device memory if this build has CUDA"
else
  echo "launch_demo: nvidia-smi -L lists no GPU: host memory"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
exec mpirun --oversubscribe --mca btl self,vader \
  -np 2 "$build_dir/trainer_integration/wsync-trainer-demo" --memory auto "$@" \
  : -np 4 "$build_dir/rollout_integration/wsync-rollout-demo" --replicas 2 --memory auto "$@"
