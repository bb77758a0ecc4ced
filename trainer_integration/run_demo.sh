#!/usr/bin/env bash
# The main job of README.md: installs missing packages, builds, and runs a trainer + rollout demo
# under mpirun: 2 trainer ranks (FSDP-like) publish 20 versions of a demo policy to 2 rollout
# replicas of TP 2 (4 ranks), whose generation threads check every byte of every read.
# Extra arguments go to both programs (e.g. --versions 100 --layers 8).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WSYNC_BUILD_DIR:-build}
bash .ci/setup.sh "$build_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
exec mpirun --oversubscribe --mca btl self,vader \
  -np 2 "$build_dir/trainer_integration/wsync-trainer-demo" "$@" \
  : -np 4 "$build_dir/rollout_integration/wsync-rollout-demo" --replicas 2 "$@"
