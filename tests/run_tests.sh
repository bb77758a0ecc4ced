#!/usr/bin/env bash
# The test command of README.md: installs missing packages, builds, and runs every test: ctest
# (unit tests, multi-process tests under mpirun, GPU tests that skip without a GPU), then the
# Python package's tests (pytest in a venv it creates or reuses; tests/python/run_python_tests.sh).
# Arguments go to ctest; ctest runs -j<number of cores> unless they (or CTEST_PARALLEL_LEVEL) set
# its parallelism (the multi-process tests reserve 2 cores each, the install test runs alone).
# WSYNC_SKIP_PYTHON=1 runs ctest only.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WSYNC_BUILD_DIR:-build}
bash .ci/setup.sh "$build_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -f /dev/shm/vader_segment.* 2>/dev/null || true  # left behind by killed mpiruns
parallel=(-j "$(nproc)")
for arg in "$@"; do
  case "$arg" in -j* | --parallel*) parallel=() ;; esac
done
[ -z "${CTEST_PARALLEL_LEVEL:-}" ] || parallel=()
(cd "$build_dir" && ctest --output-on-failure --timeout 600 "${parallel[@]}" "$@")
if [ "${WSYNC_SKIP_PYTHON:-0}" != "1" ]; then
  WSYNC_BUILD_DIR="$build_dir" bash tests/python/run_python_tests.sh
fi
