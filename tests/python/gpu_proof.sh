#!/usr/bin/env bash
# The Python layer's GPU proof on one H200 (see gpu_proof.py). No network needed: uses the
# machine's python3 (torch with CUDA, transformers) and a built libwsync.so.
# Usage: tests/python/gpu_proof.sh [BUILD_DIR] [gpu_proof.py args...]
#   BUILD_DIR (default build): a CMake build with CUDA whose src/capi/libwsync.so and
#   src/coordinator/wsync-coordinator are used (WSYNC_LIBRARY / WSYNC_COORDINATOR override them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=${1:-build}
shift || true
case "$build_dir" in /*) ;; *) build_dir="$repo/$build_dir" ;; esac
export WSYNC_LIBRARY=${WSYNC_LIBRARY:-$build_dir/src/capi/libwsync.so}
export WSYNC_COORDINATOR=${WSYNC_COORDINATOR:-$build_dir/src/coordinator/wsync-coordinator}
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
for f in "$WSYNC_LIBRARY" "$WSYNC_COORDINATOR"; do
  [ -e "$f" ] || { echo "gpu_proof: $f not found (build the repo with CUDA first)" >&2; exit 2; }
done
python3 -c "import torch; assert torch.cuda.is_available(), 'no GPU'" || exit 77
exec timeout 300 python3 "$repo/tests/python/gpu_proof.py" "$@"
