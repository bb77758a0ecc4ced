#!/usr/bin/env bash
# The full soak: 10,000 versions (2 trainers -> 2 one-rank replicas, host memory, under mpirun with
# wsync-coordinator as its own process, checksums on: no version may fail one), every version
# verified on every rollout, resident memory
# of every process within 5% between version 1,000 and the end. Prints one RSS line per process.
# Usage: tests/fault/soak.sh [build-dir] [versions] [warm-up versions] [metrics port]
#        (defaults: build 10000 1000 19465; ctest runs the 2,000-version form, label fault)
set -euo pipefail
cd "$(dirname "$0")/../.."
build_dir=${1:-build}
versions=${2:-10000}
warmup=${3:-1000}
port=${4:-19465}
coordinator="$build_dir/src/coordinator/wsync-coordinator"
soak="$build_dir/tests/wsync_soak_test"
for f in "$coordinator" "$soak"; do
  [ -x "$f" ] || { echo "soak: $f is missing (cmake --build $build_dir --target $(basename "$f"))" >&2; exit 2; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s.%N)
timeout 1200 mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
  -n 1 "$coordinator" --mpi --quiet --max-staleness 0 --checksums --metrics-port "$port" \
  : -n 4 "$soak" --versions "$versions" --warmup "$warmup" --metrics-port "$port"
echo "soak: wall time $(echo "$(date +%s.%N) - $start" | bc) s"
