#!/usr/bin/env bash
# Validates the cluster model (wsync-cluster-model) against real multi-"host" wsync jobs on one
# Linux machine (root needed). Each host is a network namespace with one NIC: a veth pair to a
# bridge in the root namespace (a non-blocking switch), rate-limited with tc tbf in both
# directions (egress of the host's end = its NIC out, egress of the bridge's end = its NIC in).
# Trainer and rollout ranks are wsync-cluster-rank processes (WSYNC_BOOTSTRAP_EXPLICIT, UCX over
# TCP on their namespace's NIC) joined to a standalone wsync-coordinator in the root namespace.
# For each cluster shape it writes the cluster description, prints the model's prediction, runs
# the job and prints one JSON line: predicted and measured seconds, their ratio, the bottleneck,
# and the largest CPU share of any rank (to show the 2-core machine is not the limit).
# Namespaces, links, qdiscs and processes are removed on every exit (trap).
#
# Usage: benchmarks/cluster_validate.sh [build-dir] [shape ...]
#   shapes: single a b c d (default: all five); VERSIONS (timed, default 3) and WARMUP (default 2:
#   the first version into each of the 2 slots faults its pages in) from the environment.
#   MAX_RATIO_ERROR (e.g. 0.15): exit 1 when a shape's measured/predicted is off by more, or a
#   rollout did not verify (ctest wsync_cluster_validate uses this).
# Exit status: 0; 1 a shape failed (or missed MAX_RATIO_ERROR); 2 usage; 77 no network namespaces
# here (not root, or no CAP_NET_ADMIN, or no `ip`/`tc`).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(single a b c d)
rank_bin=$build/benchmarks/cluster_model/wsync-cluster-rank
model_bin=$build/benchmarks/cluster_model/wsync-cluster-model
coord_bin=$build/src/coordinator/wsync-coordinator
for b in "$rank_bin" "$model_bin" "$coord_bin"; do
  [ -x "$b" ] || { echo "missing $b (build wsync-cluster-rank wsync-cluster-model wsync-coordinator)" >&2; exit 2; }
done
source benchmarks/netns_lib.sh
netns_require_or_skip cluster_validate
versions=${VERSIONS:-3}
warmup=${WARMUP:-2}
secret=cluster-validate-$$
port=29611
work=$(mktemp -d /tmp/wsync-cluster-validate.XXXXXX)
cleanup() {
  netns_cleanup
  rm -rf "$work"
}
trap cleanup EXIT

# The model: a small llama-style model (126 M parameters, 252 MB in bfloat16), so that a version
# takes seconds at a few hundred Mbit/s.
model=(--model custom --layers 4 --hidden 1024 --ffn 4096 --vocab 32000 --heads 16 --kv-heads 4)

netns_bridge_up

# run_shape NAME T_HOSTS T_PER_HOST T_MBIT R_HOSTS R_PER_HOST R_MBIT LAYOUT...
run_shape() {
  local name=$1 th=$2 tph=$3 tmbit=$4 rh=$5 rph=$6 rmbit=$7
  shift 7
  local layout=("$@")
  local nt=$((th * tph)) nr=$((rh * rph))
  local spec=$work/$name.cluster
  cat >"$spec" <<EOF
# shape $name: $th trainer hosts x $tph ranks at $tmbit Mbit/s, $rh rollout hosts x $rph ranks at $rmbit Mbit/s
name = netns-$name
trainer_ranks_per_node = $tph
trainer_nics_per_node = 1
trainer_nic_gbit = $(awk "BEGIN{print $tmbit/1000}")
rollout_ranks_per_node = $rph
rollout_nics_per_node = 1
rollout_nic_gbit = $(awk "BEGIN{print $rmbit/1000}")
wire_efficiency = 0.9564     # TCP payload 1448 of a 1514-byte frame (MTU 1500, timestamps)
host_memcpy_gbyte = 5
network_latency_us = 100
message_overhead_us = 5
control_ms = 20              # a rollout's receiver progresses UCX every 20 ms between frames
rows_are_messages = true     # host UCX posts one put per row of a strided region
EOF
  # Explicit-bootstrap jobs send matching boxes by writes too (no MPI broadcast): --no-broadcast.
  # UCX: TCP on the namespace's NIC only; receive segments large enough that a rollout, which
  # progresses UCX every 20 ms between control frames, drains a socket's data in one pass.
  local prediction
  prediction=$("$model_bin" "${model[@]}" "${layout[@]}" --memory host --no-broadcast --cluster "$spec" --links 4 | tail -1)
  echo "prediction $name: $prediction" >&2

  for ((h = 0; h < th + rh; ++h)); do
    if ((h < th)); then netns_add_host "wsc-$name-$h" "$h" "$tmbit" "$tmbit"
    else netns_add_host "wsc-$name-$h" "$h" "$rmbit" "$rmbit"; fi
  done
  "$coord_bin" --trainers "$nt" --rollouts "$nr" --bind "$netns_subnet.1" --port "$port" \
    --secret "$secret" --timeout-ms 300000 --quiet >"$work/$name.coord" 2>&1 &
  local coord=$!
  netns_pids+=("$coord")
  sleep 0.5
  local ranks=()
  for ((r = 0; r < nt; ++r)); do
    ip netns exec "wsc-$name-$((r / tph))" "${netns_ucx[@]}" "$rank_bin" --role trainer --rank "$r" \
      --coordinator "$netns_subnet.1:$port" --secret "$secret" --versions "$versions" \
      --warmup "$warmup" --timeout-ms 300000 "${model[@]}" "${layout[@]}" \
      >"$work/$name.t$r" 2>&1 &
    ranks+=($!); netns_pids+=($!)
  done
  for ((r = 0; r < nr; ++r)); do
    ip netns exec "wsc-$name-$((th + r / rph))" "${netns_ucx[@]}" "$rank_bin" --role rollout --rank "$r" \
      --coordinator "$netns_subnet.1:$port" --secret "$secret" --versions "$versions" \
      --warmup "$warmup" --timeout-ms 300000 "${model[@]}" "${layout[@]}" \
      >"$work/$name.r$r" 2>&1 &
    ranks+=($!); netns_pids+=($!)
  done
  local failed=0
  for p in "${ranks[@]}"; do wait "$p" || failed=1; done
  wait "$coord" || failed=1
  if ((failed)); then
    echo "shape $name failed:" >&2
    tail -n 5 "$work/$name".* >&2
    exit 1
  fi
  cat "$work/$name".t* "$work/$name".r* >&2
  python3 - "$name" "$prediction" "$work/$name" "$nt" "$nr" <<'PY'
import json, sys, glob
name, pred, prefix, nt, nr = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
ranks = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sorted(glob.glob(prefix + ".[tr]*"))]
trainers = [r for r in ranks if r["role"] == "trainer"]
rollouts = [r for r in ranks if r["role"] == "rollout"]
# A version is done when every trainer's request completed: the slowest trainer, per version.
per_version = [max(t["seconds"][i] for t in trainers) for i in range(len(trainers[0]["seconds"]))]
measured = sorted(per_version)[len(per_version) // 2]
cpu = max(r["cpu_seconds"] / r["wall_seconds"] for r in ranks if r["wall_seconds"] > 0)
print(json.dumps({
    "shape": name, "cluster": pred["cluster"], "layout": pred["layout"],
    "trainer_ranks": pred["trainer_ranks"], "rollout_ranks": pred["rollout_ranks"],
    "trainer_hosts": pred["trainer_nodes"], "rollout_hosts": pred["rollout_nodes"],
    "bytes_over_network": pred["bytes_over_network"],
    "predicted_seconds": pred["predicted_seconds"], "measured_seconds": round(measured, 4),
    "measured_versions": [round(s, 4) for s in per_version],
    "measured_over_predicted": round(measured / pred["predicted_seconds"], 4),
    "bottleneck_link": pred["bottleneck_link"], "busiest_rank": pred["busiest_rank"],
    "max_rank_cpu_share": round(cpu, 3),
    "verified": all(r["verified"] for r in rollouts)}))
tolerance = float(__import__("os").environ.get("MAX_RATIO_ERROR", "inf"))
if not all(r["verified"] for r in rollouts) or abs(measured / pred["predicted_seconds"] - 1) > tolerance:
    sys.exit(f"shape {name}: not verified, or measured/predicted off by more than {tolerance}")
PY
  netns_del_hosts
}

for s in "${shapes[@]}"; do
  case $s in
    # one link each way: 1 trainer -> 1 rollout, 500 Mbit/s
    single) run_shape single 1 1 500 1 1 500 --trainer-fsdp 1 --rollout-tp 1 --replicas 1 ;;
    # 1 trainer host (2 ranks, FSDP 2) -> 1 rollout host (TP 2), 800 Mbit/s: trainer NIC vs rollout NIC equal
    a) run_shape a 1 2 800 1 2 800 --trainer-fsdp 2 --rollout-tp 2 --replicas 1 ;;
    # 2 trainer hosts x 2 ranks (FSDP 4) at 400 -> 1 rollout host x 2 (TP 2) at 500: rollout NIC in is the bottleneck
    b) run_shape b 2 2 400 1 2 500 --trainer-fsdp 4 --rollout-tp 2 --replicas 1 ;;
    # 1 trainer host x 2 (FSDP 2) at 1000 -> 2 rollout hosts x 2 (TP 2 x 2 replicas) at 600: trainer NIC out
    c) run_shape c 1 2 1000 2 2 600 --trainer-fsdp 2 --rollout-tp 2 --replicas 2 ;;
    # as c with rollout NICs at 1000: no receiver cap
    d) run_shape d 1 2 1000 2 2 1000 --trainer-fsdp 2 --rollout-tp 2 --replicas 2 ;;
    *) echo "unknown shape $s" >&2; exit 2 ;;
  esac
done
