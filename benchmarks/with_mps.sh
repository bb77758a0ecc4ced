#!/usr/bin/env bash
# Runs a command with an NVIDIA MPS control daemon of its own, then stops the daemon (always).
#
# Several processes on ONE GPU (trainer and rollout ranks colocated, as in the single-H200
# benchmarks) are time-sliced by the driver without MPS: each switch between their CUDA contexts
# costs tens to hundreds of microseconds, which is a per-version fixed cost wsync cannot remove
# (measured on the H200, 2 trainers -> 2 rollout ranks, 1 MB model: 581 us per version without
# MPS, 190 us with it; see benchmarks/README.md, "Session 5"). With MPS the processes share one
# context on the GPU, so their kernels and copies overlap. CUDA IPC works between MPS clients.
#
# Usage: benchmarks/with_mps.sh <command> [args...]
#   The daemon's pipe and log folders are private (a fresh temporary directory), exported as
#   CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY: pass them to mpirun ranks with
#   `-x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY` (Open MPI forwards only what it is told).
# Exit status: the command's; 3 when nvidia-cuda-mps-control is missing or does not start.
set -u
if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  echo "with_mps: nvidia-cuda-mps-control not found (no NVIDIA driver tools on this machine)" >&2
  exit 3
fi
mps_dir=$(mktemp -d /tmp/wsync-mps.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY=$mps_dir/pipe CUDA_MPS_LOG_DIRECTORY=$mps_dir/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
stop_mps() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  for _ in $(seq 50); do  # the daemon exits once its server did (up to ~5 s)
    pgrep -f "nvidia-cuda-mps-control -d" >/dev/null 2>&1 || break
    sleep 0.1
  done
  rm -rf "$mps_dir"
}
if ! nvidia-cuda-mps-control -d; then
  echo "with_mps: the MPS control daemon did not start (see $CUDA_MPS_LOG_DIRECTORY)" >&2
  rm -rf "$mps_dir"
  exit 3
fi
trap stop_mps EXIT
"$@"
