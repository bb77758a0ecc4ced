#!/usr/bin/env bash
# Delta versions on rate-limited links (issue 22): real wsync jobs between "hosts" (network
# namespaces with one tbf-shaped NIC each, benchmarks/netns_lib.sh), every version changing a share
# of the trainer's elements, each configuration run dense (WSYNC_DELTA unset) and with delta
# versions (WSYNC_DELTA=1) back to back on the same links.
#
# Shapes (one rank per host, so a host's NIC counters are its rank's):
#   2 hosts: 1 trainer (FSDP 1) -> 1 rollout (TP 1)
#   4 hosts: 2 trainers (FSDP 2) -> 2 rollouts (TP 1 x 2 replicas); every NIC carries one model
# Ranks: wsync-cluster-rank --changed-share S --sync-dir (every rollout checks every element of
# every version bit for bit against the expected tensor; trainers publish the next version only
# after, outside the timed publish -> delivered) --nic nic0 (per-version bytes from sysfs).
# Model: the validation's llama-style model (126 M parameters, 252.7 MB bf16 -> bf16).
#
# First, per rate, the line rate the machine sustains through one shaped link (one raw TCP
# stream, 3 s; and one unshaped veth pair, the machine's own ceiling).
# Then one JSON line per (hosts, rate, share, mode):
#   seconds_per_version   median over the timed versions of the slowest trainer's publish ->
#                         delivered
#   wire_bytes_per_version  bytes out of the busiest trainer NIC per version (frames, headers
#                         included: what tbf meters), and the sum over trainer NICs
#   full_bytes_per_nic    a dense version's payload through each trainer NIC (delivered bytes /
#                         trainer hosts)
#   stats_wire_bytes_per_version, stats_full_bytes_per_version  the library's wsync_version_stats
#                         wire_bytes / full_bytes where the build has them (delta), else -1
#   line_rate_seconds     full_bytes_per_nic at the link's bit rate (no header allowance: without
#                         ethtool the veth runs with GSO, so its counters and tbf see ~64 KB
#                         frames, 0.1 % over the payload; a real NIC's TCP would add 4.4 %)
#   seconds_over_line_rate  seconds_per_version / line_rate_seconds (dense: ~1; delta: < 1)
#   wire_over_line_rate   wire bytes of the busiest NIC / seconds / line rate (link utilization)
#   effective_over_line_rate  full_bytes_per_nic / seconds / line rate (what the rollouts get)
#   max_rank_cpu_share    the largest CPU share of one core any rank used while versions were in
#                         flight
#   max_rank_run_queue_threads  the most threads of one rank that were runnable but waiting for a
#                         CPU, on average, while versions were in flight (/proc schedstat): with
#                         the load average, whether the shared CPUs are the bound, not the link
# A delta row on a build without delta versions prints {"mode": "delta", "delta": "not available
# in this build"} and no numbers (detected: no WSYNC_DELTA option in libwsync / the coordinator).
#
# Usage: benchmarks/delta_link_bench.sh [build-dir]
#   RATES (Mbit/s, default "1000 10000"), HOSTS (default "2 4"), SHARES (default
#   "0.003 0.01 0.028 0.067": benchmarks/README.md, "Changed elements per step"), MODES (default
#   "dense delta"), VERSIONS (timed, default 3), WARMUP (default 2), LINERATE (1: measure line
#   rates first, default 1), WSYNC_DELTA_MAX_SHARE (passed on when set).
# Exit status: 0; 1 a run failed or a rollout did not verify; 2 usage; 77 no network namespaces
# (not root, no CAP_NET_ADMIN, no ip / tc).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rank_bin=$build/benchmarks/cluster_model/wsync-cluster-rank
coord_bin=$build/src/coordinator/wsync-coordinator
for b in "$rank_bin" "$coord_bin"; do
  [ -x "$b" ] || { echo "missing $b (build wsync-cluster-rank wsync-coordinator)" >&2; exit 2; }
done
netns_bridge=wsd-br
netns_subnet=10.232.0
source benchmarks/netns_lib.sh
netns_require_or_skip delta_link_bench
read -r -a rates <<<"${RATES:-1000 10000}"
read -r -a host_counts <<<"${HOSTS:-2 4}"
read -r -a shares <<<"${SHARES:-0.003 0.01 0.028 0.067}"
read -r -a modes <<<"${MODES:-dense delta}"
versions=${VERSIONS:-3}
warmup=${WARMUP:-2}
secret=delta-link-$$
port=29631
work=$(mktemp -d /tmp/wsync-delta-link.XXXXXX)
cleanup() {
  netns_cleanup
  rm -rf "$work"
}
trap cleanup EXIT
model=(--model custom --layers 4 --hidden 1024 --ffn 4096 --vocab 32000 --heads 16 --kv-heads 4)

# Delta versions are in this build when the library or the coordinator knows WSYNC_DELTA.
delta_available=0
for f in "$coord_bin" "$build"/src/capi/libwsync.so*; do
  [ -f "$f" ] && grep -aq WSYNC_DELTA "$f" && delta_available=1
done
echo "delta versions in this build: $([ $delta_available = 1 ] && echo yes || echo 'no (delta: not available in this build)')" >&2

netns_bridge_up

# linerate MBIT: one raw TCP stream (Python sockets, 3 s) through a pair of hosts shaped to MBIT
# (0: unshaped veth), measured at the receiver; prints one JSON line.
linerate() {
  local mbit=$1 a=wdlr-a b=wdlr-b
  if ((mbit > 0)); then
    netns_add_host $a 200 "$mbit" "$mbit"
    netns_add_host $b 201 "$mbit" "$mbit"
  else  # no qdisc: a large rate that tbf never reaches is the same as none; add plain hosts
    NETNS_BURST_KB=65536 netns_add_host $a 200 1000000 1000000
    NETNS_BURST_KB=65536 netns_add_host $b 201 1000000 1000000
    ip netns exec $a tc qdisc del dev nic0 root
    tc qdisc del dev $a-b root
    ip netns exec $b tc qdisc del dev nic0 root
    tc qdisc del dev $b-b root
  fi
  ip netns exec $b python3 - "$netns_subnet.211" >"$work/lr.recv" 2>&1 <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 29690)); s.listen(1); c, _ = s.accept()
buf = bytearray(4 << 20); n = 0; t0 = None
while True:
    k = c.recv_into(buf)
    if not k: break
    if t0 is None: t0 = time.perf_counter(); continue  # time from the first bytes
    n += k
print(n, time.perf_counter() - t0)
PY
  local recv=$!
  sleep 0.5
  local tx0 cpu0
  tx0=$(ip netns exec $a cat /sys/class/net/nic0/statistics/tx_bytes)
  cpu0=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $5}' /proc/stat)
  ip netns exec $a python3 - "$netns_subnet.211" <<'PY'
import socket, sys, time
c = socket.create_connection((sys.argv[1], 29690)); buf = b"\0" * (4 << 20)
t_end = time.perf_counter() + 3.0
while time.perf_counter() < t_end: c.sendall(buf)
c.close()
PY
  wait $recv
  local tx1 cpu1
  tx1=$(ip netns exec $a cat /sys/class/net/nic0/statistics/tx_bytes)
  cpu1=$(awk '/^cpu /{print $2+$3+$4+$6+$7+$8, $5}' /proc/stat)
  python3 - "$mbit" "$(cat "$work/lr.recv")" "$tx0" "$tx1" "$cpu0" "$cpu1" <<'PY'
import json, sys
mbit = int(sys.argv[1]); n, sec = map(float, sys.argv[2].split()); wire = int(sys.argv[4]) - int(sys.argv[3])
b0, i0 = map(float, sys.argv[5].split()); b1, i1 = map(float, sys.argv[6].split())
busy = (b1 - b0) / max(1.0, (b1 - b0) + (i1 - i0))  # the machine's CPUs, all cores, whole run
row = {"linerate": True, "shaped_mbit": mbit or None, "payload_mbit_per_s": round(n * 8 / sec / 1e6, 1),
       "wire_mbit_per_s_approx": round(wire * 8 / (sec + 0.0) / 1e6, 1),
       "payload_over_shaped_payload_rate": round(n * 8 / sec / (mbit * 1e6 * 1448 / 1514), 4) if mbit else None,
       "machine_cpu_busy_share": round(busy, 3)}
print(json.dumps(row))
PY
  netns_del_hosts
}

if [ "${LINERATE:-1}" = 1 ]; then
  for rate in "${rates[@]}"; do linerate "$rate"; done
  linerate 0
fi

# run_config HOSTS MBIT SHARE MODE: one job on the hosts already set up; prints one JSON line.
run_config() {
  local nh=$1 mbit=$2 share=$3 mode=$4 tag=$work/h$1-m$2-s$3-$4
  local nt=$((nh / 2)) nr=$((nh / 2)) layout
  if ((nh == 2)); then layout=(--trainer-fsdp 1 --rollout-tp 1 --replicas 1)
  else layout=(--trainer-fsdp 2 --rollout-tp 1 --replicas 2); fi
  if [ "$mode" = delta ] && [ $delta_available = 0 ]; then
    python3 -c 'import json,sys; print(json.dumps({"hosts": int(sys.argv[1]), "link_mbit": int(sys.argv[2]), "changed_share": float(sys.argv[3]), "mode": "delta", "delta": "not available in this build"}))' "$nh" "$mbit" "$share"
    return 0
  fi
  local denv=(env -u WSYNC_DELTA)
  [ "$mode" = delta ] && denv=(env WSYNC_DELTA=1)
  mkdir -p "$tag.sync"
  "${denv[@]}" "$coord_bin" --trainers "$nt" --rollouts "$nr" --bind "$netns_subnet.1" \
    --port "$port" --secret "$secret" --timeout-ms 300000 --quiet >"$tag.coord" 2>&1 &
  local coord=$! ranks=() r
  netns_pids+=("$coord")
  sleep 0.5
  local common=(--coordinator "$netns_subnet.1:$port" --secret "$secret" --versions "$versions"
                --warmup "$warmup" --timeout-ms 300000 --changed-share "$share"
                --sync-dir "$tag.sync" --nic nic0 "${model[@]}" "${layout[@]}")
  for ((r = 0; r < nt; ++r)); do
    ip netns exec "wd$nh-$mbit-$r" "${denv[@]}" "${netns_ucx[@]}" "$rank_bin" --role trainer \
      --rank "$r" "${common[@]}" >"$tag.t$r" 2>&1 &
    ranks+=($!); netns_pids+=($!)
  done
  for ((r = 0; r < nr; ++r)); do
    ip netns exec "wd$nh-$mbit-$((nt + r))" "${denv[@]}" "${netns_ucx[@]}" "$rank_bin" \
      --role rollout --rank "$r" "${common[@]}" >"$tag.r$r" 2>&1 &
    ranks+=($!); netns_pids+=($!)
  done
  local failed=0 p
  for p in "${ranks[@]}"; do wait "$p" || failed=1; done
  wait "$coord" || failed=1
  if ((failed)); then
    echo "hosts $nh, $mbit Mbit/s, share $share, $mode: failed" >&2
    tail -n 5 "$tag".t* "$tag".r* "$tag.coord" >&2
    exit 1
  fi
  cat "$tag".t* "$tag".r* >&2
  python3 - "$nh" "$mbit" "$share" "$mode" "$tag" "$work/rows.jsonl" <<'PY'
import glob, json, statistics, sys
nh, mbit, share, mode, tag, rows_path = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
ranks = [json.loads(open(f).read().strip().splitlines()[-1]) for f in sorted(glob.glob(tag + ".[tr]*"))]
trainers = [r for r in ranks if r["role"] == "trainer"]
rollouts = [r for r in ranks if r["role"] == "rollout"]
n = len(trainers[0]["seconds"])
per_version = [max(t["seconds"][i] for t in trainers) for i in range(n)]
wire_busiest = [max(t["nic_tx_bytes"][i] for t in trainers) for i in range(n)]
wire_total = [sum(t["nic_tx_bytes"][i] for t in trainers) for i in range(n)]
delivered = [trainers[0]["delivered_bytes"][i] for i in range(n)]
med = statistics.median
sec, wire, full = med(per_version), med(wire_busiest), med(delivered) / len(trainers)
line = mbit * 1e6 / 8                          # bytes/s on the wire, as tbf meters frames
row = {"hosts": nh, "link_mbit": mbit, "changed_share": share, "mode": mode,
       "trainers": len(trainers), "rollouts": len(rollouts),
       "seconds_per_version": round(sec, 4), "versions_seconds": [round(s, 4) for s in per_version],
       "wire_bytes_per_version_busiest_nic": int(wire), "wire_bytes_per_version_all_nics": int(med(wire_total)),
       "full_bytes_per_nic": int(full), "wire_over_full": round(wire / full, 4),
       # the library's own count (wsync_version_stats wire_bytes / full_bytes, all trainers), where
       # this build has it (delta versions); -1 otherwise
       "stats_wire_bytes_per_version": med(trainers[0].get("stats_wire_bytes", [-1] * n)),
       "stats_full_bytes_per_version": med(trainers[0].get("stats_full_bytes", [-1] * n)),
       "line_rate_seconds": round(full / line, 4),
       "seconds_over_line_rate": round(sec / (full / line), 4),
       "wire_over_line_rate": round(wire / sec / line, 4),
       "effective_over_line_rate": round(full / sec / line, 4),
       "max_rank_cpu_share": round(max(r["cpu_seconds"] / r["wall_seconds"] for r in ranks if r["wall_seconds"] > 0), 3),
       # runnable threads waiting for a CPU, on average, in the busiest-waiting rank (> ~0.5: the
       # machine's CPUs, shared with whatever else runs, are the bound, not the link)
       "max_rank_run_queue_threads": round(max(r.get("run_queue_seconds", -1) / r["wall_seconds"] for r in ranks if r["wall_seconds"] > 0), 3),
       "load_average_1min": float(open("/proc/loadavg").read().split()[0]),
       "versions_checked": min(r["versions_checked"] for r in rollouts),
       "verified": all(r["verified"] for r in rollouts)}
prior = [json.loads(l) for l in open(rows_path)] if __import__("os").path.exists(rows_path) else []
dense = [p for p in prior if p["mode"] == "dense" and (p["hosts"], p["link_mbit"], p["changed_share"]) == (nh, mbit, share)]
if mode == "delta" and dense:
    row["speedup_over_dense"] = round(dense[-1]["seconds_per_version"] / sec, 3)
    row["wire_over_dense_wire"] = round(wire / dense[-1]["wire_bytes_per_version_busiest_nic"], 4)
open(rows_path, "a").write(json.dumps(row) + "\n")
print(json.dumps(row))
if not row["verified"]:
    sys.exit(f"hosts {nh}, {mbit} Mbit/s, share {share}, {mode}: a rollout did not verify")
PY
  rm -rf "$tag.sync"
}

for nh in "${host_counts[@]}"; do
  [ "$nh" = 2 ] || [ "$nh" = 4 ] || { echo "HOSTS: 2 or 4, not $nh" >&2; exit 2; }
  for mbit in "${rates[@]}"; do
    for ((h = 0; h < nh; ++h)); do netns_add_host "wd$nh-$mbit-$h" "$h" "$mbit" "$mbit"; done
    for share in "${shares[@]}"; do
      for mode in "${modes[@]}"; do run_config "$nh" "$mbit" "$share" "$mode"; done
    done
    netns_del_hosts
  done
done
