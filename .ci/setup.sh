#!/usr/bin/env bash
# Installs what wsync needs on a fresh Debian 12 / Ubuntu 24.04 machine (as root) and builds it.
# Usage: .ci/setup.sh [build-dir] [extra cmake args...]   (default build dir: build)
# WSYNC_BUILD_TARGETS="t1 t2 ...": build only these targets (and what they need) instead of all of
# them; e.g. trainer_integration/run_demo.sh builds just the two demo programs and the library.
# WSYNC_CONFIGURE_ONLY=1: install and configure, build nothing (.ci/run picks the targets after).
# Idempotent: packages already present are not reinstalled; the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true

targets=()
read -r -a targets <<<"${WSYNC_BUILD_TARGETS:-}"

packages=(build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin libucx-dev ucx-utils
          libeigen3-dev libcxxopts-dev libcpp-httplib-dev)
test_packages=(libgtest-dev libgmock-dev)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# A full build configures and builds the tests (GoogleTest installed here). A build of chosen
# targets (the demo) does not need GoogleTest: the tests are configured only where it is installed.
tests=ON
if [ ${#targets[@]} -eq 0 ]; then
  packages+=("${test_packages[@]}")
else
  for p in "${test_packages[@]}"; do
    installed "$p" || tests=OFF
  done
fi
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# mpirun as root (CI and these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWSYNC_BUILD_TESTS=$tests "$@" \
  >/dev/null
if [ "${WSYNC_CONFIGURE_ONLY:-0}" = 1 ]; then
  exit 0
elif [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j "$(nproc)"
fi
