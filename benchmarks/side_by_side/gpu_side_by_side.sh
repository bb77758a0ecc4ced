#!/usr/bin/env bash
# Side by side on one GPU (H200): the Llama-3-8B-shaped bf16 model (wsync-sync-bench's llama3-8b
# tensor list, 16.06 GB) moved from one process to another by
#   wsync               wsync-sync-bench --memory device (1 trainer -> 1 rollout, CUDA IPC writes)
#   ipc_per_tensor      OpenRLHF's colocated path (clone, CUDA IPC handle, rebuild, copy_, per tensor)
#   ipc_bucketed        verl's naive checkpoint engine (512 MiB ping-pong buckets over CUDA IPC)
#   safetensors         save_file + load_file (through the page cache) + copy_
#   nixl                NIXL WRITE over UCX (the nixl-cu13 wheel, if it imports)
#   checkpoint_engine   MoonshotAI checkpoint-engine's ParameterServer.update (if it imports)
# each against a torch copy_ of the same bytes in the same run (ratio_to_device_copy), warm-up then
# the median of N versions, every method verified on one more version. Then sync time against
# model size (generic model, 1-64 GB) and against trainer ranks / rollout replicas (wsync).
#
# Run from the repository root:  bash benchmarks/side_by_side/gpu_side_by_side.sh [out dir]
#   out dir: default $OUT, else ./sbs_gpu_out.
# Environment:
#   BIN_DIR   wsync-sync-bench and libwsync.so.0 built with CUDA (default .carry/new)
#   WHEELS    folder searched (recursively) for *.whl to install when missing (default .carry/wheels)
#   PY        the python with torch (default python3)
#   DEVICE    the torch device of the process pair (default cuda:0; cpu runs the harness without a
#             GPU, to test the script: the wsync lines then fail, the rest runs on host memory)
#   PARTS     any of "main ranks sizes" (default all three, in that order)
#   TOTAL_BUDGET_S  stop starting work after this many seconds (default 570)
#   SIZES_GB  model sizes of the size sweep (default "1 2 4 8 16 32 64")
#   MAIN_SCALE  layers of the main model as a fraction of Llama-3-8B's 32 (default 1; the wsync
#             line of "main" is always the full model)
#   MAIN_METHODS   methods of the main pair (default
#             ipc_per_tensor,ipc_bucketed,safetensors,nixl,checkpoint_engine); WSYNC_MAIN=0 leaves
#             out main's wsync run (e.g. a second call that carries only the NIXL wheel)
#   SIZES_METHODS  methods of the size sweep (default ipc_per_tensor,ipc_bucketed,nixl)
#   RANKS_GB  model size of the ranks sweep (default 4); RANKS "T,R ..." (default "1,1 2,1 4,1 1,2 1,4")
# Output in the out dir: gpu_side_by_side.jsonl (one JSON object per line: results, "skipped" and
# "failed" lines), gpu_side_by_side.log (everything the programs printed).
# Exit status 0 (even when parts were skipped or failed: read the JSON lines), 77 without a GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-sbs_gpu_out}}
BIN_DIR=${BIN_DIR:-.carry/new}
WHEELS=${WHEELS:-.carry/wheels}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda:0}
PARTS=${PARTS:-"main ranks sizes"}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-570}
SIZES_GB=${SIZES_GB:-"1 2 4 8 16 32 64"}
MAIN_SCALE=${MAIN_SCALE:-1}
MAIN_METHODS=${MAIN_METHODS:-ipc_per_tensor,ipc_bucketed,safetensors,nixl,checkpoint_engine}
SIZES_METHODS=${SIZES_METHODS:-ipc_per_tensor,ipc_bucketed,nixl}
WSYNC_MAIN=${WSYNC_MAIN:-1}
RANKS_GB=${RANKS_GB:-4}
RANKS=${RANKS:-"1,1 2,1 4,1 1,2 1,4"}
mkdir -p "$out"
out=$(cd "$out" && pwd)
BIN_DIR=$(cd "$BIN_DIR" 2>/dev/null && pwd || echo "$BIN_DIR")
jsonl=$out/gpu_side_by_side.jsonl
log=$out/gpu_side_by_side.log
start=$(date +%s)
left() { echo $((TOTAL_BUDGET_S - ($(date +%s) - start))); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
note() { echo "[gpu_sbs] $(date -u +%T) $*" | tee -a "$log"; }
skip() { # part, reason
  printf '{"suite": "side_by_side", "sweep": "%s", "method": "all", "skipped": "%s"}\n' "$1" "$2" | tee -a "$jsonl"
}

note "start: out $out, binaries $BIN_DIR, wheels $WHEELS, parts '$PARTS', budget ${TOTAL_BUDGET_S}s"
nvidia-smi -L >>"$log" 2>&1 || true
if [[ $DEVICE != cpu ]] && ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >>"$log" 2>&1; then
  skip all "no CUDA device visible to $PY"
  exit 77
fi

# Wheels the image lacks (nixl-cu13, checkpoint-engine and its pure-Python deps), unpacked into a
# private folder on PYTHONPATH: pip --no-index --no-deps --target, or plain unzip when pip fails.
pylib=/tmp/wsync_sbs_pylib
mkdir -p "$pylib"
find "$WHEELS" -name '*.whl' 2>/dev/null | sort >"$out/.wheels" || true
"$PY" - "$pylib" "$out/.wheels" >>"$log" 2>&1 <<'EOF'
import importlib.metadata as md, subprocess, sys, zipfile, os
target, listing = sys.argv[1], sys.argv[2]
wheels = [w.strip() for w in open(listing) if w.strip()]
def dist(w):
    return os.path.basename(w).split("-")[0].replace("_", "-").lower()
missing = []
for w in wheels:
    try:
        md.version(dist(w)); print("[wheels] present:", dist(w))
    except md.PackageNotFoundError:
        missing.append(w)
if missing:
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", target, *missing]
    print("[wheels]", " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        for w in missing:
            print("[wheels] unzip", w); zipfile.ZipFile(w).extractall(target)
EOF
rm -f "$out/.wheels"
export PYTHONPATH=$pylib${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c 'import nixl_cu13' >>"$log" 2>&1 && note "nixl_cu13 imports" || note "nixl_cu13 does not import (the nixl lines will say so)"
"$PY" -c 'import checkpoint_engine.ps' >>"$log" 2>&1 && note "checkpoint_engine imports" || note "checkpoint_engine does not import"

runs() { # sbs_runs.py wsync ... with the time left as its limit
  local limit=$(($(left) - 5))
  ((limit > 20)) || { skip "$SWEEP" "out of the time budget before: wsync $*"; return; }
  ((limit > 240)) && limit=240
  "$PY" "$here/sbs_runs.py" wsync --memory device --suite side_by_side --bin-dir "$BIN_DIR" \
    --timeout-s "$limit" --out "$jsonl" --log "$log" --sweep "$SWEEP" "$@" | cut -c1-400
}
pair() { # sbs_pair.py ... bounded by the time left
  local limit=$(($(left) - 5))
  ((limit > 40)) || { skip "$SWEEP" "out of the time budget before: sbs_pair $*"; return; }
  timeout -k 10 "$limit" "$PY" "$here/sbs_pair.py" --device "$DEVICE" --out "$jsonl" --sweep "$SWEEP" \
    --budget-s $((limit - 45)) "$@" 2>>"$log" | cut -c1-400
  local rc=${PIPESTATUS[0]}
  ((rc == 0)) || note "sbs_pair exit status $rc (124: cut at the time budget)"
}

if [[ " $PARTS " == *" main "* ]]; then
  SWEEP=main
  if [[ $WSYNC_MAIN != 0 ]]; then
    note "main: wsync llama3-8b 1 -> 1"
    runs --model llama3-8b --iters 5 --warmup 1
  fi
  note "main: the other methods, llama3-8b, one process pair"
  pair --model llama3-8b --scale "$MAIN_SCALE" --iters 5 --slow-iters 2 \
    --methods "$MAIN_METHODS"
fi
if [[ " $PARTS " == *" ranks "* ]]; then
  SWEEP=ranks
  for tr in $RANKS; do
    note "ranks: wsync ${RANKS_GB} GB, trainers,rollouts $tr"
    runs --model generic --gb "$RANKS_GB" --trainers "${tr%,*}" --rollouts "${tr#*,}" --iters 5
  done
fi
if [[ " $PARTS " == *" sizes "* ]]; then
  SWEEP=sizes
  for gb in $SIZES_GB; do
    note "sizes: wsync $gb GB"
    runs --model generic --gb "$gb" --iters 3
  done
  note "sizes: the other methods, $SIZES_GB GB, one process pair"
  pair --model generic --sizes-gb "$(echo $SIZES_GB | tr ' ' ,)" --iters 3 --max-version-s 10 \
    --methods "$SIZES_METHODS"
fi
note "done in $(($(date +%s) - start)) s: $(grep -c . "$jsonl") lines in $jsonl"
exit 0
