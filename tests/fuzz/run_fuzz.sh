#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, a separate build dir build-fuzz) and runs each for
# <seconds per target>, on a working corpus under build-fuzz/corpus/<target> seeded from the
# committed tests/fuzz/corpus/<target>. Fails on the first crash, sanitizer report, leak or
# timeout (the reproducer lands in build-fuzz/artifacts/). Usage:
#   tests/fuzz/run_fuzz.sh <seconds per target> [target...]   (default: every target built)
# Reproduce a failure: build-fuzz/tests/fuzz/wsync_fuzz_<target> <artifact file>
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:?usage: run_fuzz.sh <seconds per target> [target...]}
shift
build=build-fuzz
cxx=${WSYNC_FUZZ_CXX:-clang++-14}
cc=${WSYNC_FUZZ_CC:-clang-14}
command -v "$cxx" >/dev/null || { echo "run_fuzz.sh: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 1; }

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" -DWSYNC_FUZZ=ON -DWSYNC_CUDA=OFF \
  -DWSYNC_BUILD_TESTS=OFF -DWSYNC_BUILD_BENCHMARKS=OFF >/dev/null
if [ $# -gt 0 ]; then
  targets=("$@")
else
  IFS=';' read -r -a targets < "$build/fuzz_targets.txt"
fi
cmake --build "$build" -j2 --target "${targets[@]/#/wsync_fuzz_}"

mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  # New inputs go to the first (working) corpus directory; the committed seeds stay untouched.
  if ! "$build/tests/fuzz/wsync_fuzz_$t" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
       "$build/corpus/$t" "tests/fuzz/corpus/$t" 2>"$build/fuzz_$t.log"; then
    tail -n 60 "$build/fuzz_$t.log" >&2
    echo "run_fuzz.sh: $t failed; reproducer(s) in $build/artifacts/" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+.*DONE" \
    "$build/fuzz_$t.log" || true
  echo "   corpus: $(ls "$build/corpus/$t" | wc -l) inputs"
done
echo "== fuzz: all ${#targets[@]} targets ran ${seconds}s without a failure"
