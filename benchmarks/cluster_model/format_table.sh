#!/usr/bin/env bash
# The Kimi-K2 256 -> 128 prediction (docs/cluster_model.md) per rollout format and changed share,
# on the 8 x 400 Gbit/s cluster and across one 100 Gbit/s link between two regions: one markdown
# table row per (cluster, format, share) and the JSON lines in $OUT (default /tmp/format_table.jsonl).
#
# Usage: benchmarks/cluster_model/format_table.sh [build-dir]
#   FORMATS (default "bf16 fp8_block128 mxfp8"), DENSE_ONLY_FORMATS (default mxfp8), SHARES (changed shares for delta rows, default
#   "0.0029 0.01 0.0279 0.0671": benchmarks/README.md, "Changed elements per step"), CLUSTERS
#   (default: both cluster files).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
bin=$build/benchmarks/cluster_model/wsync-cluster-model
[ -x "$bin" ] || { echo "missing $bin (build wsync-cluster-model)" >&2; exit 2; }
read -r -a formats <<<"${FORMATS:-bf16 fp8_block128 mxfp8}"
read -r -a dense_only <<<"${DENSE_ONLY_FORMATS:-mxfp8}"  # no delta rows for these
read -r -a shares <<<"${SHARES:-0.0029 0.01 0.0279 0.0671}"
read -r -a clusters <<<"${CLUSTERS:-benchmarks/cluster_model/h200_8x400g.cluster benchmarks/cluster_model/h200_8x400g_2regions_100g.cluster}"
out=${OUT:-/tmp/format_table.jsonl}
: >"$out"
spec=$(mktemp /tmp/format_table.XXXXXX.cluster)
trap 'rm -f "$spec"' EXIT
echo "| cluster | rollout format | changed share | bytes over the network | scale bytes | partial maxima (coordinator in / out) | bottleneck | predicted s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for c in "${clusters[@]}"; do
  for f in "${formats[@]}"; do
    rows=(dense "${shares[@]}")
    [[ " ${dense_only[*]} " == *" $f "* ]] && rows=(dense)
    for share in "${rows[@]}"; do
      { cat "$c"; echo "rollout_format = $f"; [ "$share" = dense ] || echo "changed_share = $share"; } >"$spec"
      line=$("$bin" --model kimi-k2 --cluster "$spec" --rollout-dtype bfloat16 --links 1 | tail -1)
      echo "$line" >>"$out"
      python3 - "$line" "$share" <<'PY'
import json, sys
j = json.loads(sys.argv[1]); share = sys.argv[2]
coord = j["slowest_per_kind"].get("coordinator", {})
print(f"| {j['cluster']} | {j['rollout_format']} | {share if share == 'dense' else f'{float(share) * 100:.2f} %'} "
      f"| {j['bytes_over_network'] / 1e12:.3f} TB | {j['scale_bytes'] / 1e9:.2f} GB "
      f"| {j['partial_maxima']:,} ({j['amax_bytes_in'] / 1e6:.1f} / {j['amax_bytes_out'] / 1e6:.1f} MB, "
      f"{coord.get('seconds', 0) * 1e3:.2f} ms) | `{j['bottleneck_link']}` | {j['predicted_seconds']:.3f} |")
PY
    done
  done
done
