#!/usr/bin/env bash
# Side by side on host memory (the CPU machine): wsync's host path (wsync-sync-bench) against
# gather-to-rank-0 + per-tensor MPI broadcast and bucketed MPI broadcast (wsync-host-baselines),
# ucx_perftest put bandwidth between two processes, and a one-process memcpy. Same model (the demo
# policy scaled to each size, float32), every rollout wants the whole model (TP 1 replicas).
#   sizes: 1 trainer -> 1 rollout at each of SIZES (GB);
#   ranks: at RANKS_GB, trainers 1 2 4 with 1 rollout, rollouts 2 4 with 1 trainer.
# Then plots (plot.py) of everything in the output's JSON lines.
#
# Usage: benchmarks/side_by_side/host_side_by_side.sh [build dir (default build)] [out dir (default benchmarks/plots)]
#   build dir: a build with the targets wsync-sync-bench and wsync-host-baselines (Release).
# Environment: SIZES (default "0.25 0.5 1 2 4"), RANKS_GB (default 1), ITERS (default 5),
#   PY (python3 for the drivers), PLOT_PY (a python with matplotlib; default /opt/wsync-venv/bin/python
#   if present, else PY), PARTS (default "sizes ranks plot").
# Output: <out>/host_side_by_side.jsonl (appended; one JSON object per line), <out>/host_side_by_side.log
# (the programs' full output), <out>/host_*.png.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-benchmarks/plots}
bin=$build/benchmarks
PY=${PY:-python3}
if [[ -z ${PLOT_PY:-} ]]; then
  PLOT_PY=$PY
  [[ -x /opt/wsync-venv/bin/python ]] && PLOT_PY=/opt/wsync-venv/bin/python
fi
SIZES=${SIZES:-"0.25 0.5 1 2 4"}
RANKS_GB=${RANKS_GB:-1}
ITERS=${ITERS:-5}
PARTS=${PARTS:-"sizes ranks plot"}
mkdir -p "$out"
jsonl=$out/host_side_by_side.jsonl
log=$out/host_side_by_side.log
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
runs() { "$PY" "$here/sbs_runs.py" "$@" --bin-dir "$bin" --iters "$ITERS" --out "$jsonl" --log "$log"; }
summary() { # the last line's method and figures
  tail -n 1 "$jsonl" | "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read());
print("[host_sbs]", r.get("method"), r.get("size_label"), "T%s R%s" % (r.get("trainers"), r.get("rollouts")),
      r.get("seconds"), "s", r.get("gbps"), "GB/s x memcpy", r.get("ratio_to_memcpy"), r.get("skipped") or r.get("failed") or "")'
}

echo "# $(date -u +%FT%TZ) host_side_by_side.sh $build -> $out; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
if [[ " $PARTS " == *" sizes "* ]]; then
  for gb in $SIZES; do
    runs baselines --gb "$gb" --sweep sizes >/dev/null; summary
    runs ucx --gb "$gb" --memcpy-from "$jsonl" --sweep sizes >/dev/null; summary
    runs wsync --memory host --gb "$gb" --sweep sizes >/dev/null; summary
  done
fi
if [[ " $PARTS " == *" ranks "* ]]; then
  for tr in "1 1" "2 1" "4 1" "1 2" "1 4"; do
    read -r t r <<<"$tr"
    runs baselines --gb "$RANKS_GB" --trainers "$t" --rollouts "$r" --sweep ranks >/dev/null; summary
    runs wsync --memory host --gb "$RANKS_GB" --trainers "$t" --rollouts "$r" --sweep ranks >/dev/null; summary
  done
fi
if [[ " $PARTS " == *" plot "* ]]; then
  "$PLOT_PY" "$here/plot.py" --out-dir "$out" "$jsonl"
fi
echo "# $(date -u +%FT%TZ) done; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
