#!/usr/bin/env bash
# The main job of README.md: installs missing packages, builds, and runs the trainer + rollout demo
# (trainer_integration/launch_demo.sh): 2 trainer ranks (FSDP-like) publish 20 versions of a demo
# policy to 2 rollout replicas of TP 2 (4 ranks), on the GPU when one is usable, else on host
# memory. The rollouts verify every version bit for bit; the job ends with a summary (sync time per
# version, GB/s against the copy limit measured in the same run, generation steps served while
# transfers were in flight, torn or wrong reads) and one JSON line.
# Extra arguments go to both programs (e.g. --versions 100 --layers 8, or --memory host).
# It builds only the library and the two demo programs (122 build steps of 269 on a fresh build
# directory; it needs no GoogleTest); tests/run_tests.sh builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${WSYNC_BUILD_DIR:-build}
WSYNC_BUILD_TARGETS="wsync-trainer-demo wsync-rollout-demo" bash .ci/setup.sh "$build_dir"
exec bash trainer_integration/launch_demo.sh "$build_dir" "$@"
