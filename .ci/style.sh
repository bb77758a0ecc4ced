#!/usr/bin/env bash
# The style CI promises: every C/C++ file formatted by the repo's .clang-format, and clang-tidy (the
# repo's .clang-tidy) clean on the library's sources. Fails on any violation.
# Usage: .ci/style.sh <build dir with compile_commands.json>
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends clang-format clang-tidy >/dev/null
  }
done

echo "== clang-format (every tracked C/C++ file)"
unformatted=$(git ls-files '*.c' '*.cc' '*.h' '*.cu' | while read -r f; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
done)
if [ -n "$unformatted" ]; then
  echo "not formatted by .clang-format (run clang-format -i on them):"
  echo "$unformatted"
  exit 1
fi

echo "== clang-tidy (src/**/*.cc)"
sources=$(git ls-files 'src/*.cc')
# run-clang-tidy takes the files as patterns; -quiet keeps only the findings.
# It always asks clang-tidy for colours: strip them, or no finding would match the pattern below.
run-clang-tidy -quiet -p "$build_dir" -j "$(nproc)" $sources 2>&1 |
  sed 's/\x1b\[[0-9;]*m//g' > "$build_dir/clang-tidy.log" || true
findings=$(grep -E "^/.*: (warning|error):" "$build_dir/clang-tidy.log" | sort -u || true)
if [ -n "$findings" ]; then
  echo "$findings" | head -50
  echo "clang-tidy found the above (full log: $build_dir/clang-tidy.log)"
  exit 1
fi
echo "style: clean"
