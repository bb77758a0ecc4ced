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
# A file is checked again only when its translation unit, its compile command, a .clang-tidy or
# clang-tidy itself changed since a clean run on this machine (.ci/clang_tidy_cached.py); the cache
# (WSYNC_TIDY_CACHE, default /var/cache/wsync-clang-tidy, outside the repo) holds clean results
# only, so a finding fails every run until it is fixed. WSYNC_TIDY_CACHE=none checks every file.
cache=${WSYNC_TIDY_CACHE:-/var/cache/wsync-clang-tidy}
if [ "$cache" = none ]; then
  cache=$(mktemp -d)
  trap 'rm -rf "$cache"' EXIT
fi
git ls-files -z 'src/*.cc' |
  xargs -0 python3 .ci/clang_tidy_cached.py "$build_dir" "$cache" "$(nproc)" "$build_dir/clang-tidy.log"
echo "style: clean"
