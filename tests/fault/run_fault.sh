#!/usr/bin/env bash
# Fault injection with real processes: a standalone wsync-coordinator and explicit-bootstrap
# trainer and rollout processes (wsync-fault-rank), while versions stream.
#   run_fault.sh <scenario> <iterations> <wsync-coordinator> <wsync-fault-rank>
# Scenarios (each iteration a fresh job; 2 trainers):
#   kill  3 one-rank replicas; rollout 2 gets kill -9 after a random version (1..8): trainers go
#         on, versions deliver to replicas 0 and 1 (bit-exact), the coordinator drops replica 2.
#   stop  as kill, but SIGSTOP past the heartbeat timeout (1000 ms), then SIGCONT: the stopped
#         rank finds itself dropped, joins again as replica 2 and reads the last versions
#         bit-exact. Prints the detection time (SIGSTOP to the coordinator's drop).
#   join  1 replica; a second one (replica 1) joins while versions stream and reads them
#         bit-exact; the last version is ready on both.
# Prints one line per iteration; exits non-zero (with the job's logs) on the first failure.
set -u
scenario=${1:?scenario}
iterations=${2:?iterations}
coordinator=${3:?wsync-coordinator}
fault_rank=${4:?wsync-fault-rank}
secret=fault-test-secret
work=$(mktemp -d /tmp/wsync-fault.XXXXXX)
pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap 'cleanup; rm -rf "$work"' EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_for_line <file> <regex> <timeout ms>: 0 once the file has a matching line.
wait_for_line() {
  local deadline=$(($(now_ms) + $3))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# wait_pid <pid> <timeout ms>: the exit code, or 124 (killed) past the timeout.
wait_pid() {
  local deadline=$(($(now_ms) + $2))
  while kill -0 "$1" 2>/dev/null; do
    if [ "$(now_ms)" -ge "$deadline" ]; then
      kill -9 "$1" 2>/dev/null
      wait "$1" 2>/dev/null
      return 124
    fi
    sleep 0.02
  done
  wait "$1"
}

fail() {
  echo "FAILED ($scenario, iteration $iteration): $*"
  for f in "$work"/*.log; do
    echo "---- $(basename "$f")"
    tail -n 25 "$f"
  done
  exit 1
}

start_coordinator() {  # <rollouts> [extra args]
  local rollouts=$1
  shift
  "$coordinator" --trainers 2 --rollouts "$rollouts" --secret "$secret" --max-staleness 0 \
    --timeout-ms 20000 "$@" >"$work/coordinator.out" 2>"$work/coordinator.log" &
  coordinator_pid=$!
  pids+=("$coordinator_pid")
  wait_for_line "$work/coordinator.out" "listening on port" 10000 || fail "the coordinator did not start"
  address="127.0.0.1:$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$work/coordinator.out")"
}

start_rank() {  # <name> <args...>: runs wsync-fault-rank, output in <name>.log
  local name=$1
  shift
  "$fault_rank" --address "$address" --secret "$secret" --trainers 2 "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}

expect_exit() {  # <pid> <name> <timeout ms>
  wait_pid "$1" "$3"
  local rc=$?
  [ "$rc" -eq 0 ] || fail "$2 exited with $rc"
}

run_kill() {
  local versions=60
  start_coordinator 3
  start_rank trainer0 --role trainer --rank 0 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1
  local t0=$last_pid
  start_rank trainer1 --role trainer --rank 1 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1
  local t1=$last_pid
  local r=()
  for i in 0 1 2; do
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 3 --versions $versions
    r+=("$last_pid")
  done
  local at=$((RANDOM % 8 + 1))
  wait_for_line "$work/rollout2.log" "version $at ok" 20000 || fail "rollout 2 never read version $at"
  local killed=$(now_ms)
  kill -9 "${r[2]}"
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped" 5000 || fail "the coordinator never dropped replica 2"
  local detected=$(($(now_ms) - killed))
  for p in "$t0:trainer 0" "$t1:trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  echo "kill iteration $iteration: rollout 2 killed after version $at, dropped within ${detected} ms; replicas 0 and 1 read every version bit-exact"
}

run_stop() {
  local versions=200
  start_coordinator 3 --heartbeat-timeout-ms 1000
  start_rank trainer0 --role trainer --rank 0 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1,2
  local t0=$last_pid
  start_rank trainer1 --role trainer --rank 1 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1,2
  local t1=$last_pid
  local r=()
  for i in 0 1 2; do
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 3 --versions $versions --rejoin
    r+=("$last_pid")
  done
  wait_for_line "$work/rollout2.log" "version 3 ok" 20000 || fail "rollout 2 never read version 3"
  local stopped=$(now_ms)
  kill -STOP "${r[2]}"
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped.*no heartbeat" 5000 || fail "the coordinator never dropped the stopped rank"
  local detected=$(($(now_ms) - stopped))
  kill -CONT "${r[2]}"
  wait_for_line "$work/rollout2.log" "committed as rank .* \(joined\)" 20000 || fail "rollout 2 did not join again"
  wait_for_line "$work/coordinator.log" "replica 2 joined" 5000 || fail "the coordinator did not log the join"
  for p in "$t0:trainer 0" "$t1:trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1" "${r[2]}:rollout 2"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  echo "stop iteration $iteration: stopped rank dropped ${detected} ms after SIGSTOP (heartbeat timeout 1000 ms), rejoined, read the last version bit-exact"
}

run_join() {
  local versions=150
  start_coordinator 1
  start_rank trainer0 --role trainer --rank 0 --rollouts 1 --versions $versions --final-ready 0,1
  local t0=$last_pid
  start_rank trainer1 --role trainer --rank 1 --rollouts 1 --versions $versions --final-ready 0,1
  local t1=$last_pid
  start_rank rollout0 --role rollout --rank 0 --replica 0 --rollouts 1 --versions $versions
  local r0=$last_pid
  wait_for_line "$work/rollout0.log" "version 5 ok" 20000 || fail "rollout 0 never read version 5"
  start_rank joiner --role rollout --replica 1 --join --versions $versions
  local j=$last_pid
  wait_for_line "$work/coordinator.log" "replica 1 joined" 20000 || fail "replica 1 never joined"
  grep -qE "^trainer 0 version 1[0-9]* " "$work/trainer0.log" || true
  for p in "$t0:trainer 0" "$t1:trainer 1" "$r0:rollout 0" "$j:joiner"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  local first
  first=$(sed -n 's/^rollout 0 version \([0-9]*\) ok/\1/p' "$work/joiner.log" | head -n 1)
  echo "join iteration $iteration: replica 1 joined while versions streamed ($(grep -o 'planned in [0-9.]* ms' "$work/coordinator.log")), first read version $first, read every later one bit-exact"
}

for iteration in $(seq 1 "$iterations"); do
  rm -f "$work"/*
  pids=()
  "run_$scenario"
  cleanup
done
