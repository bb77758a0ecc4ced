#!/usr/bin/env bash
# Fault injection with real processes: a standalone wsync-coordinator and explicit-bootstrap
# trainer and rollout processes (wsync-fault-rank), while versions stream.
#   run_fault.sh <scenario> <iterations> <wsync-coordinator> <wsync-fault-rank> [mpirun]
# Scenarios (each iteration a fresh job; 2 trainers):
#   kill  3 one-rank replicas; rollout 2 gets kill -9 after a random version (1..8): trainers go
#         on, versions deliver to replicas 0 and 1 (bit-exact), the coordinator drops replica 2;
#         then a new process rejoins as replica 2, is filled from a peer replica (peer cold start)
#         and reads the later versions bit-exact; the last version is ready on all three.
#   stop  as kill, but SIGSTOP past the heartbeat timeout (1000 ms; or a version held as long:
#         stalled), then SIGCONT: the stopped
#         rank finds itself dropped, joins again as replica 2 (filled from a peer) and reads the
#         last versions bit-exact. Prints the detection time (SIGSTOP to the coordinator's drop).
#   stall  3 one-rank replicas, coordinator --timeout-ms 5000 below --heartbeat-timeout-ms 10000:
#         rollout 2 gets SIGSTOP; the coordinator drops it once it held a version for half the
#         job's timeout (no version ever fails the job), the trainers go on; after SIGCONT the
#         stopped rank's error says its replica was dropped.
#   join  1 replica; a second one (replica 1) joins while versions stream: its first version comes
#         from replica 0 (peer cold start), then it reads every later one bit-exact; the last
#         version is ready on both.
#   failover  2 replicas; the trainers publish 5 versions and hold; replica 2 joins; its cold
#         start source, replica 0 (whose fills wait 3 s: WSYNC_DEBUG_COLD_FILL_DELAY_MS), gets
#         kill -9 mid-fill: the fill fails over to replica 1, the joiner reads version 5 bit-exact
#         and follows; the last version is ready on replicas 1 and 2.
#   stallsource  as failover, but replica 0 gets SIGSTOP mid-fill (heartbeat timeout 30 s, job
#         timeout 6 s): the coordinator drops the stalled source once the fill took half the job's
#         timeout, the fill fails over to replica 1; the joiner never fails.
#   coldstart  1 replica of 2 ranks (TP 2); the trainers publish 5 versions and hold; replica 1
#         (2 ranks, TP 2) joins and must read version 5 (only a peer has it) bit-exact on both
#         ranks; then the trainers go on and it follows.
#   restart  coordinator --trainer-restart, 2 one-rank replicas; trainer 0 gets kill -9 after a
#         random version (3..8): trainer 1 is told to stop (its error names trainer 0), the
#         rollouts serve their newest version bit-exact with a growing age; restarted trainers
#         that publish the last started version again are refused (INVALID_USAGE naming it), then
#         a trainer 0 with a different registration is refused (MISMATCH naming the tensor), then
#         2 good trainers publish the versions above it: every rollout reads them bit-exact.
#   elastic  a job of no fixed rollout rank (coordinator --rollouts 0); the 2 trainers run under
#         mpirun (explicit bootstrap, rank from the launcher) and publish every step, each send
#         delayed 100 ms (WSYNC_DEBUG_SEND_DELAY_MS: a version is almost always in flight). Replica
#         1 joins (first version from the trainers), replica 2 joins (cold-filled from replica 1)
#         and gets kill -9 a few versions later, mid-transfer; a new process rejoins as replica 2,
#         is cold-filled from replica 1 and reads to the end. Every publish completes, replica 1
#         is ready in every version from its first one (never lost), every read is bit-exact, the
#         coordinator's summary counts the replica lost in flight, every process exits 0.
# Prints one line per iteration; exits non-zero (with the job's logs) on the first failure.
set -u
scenario=${1:?scenario}
iterations=${2:?iterations}
coordinator=${3:?wsync-coordinator}
fault_rank=${4:?wsync-fault-rank}
mpirun=${5:-mpirun}
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

# wait_for_version <file> <version> <timeout ms>: 0 once a rank's log says it read that version or
# a later one (a reader of the newest version may skip some).
wait_for_version() {
  local deadline=$(($(now_ms) + $3)) v
  while [ "$(now_ms)" -lt "$deadline" ]; do
    v=$(sed -n 's/.* version \([0-9]*\) ok$/\1/p' "$1" 2>/dev/null | tail -n 1)
    [ -n "$v" ] && [ "$v" -ge "$2" ] && return 0
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

start_rank_env() {  # <VAR=value> <name> <args...>: start_rank with one more environment variable
  local setting=$1 name=$2
  shift 2
  env "$setting" "$fault_rank" --address "$address" --secret "$secret" --trainers 2 "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}

expect_exit() {  # <pid> <name> <timeout ms>
  wait_pid "$1" "$3"
  local rc=$?
  [ "$rc" -eq 0 ] || fail "$2 exited with $rc"
}

run_kill() {
  local versions=100
  start_coordinator 3
  start_rank trainer0 --role trainer --rank 0 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1,2
  local t0=$last_pid
  start_rank trainer1 --role trainer --rank 1 --rollouts 3 --versions $versions --may-lose 2 --final-ready 0,1,2
  local t1=$last_pid
  local r=()
  for i in 0 1 2; do
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 3 --versions $versions
    r+=("$last_pid")
  done
  local at=$((RANDOM % 8 + 1))
  wait_for_version "$work/rollout2.log" $at 20000 || fail "rollout 2 never read version $at"
  local killed=$(now_ms)
  kill -9 "${r[2]}"
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped" 5000 || fail "the coordinator never dropped replica 2"
  local detected=$(($(now_ms) - killed))
  wait "${r[2]}" 2>/dev/null
  # The killed rank's replacement joins as replica 2 and is filled from a peer.
  start_rank rejoined --role rollout --replica 2 --join --expect-peer --versions $versions
  local j=$last_pid
  for p in "$t0:trainer 0" "$t1:trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1" "$j:rejoined rollout 2"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  grep -qE "replica 2 cold-started from replica [01] with version" "$work/coordinator.log" ||
    fail "the coordinator did not log replica 2's cold start"
  local first
  first=$(sed -n 's/^rollout 0 first version \([0-9]*\) from peer in \([0-9.]*\) s/\1 (\2 s)/p' "$work/rejoined.log")
  echo "kill iteration $iteration: rollout 2 killed after version $at, dropped within ${detected} ms; replicas 0 and 1 read every version bit-exact; the restarted rank rejoined, cold-started from a peer with version $first, then read every later one bit-exact"
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
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 3 --versions $versions --rejoin --expect-peer
    r+=("$last_pid")
  done
  wait_for_version "$work/rollout2.log" 3 20000 || fail "rollout 2 never read version 3"
  local stopped=$(now_ms)
  kill -STOP "${r[2]}"
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped.*(no heartbeat|stalled)" 5000 || fail "the coordinator never dropped the stopped rank"
  local detected=$(($(now_ms) - stopped))
  kill -CONT "${r[2]}"
  wait_for_line "$work/rollout2.log" "committed as rank .* \(joined\)" 20000 || fail "rollout 2 did not join again"
  wait_for_line "$work/coordinator.log" "replica 2 joined" 5000 || fail "the coordinator did not log the join"
  wait_for_line "$work/coordinator.log" "replica 2 cold-started from replica [01]" 5000 ||
    fail "the rejoined replica 2 was not filled from a peer"
  for p in "$t0:trainer 0" "$t1:trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1" "${r[2]}:rollout 2"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  echo "stop iteration $iteration: stopped rank dropped ${detected} ms after SIGSTOP (heartbeat timeout 1000 ms), rejoined by peer cold start ($(sed -n 's/^rollout 2 first version \([0-9]*\) from peer in \([0-9.]*\) s/version \1 in \2 s/p' "$work/rollout2.log")), read the last version bit-exact"
}

# stall: rollout 2 gets SIGSTOP while versions stream, with the job's timeout (5000 ms) below the
# heartbeat timeout (10000 ms): the coordinator drops the replica once it held a version for half
# the job's timeout (never the job failing with "version N not delivered"), the trainers go on;
# after SIGCONT the stopped rank fails with an error saying its replica was dropped.
run_stall() {
  local versions=300
  start_coordinator 3 --heartbeat-timeout-ms 10000 --timeout-ms 5000
  for t in 0 1; do
    start_rank trainer$t --role trainer --rank $t --rollouts 3 --versions $versions --may-lose 2 \
      --final-ready 0,1 --timeout-ms 5000
    eval "t$t=\$last_pid"
  done
  local r=()
  for i in 0 1 2; do
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 3 --versions $versions --timeout-ms 5000
    r+=("$last_pid")
  done
  wait_for_version "$work/rollout2.log" $((RANDOM % 5 + 2)) 20000 || fail "rollout 2 never read its first versions"
  local stopped=$(now_ms)
  kill -STOP "${r[2]}"
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped" 12000 || fail "the coordinator never dropped the stopped rank"
  local detected=$(($(now_ms) - stopped))
  grep -q "not delivered within" "$work/coordinator.log" && fail "a version waited on the stopped replica past the job's timeout"
  kill -CONT "${r[2]}"
  wait_pid "${r[2]}" 20000
  [ $? -eq 5 ] || fail "the stopped rank did not fail after SIGCONT"
  grep -q "rollout 2 dropped: .*replica 2 was dropped from the job" "$work/rollout2.log" ||
    fail "the stopped rank's error does not say it was dropped"
  for p in "$t0:trainer 0" "$t1:trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  echo "stall iteration $iteration: dropped ${detected} ms after SIGSTOP ($(grep -o 'replica 2 (rollout ranks 2) dropped: .*' "$work/coordinator.log" | head -n 1 | cut -c1-110)); the rank then said: $(sed -n 's/^rollout 2 dropped: //p' "$work/rollout2.log" | cut -c1-100)"
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
  wait_for_version "$work/rollout0.log" 5 20000 || fail "rollout 0 never read version 5"
  start_rank joiner --role rollout --replica 1 --join --expect-peer --versions $versions
  local j=$last_pid
  wait_for_line "$work/coordinator.log" "replica 1 joined" 20000 || fail "replica 1 never joined"
  grep -qE "^trainer 0 version 1[0-9]* " "$work/trainer0.log" || true
  for p in "$t0:trainer 0" "$t1:trainer 1" "$r0:rollout 0" "$j:joiner"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  grep -qE "replica 1 cold-started from replica 0 with version" "$work/coordinator.log" ||
    fail "the coordinator did not log replica 1's cold start"
  local first
  first=$(sed -n 's/^rollout 0 first version \([0-9]*\) from peer in \([0-9.]*\) s/\1 (\2 s after create)/p' "$work/joiner.log")
  echo "join iteration $iteration: replica 1 joined while versions streamed ($(grep -o 'planned in [0-9.]* ms' "$work/coordinator.log")), first version $first from a peer, read every later one bit-exact"
}

# start_holding_trainers <rollouts> <versions> <hold> <resume file> [args]: trainers 0 and 1 (pids
# in t0, t1) that publish <hold> versions, then wait for the resume file.
start_holding_trainers() {
  local rollouts=$1 versions=$2 hold=$3 resume=$4
  shift 4
  for t in 0 1; do
    start_rank trainer$t --role trainer --rank $t --rollouts "$rollouts" --versions "$versions" \
      --hold-after "$hold" --resume-file "$resume" "$@"
    eval "t$t=\$last_pid"
  done
}

run_coldstart() {
  local versions=40 hold=5
  local resume="$work/resume"
  start_coordinator 2
  start_holding_trainers 2 $versions $hold "$resume" --final-ready 0,1
  local pids_of=()
  for i in 0 1; do
    start_rank rollout$i --role rollout --rank $i --replica 0 --tp 2 --tp-rank $i --rollouts 2 --versions $versions
    pids_of+=("$last_pid:rollout $i")
  done
  wait_for_version "$work/rollout0.log" $hold 20000 || fail "rollout 0 never read version $hold"
  for i in 0 1; do
    start_rank joiner$i --role rollout --replica 1 --tp 2 --tp-rank $i --join --expect-peer --versions $versions
    pids_of+=("$last_pid:joiner rank $i")
  done
  # The trainers hold at version $hold: only replica 0 can give the joiner a version.
  for i in 0 1; do
    wait_for_line "$work/joiner$i.log" "first version $hold from peer" 20000 ||
      fail "joiner rank $i did not get version $hold from its peer"
    grep -q "version $hold ok" "$work/joiner$i.log" || fail "joiner rank $i did not read version $hold bit-exact"
  done
  touch "$resume"
  for p in "$t0:trainer 0" "$t1:trainer 1" "${pids_of[@]}"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  echo "coldstart iteration $iteration: $(grep -o 'replica 1 cold-started.*' "$work/coordinator.log"); both joiner ranks read version $hold, then followed to version $versions bit-exact"
}

# The cold start of a joiner (replica 2) whose source, replica 0, is lost mid-fill, and fails over
# to replica 1. cold_start_source_lost <how: kill|stop> <source's fill delay ms> <coordinator
# args...>: kill -9 of the source, or SIGSTOP (the coordinator drops it as stalled once the fill
# took half the job's timeout; it is resumed at the end).
cold_start_source_lost() {
  local how=$1 delay=$2 versions=40 hold=5
  shift 2
  local resume="$work/resume"
  start_coordinator 2 "$@"
  start_holding_trainers 2 $versions $hold "$resume" --may-lose 0 --final-ready 1,2
  start_rank_env WSYNC_DEBUG_COLD_FILL_DELAY_MS=$delay rollout0 --role rollout --rank 0 --replica 0 --rollouts 2 --versions $versions
  local r0=$last_pid
  start_rank rollout1 --role rollout --rank 1 --replica 1 --rollouts 2 --versions $versions
  local r1=$last_pid
  wait_for_version "$work/rollout1.log" $hold 20000 || fail "rollout 1 never read version $hold"
  wait_for_version "$work/rollout0.log" $hold 20000 || fail "rollout 0 never read version $hold"
  start_rank joiner --role rollout --replica 2 --join --expect-peer --versions $versions
  local j=$last_pid
  wait_for_line "$work/coordinator.log" "replica 2 cold start, attempt 1: version $hold from replica 0" 20000 ||
    fail "the joiner's cold start did not pick replica 0"
  sleep 0.3  # replica 0 holds its lease, about to write
  if [ "$how" = kill ]; then
    kill -9 "$r0"
    wait "$r0" 2>/dev/null
  else
    kill -STOP "$r0"
    wait_for_line "$work/coordinator.log" "replica 0 .*dropped: .*cold start .*stalled" 10000 ||
      fail "the coordinator did not drop the stalled source"
  fi
  wait_for_line "$work/joiner.log" "first version $hold from peer" 20000 ||
    fail "the joiner did not get version $hold after its source was lost ($how)"
  grep -qE "replica 2 cold-started from replica 1 with version $hold: .*attempt 2" "$work/coordinator.log" ||
    fail "the cold start did not fail over to replica 1"
  if [ "$how" = stop ]; then
    kill -CONT "$r0"
    wait_pid "$r0" 20000
  fi
  touch "$resume"
  for p in "$t0:trainer 0" "$t1:trainer 1" "$r1:rollout 1" "$j:joiner"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
}

# failover: the source is killed mid-fill.
run_failover() {
  cold_start_source_lost kill 3000
  echo "failover iteration $iteration: $(grep -o 'replica 2 cold start, attempt 1 failed.*' "$work/coordinator.log" | head -n 1); $(grep -o 'replica 2 cold-started.*' "$work/coordinator.log")"
}

# stallsource: the source gets SIGSTOP mid-fill, with the heartbeat timeout (30 s) above the job's
# timeout (6 s): the coordinator drops it as stalled and the fill fails over; the joiner never fails.
run_stallsource() {
  cold_start_source_lost stop 1000 --timeout-ms 6000 --heartbeat-timeout-ms 30000
  echo "stallsource iteration $iteration: $(grep -o 'replica 0 (rollout ranks 0) dropped.*' "$work/coordinator.log" | head -n 1 | cut -c1-120); $(grep -o 'replica 2 cold-started.*' "$work/coordinator.log")"
}

run_restart() {
  local versions=60
  start_coordinator 2 --trainer-restart --trainer-restart-timeout-ms 30000
  for t in 0 1; do
    start_rank trainer$t --role trainer --rank $t --rollouts 2 --versions $versions --pause-ms 2
    eval "t$t=\$last_pid"
  done
  local r=()
  for i in 0 1; do
    start_rank rollout$i --role rollout --rank $i --replica $i --rollouts 2 --versions $versions \
      --watch-outage --timeout-ms 60000
    r+=("$last_pid")
  done
  local at=$((RANDOM % 6 + 3))
  wait_for_version "$work/rollout0.log" $at 20000 || fail "rollout 0 never read version $at"
  kill -9 "$t0"
  wait "$t0" 2>/dev/null
  wait_pid "$t1" 10000
  [ $? -eq 5 ] || fail "trainer 1 did not fail after trainer 0 was killed"
  grep -q "trainers must restart.*trainer 0" "$work/trainer1.log" || fail "trainer 1's error does not name trainer 0"
  wait_for_line "$work/coordinator.log" "trainers lost.*versions above [0-9]+" 5000 || fail "the coordinator did not log the loss"
  local floor
  floor=$(sed -n 's/.*trainers lost.*versions above \([0-9]*\)$/\1/p' "$work/coordinator.log" | head -n 1)
  # The outage: both rollouts keep serving their newest version, its age growing.
  for i in 0 1; do
    wait_for_line "$work/rollout$i.log" "serving version .* age_ms ([1-9][0-9]{3,})" 10000 ||
      fail "rollout $i did not serve a version older than 1 s during the outage"
  done
  # Restarted trainers that publish the last started version again are refused.
  for t in 0 1; do
    start_rank again$t --role trainer --rank $t --rollouts 2 --first-version "$floor" --versions $versions
    eval "a$t=\$last_pid"
  done
  for t in 0 1; do
    wait_pid "$(eval echo \$a$t)" 20000
    [ $? -eq 5 ] || fail "trainer $t publishing version $floor was not refused"
  done
  grep -q "published version $floor, not above version $floor" "$work/again0.log" "$work/again1.log" ||
    fail "the refusal does not name version $floor"
  # A trainer 0 with another registration (hidden size) is refused; trainer 1 waits for a good one.
  start_rank trainer1b --role trainer --rank 1 --rollouts 2 --first-version $((floor + 1)) --versions $versions --final-ready 0,1
  local n1=$last_pid
  start_rank bad0 --role trainer --rank 0 --rollouts 2 --first-version $((floor + 1)) --versions $versions --hidden 128
  wait_pid "$last_pid" 20000
  [ $? -eq 5 ] || fail "trainer 0 with another registration was not refused"
  grep -q "trainer 0 registered differently.*tensor '" "$work/bad0.log" &&
    grep -q "WSYNC_ERR_MISMATCH: trainer 0 registered differently" "$work/coordinator.log" ||
    fail "the mismatch error (MISMATCH) does not name trainer 0 and a tensor"
  start_rank trainer0b --role trainer --rank 0 --rollouts 2 --first-version $((floor + 1)) --versions $versions --final-ready 0,1
  local n0=$last_pid
  for p in "$n0:restarted trainer 0" "$n1:restarted trainer 1" "${r[0]}:rollout 0" "${r[1]}:rollout 1"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  grep -q "^trainer 0 version $((floor + 1)) ready=0,1" "$work/trainer0b.log" ||
    fail "the first version after the restart was not ready on both replicas"
  local oldest
  oldest=$(sed -n 's/.*serving version [0-9]* age_ms \([0-9]*\).*/\1/p' "$work/rollout0.log" | sort -n | tail -n 1)
  local aborted
  aborted=$(grep -oE "version [0-9]+ aborted.*" "$work/coordinator.log" | head -n 1)
  echo "restart iteration $iteration: trainer 0 killed after version $at (${aborted:-between versions}); versions above $floor; rollouts served their last version throughout (up to ${oldest} ms old), a repeated version and a changed registration were refused, then read versions $((floor + 1))..$versions bit-exact"
}

# start_mpirun_trainers <name> <args...>: trainers 0 and 1 under one mpirun (explicit bootstrap,
# each rank from the launcher), their output in <name>.log; the mpirun's pid in last_pid.
start_mpirun_trainers() {
  local name=$1
  shift
  "$mpirun" --allow-run-as-root --oversubscribe --mca btl self,vader -n 2 \
    -x WSYNC_DEBUG_SEND_DELAY_MS "$fault_rank" --address "$address" --secret "$secret" \
    --trainers 2 --role trainer --rank-from-launcher "$@" >"$work/$name.log" 2>&1 &
  last_pid=$!
  pids+=("$last_pid")
}

# first_version <log>: the first version a joined rank reported, or nothing.
first_version() { sed -n 's/^rollout [0-9]* first version \([0-9]*\) from .*/\1/p' "$1" | head -n 1; }

# ready_on <replica>: the versions trainer 0 saw ready on that replica (trainers.log), one a line.
ready_on() {
  awk -v r="$1" '$1 == "trainer" && $2 == 0 && ("," substr($5, 7) ",") ~ ("," r ",") { print $4 }' \
    "$work/trainers.log"
}

# wait_for_ready <replica> <version> <timeout ms>: 0 once trainer 0 saw that version or a later one
# ready on the replica.
wait_for_ready() {
  local deadline=$(($(now_ms) + $3)) v
  while [ "$(now_ms)" -lt "$deadline" ]; do
    v=$(ready_on "$1" | tail -n 1)
    [ -n "$v" ] && [ "$v" -ge "$2" ] && return 0
    sleep 0.005
  done
  return 1
}

run_elastic() {
  local versions=75 hold=60
  local resume="$work/resume"
  start_coordinator 0
  # The trainers publish from the start (to nobody until replica 1 joined); they wait at version
  # $hold for the rejoined replica, if it has not joined by then.
  WSYNC_DEBUG_SEND_DELAY_MS=100 start_mpirun_trainers trainers --rollouts 0 --versions $versions \
    --pause-ms 0 --may-lose 2 --final-ready 1,2 --hold-after $hold --resume-file "$resume"
  local trainers=$last_pid
  wait_for_line "$work/trainers.log" "^trainer 0 version 3 ready= " 20000 ||
    fail "the trainers did not publish to nobody"
  start_rank replica1 --role rollout --replica 1 --join --rollouts 0 --versions $versions
  local r1=$last_pid
  wait_for_line "$work/replica1.log" "first version [0-9]+ from trainers" 20000 ||
    fail "replica 1 did not get its first version from the trainers"
  start_rank replica2 --role rollout --replica 2 --join --expect-peer --rollouts 0 --versions $versions
  local r2=$last_pid
  wait_for_line "$work/replica2.log" "first version [0-9]+ from peer" 20000 ||
    fail "replica 2 was not cold-filled from replica 1"
  # The kill: 40 ms after trainer 0 saw a version ready on replica 2 (from its first one + 2..5),
  # the next one has started (both trainers published it) and is in its send delay (100 ms),
  # which replica 2 waits for.
  local at=$(($(first_version "$work/replica2.log") + RANDOM % 4 + 2))
  [ "$at" -lt "$hold" ] || fail "replica 2 joined too late (version $at, the trainers hold at $hold)"
  wait_for_ready 2 $at 20000 || fail "no version from $at on was ready on replica 2"
  local killed_after
  killed_after=$(ready_on 2 | tail -n 1)
  sleep 0.04
  kill -9 "$r2"
  wait "$r2" 2>/dev/null
  wait_for_line "$work/coordinator.log" "replica 2 .*dropped" 5000 || fail "the coordinator never dropped replica 2"
  start_rank rejoined2 --role rollout --replica 2 --join --expect-peer --rollouts 0 --versions $versions
  local j=$last_pid
  wait_for_line "$work/rejoined2.log" "first version [0-9]+ from peer" 30000 ||
    fail "the restarted replica 2 was not cold-filled from replica 1"
  touch "$resume"
  for p in "$trainers:trainers (mpirun)" "$r1:replica 1" "$j:rejoined replica 2"; do
    expect_exit "${p%%:*}" "${p#*:}" 60000
  done
  expect_exit "$coordinator_pid" coordinator 10000
  for t in 0 1; do
    [ "$(grep -c "^trainer $t version [0-9]* ready=" "$work/trainers.log")" -eq $versions ] ||
      fail "trainer $t did not complete all $versions publishes"
  done
  [ "$(grep -cE "replica 2 cold-started from replica 1 with version" "$work/coordinator.log")" -eq 2 ] ||
    fail "the coordinator did not log both cold starts of replica 2 from replica 1"
  # Replica 1 misses no version: ready on it in every version from its first one on.
  local first1
  first1=$(ready_on 1 | head -n 1)
  [ -n "$first1" ] || fail "no version was ready on replica 1"
  [ "$(ready_on 1 | wc -l)" -eq $((versions - first1 + 1)) ] ||
    fail "replica 1 missed versions: ready in $(ready_on 1 | wc -l) of versions $first1..$versions"
  local lost_in
  lost_in=$(sed -n 's/^trainer 0 version \([0-9]*\) ready=.* lost=2$/\1/p' "$work/trainers.log" | head -n 1)
  [ -n "$lost_in" ] || fail "no version lost replica 2 in flight (the kill came between versions)"
  grep -q "summary: .* 1 lost replicas (1 while a version was in flight)" "$work/coordinator.log" ||
    fail "the coordinator's summary does not count replica 2 lost in flight"
  echo "elastic iteration $iteration: replica 1 joined (first version $(first_version "$work/replica1.log") from the trainers), replica 2 cold-filled from it with version $(first_version "$work/replica2.log"), killed after version $killed_after was ready on it, lost in version $lost_in; rejoined, cold-filled with version $(first_version "$work/rejoined2.log"); replica 1 ready in versions $first1..$versions; $(grep -o '1 lost replicas ([^)]*)' "$work/coordinator.log")"
}

for iteration in $(seq 1 "$iterations"); do
  rm -f "$work"/*
  pids=()
  "run_$scenario"
  cleanup
done
