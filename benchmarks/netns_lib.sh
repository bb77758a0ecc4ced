# Sourced by benchmarks/cluster_validate.sh and benchmarks/delta_link_bench.sh: "hosts" as Linux
# network namespaces on one machine (root needed). Each host is a namespace with one NIC, nic0: a
# veth pair to a bridge in the root namespace (a non-blocking switch), rate-limited with tc tbf
# in both directions (egress of the host's end = its NIC out, egress of the bridge's end = its NIC
# in). Everything created is recorded in netns_hosts / netns_pids and removed by netns_cleanup
# (the caller traps EXIT).
#
# Functions:
#   netns_require_or_skip NAME   exit 77 (with a line on stderr) unless namespaces, ip and tc work
#   netns_bridge_up              the bridge $netns_bridge at $netns_subnet.1/24
#   netns_add_host NS INDEX TX_MBIT RX_MBIT   a host at $netns_subnet.(10+INDEX); tbf burst
#                                $NETNS_BURST_KB when set, else max(256, rate/8 per ms) KB
#   netns_del_hosts              removes the hosts (not the bridge) and forgets their processes
#   netns_cleanup                kills recorded processes, removes hosts and the bridge
#   netns_ucx                    (array) the env prefix for UCX over TCP on nic0
# Variables the caller may set before sourcing: netns_bridge (default wsc-br), netns_subnet
# (default 10.231.0).

netns_bridge=${netns_bridge:-wsc-br}
netns_subnet=${netns_subnet:-10.231.0}
netns_hosts=()
netns_pids=()
# UCX: TCP on the namespace's NIC only; receive segments large enough that a rollout, which
# progresses UCX every 20 ms between control frames, drains a socket's data in one pass.
# NETNS_UCX_EXTRA (space-separated NAME=VALUE) is appended: later settings win.
read -r -a netns_ucx_extra <<<"${NETNS_UCX_EXTRA:-}"
netns_ucx=(env UCX_TLS=tcp,self UCX_NET_DEVICES=nic0 UCX_TCP_RX_SEG_SIZE=8M
           UCX_TCP_TX_SEG_SIZE=1M UCX_TCP_MAX_POLL=1024 UCX_TCP_SNDBUF=4M UCX_TCP_RCVBUF=4M
           "${netns_ucx_extra[@]}")

netns_require_or_skip() {
  local who=$1 probe=wsc-probe-$$
  if ! command -v tc >/dev/null 2>&1 || ! ip netns add "$probe" 2>/dev/null; then
    echo "$who: cannot create network namespaces here (needs root, CAP_NET_ADMIN, ip and tc): skipped" >&2
    exit 77
  fi
  ip netns del "$probe"
}

netns_bridge_up() {
  ip link add "$netns_bridge" type bridge
  ip addr add "$netns_subnet.1/24" dev "$netns_bridge"
  ip link set "$netns_bridge" up
}

netns_add_host() {
  local ns=$1 idx=$2 tx=$3 rx=$4
  ip netns add "$ns"
  netns_hosts+=("$ns")
  ip link add "$ns-b" type veth peer name "$ns-a"
  ip link set "$ns-a" netns "$ns"
  ip -n "$ns" link set "$ns-a" name nic0
  ip -n "$ns" addr add "$netns_subnet.$((10 + idx))/24" dev nic0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set nic0 up
  ip link set "$ns-b" master "$netns_bridge" up
  # Segmentation offloads off where ethtool is installed (it is not on the CI box; tbf then
  # shapes GSO bursts, which the raw-TCP check in benchmarks/README.md shows is within 0.5 %).
  ip netns exec "$ns" ethtool -K nic0 tso off gso off gro off >/dev/null 2>&1 || true
  ethtool -K "$ns-b" tso off gso off gro off >/dev/null 2>&1 || true
  # The bucket: 256 KB up to 2 Gbit/s (the size the raw-TCP check validated at 500 Mbit/s), one
  # millisecond of the rate above (1250 KB at 10 Gbit/s), so that tbf's timer is not the limit.
  local burst_tx=${NETNS_BURST_KB:-$(( tx / 8 > 256 ? tx / 8 : 256 ))}
  local burst_rx=${NETNS_BURST_KB:-$(( rx / 8 > 256 ? rx / 8 : 256 ))}
  ip netns exec "$ns" tc qdisc add dev nic0 root tbf rate "${tx}mbit" burst "${burst_tx}kb" latency 200ms
  tc qdisc add dev "$ns-b" root tbf rate "${rx}mbit" burst "${burst_rx}kb" latency 200ms
}

netns_del_hosts() {
  local h
  for h in "${netns_hosts[@]}"; do ip netns del "$h" 2>/dev/null || true; done
  netns_hosts=()
  netns_pids=()
}

netns_cleanup() {
  local p
  for p in "${netns_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${netns_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  netns_del_hosts
  ip link del "$netns_bridge" 2>/dev/null || true
}
