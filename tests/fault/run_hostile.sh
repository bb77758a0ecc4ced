#!/usr/bin/env bash
# A hostile client against a real job: a standalone wsync-coordinator, 2 trainers and one rollout
# replica (wsync-fault-rank, explicit bootstrap) streaming versions, while wsync-hostile-client
# attacks the control port without the secret for <seconds> (floods, garbage, truncated and huge
# frames, no and wrong secrets, connect-close loops; see hostile_client.cc). Meanwhile:
#   - a join with a wrong secret fails at once (PROTOCOL, "wrong shared secret"), and one with no
#     secret fails locally (INVALID_ARGUMENT);
#   - a legitimate replica (replica 1) joins while the attack runs and reads bit-exact;
# and afterwards: every job process exits 0 (versions bit-exact, the last one ready on both
# replicas), the hostile client's own checks passed (memory flat, per-peer limits, counters), and
# the coordinator logged the refusals rate-limited: some lines, far fewer than the refusals.
#   run_hostile.sh <wsync-coordinator> <wsync-fault-rank> <wsync-hostile-client> [seconds]
#                  [bound on the coordinator's VmRSS growth in KiB; negative: not checked]
set -u
coordinator=${1:?wsync-coordinator}
fault_rank=${2:?wsync-fault-rank}
hostile=${3:?wsync-hostile-client}
seconds=${4:-12}
rss_growth_kib=${5:-2048}
secret=hostile-test-secret-$RANDOM$RANDOM
work=$(mktemp -d /tmp/wsync-hostile.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT

now_ms() { echo $(($(date +%s%N) / 1000000)); }

fail() {
  echo "FAILED (hostile): $*"
  for f in "$work"/*.log "$work"/*.out; do
    echo "---- $(basename "$f")"
    tail -n 30 "$f"
  done
  exit 1
}

# until_line <file> <regex> <timeout ms>: 0 once the file has a matching line.
until_line() {
  local deadline=$(($(now_ms) + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || return 1
    sleep 0.02
  done
}

# finished <pid> <name> <timeout ms>: fails unless the process exits 0 in time.
finished() {
  local deadline=$(($(now_ms) + $3))
  while kill -0 "$1" 2>/dev/null; do
    [ "$(now_ms)" -lt "$deadline" ] || { kill -9 "$1"; fail "$2 did not finish in time"; }
    sleep 0.05
  done
  wait "$1" || fail "$2 exited with $?"
}

rank() {  # <log name> <args...>: a wsync-fault-rank in the background; its pid in $last
  local name=$1
  shift
  "$fault_rank" --address "$address" --trainers 2 "$@" >"$work/$name.log" 2>&1 &
  last=$!
  pids+=("$last")
}

metrics_port=$("$hostile" --free-port) || fail "no free port"
"$coordinator" --trainers 2 --rollouts 1 --secret "$secret" --timeout-ms 30000 \
  --metrics-port "$metrics_port" >"$work/coordinator.out" 2>"$work/coordinator.log" &
coordinator_pid=$!
pids+=("$coordinator_pid")
until_line "$work/coordinator.out" "listening on port" 10000 || fail "the coordinator did not start"
port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$work/coordinator.out")
address="127.0.0.1:$port"

versions=$((seconds * 60))
for t in 0 1; do
  rank trainer$t --secret "$secret" --role trainer --rank $t --rollouts 1 --versions $versions \
    --pause-ms 15 --final-ready 0,1 --timeout-ms 60000
  trainer_pid[$t]=$last
done
rank rollout0 --secret "$secret" --role rollout --rank 0 --replica 0 --rollouts 1 \
  --versions $versions --timeout-ms 120000
rollout_pid=$last
until_line "$work/rollout0.log" "version 3 ok" 30000 || fail "rollout 0 never read version 3"

"$hostile" --port "$port" --pid "$coordinator_pid" --seconds "$seconds" --warmup 4 \
  --rss-growth-kib "$rss_growth_kib" --metrics-port "$metrics_port" >"$work/hostile.log" 2>&1 &
hostile_pid=$!
pids+=("$hostile_pid")
until_line "$work/hostile.log" "attack running" 10000 || fail "the hostile client did not start"
sleep 1

# Joins without the secret, during the attack: refused at once, never retried until the timeout.
started=$(now_ms)
rank wrong --secret "not-the-secret" --role rollout --replica 2 --join --versions 1 --timeout-ms 20000
wait "$last"
rc=$?
took=$(($(now_ms) - started))
[ "$rc" -eq 5 ] || fail "the wrong-secret join exited with $rc, expected 5 (a wsync error)"
grep -q "PROTOCOL\|refused the handshake: authentication failed (wrong shared secret)" "$work/wrong.log" ||
  fail "the wrong-secret join did not say the secret was refused"
[ "$took" -lt 5000 ] || fail "the wrong-secret join took $took ms (it must fail at once, not retry)"
rank nosecret --secret "" --role rollout --replica 3 --join --versions 1 --timeout-ms 20000
wait "$last"
[ $? -eq 5 ] || fail "the join without a secret did not fail"
grep -q "needs a secret" "$work/nosecret.log" || fail "the join without a secret did not say why"

# A legitimate replica joins while the attack goes on.
rank joiner --secret "$secret" --role rollout --replica 1 --join --versions $versions --timeout-ms 120000
joiner_pid=$last
until_line "$work/joiner.log" "committed as rank .* \(joined\)" 30000 || fail "replica 1 never joined"
kill -0 "$hostile_pid" 2>/dev/null || fail "the attack was over before replica 1 joined"
joined_ms=$(($(now_ms) - started))

finished "$hostile_pid" "the hostile client" $(((seconds + 60) * 1000))
for p in "${trainer_pid[0]}:trainer 0" "${trainer_pid[1]}:trainer 1" "$rollout_pid:rollout 0" \
  "$joiner_pid:replica 1 (joined)"; do
  finished "${p%%:*}" "${p#*:}" 120000
done
finished "$coordinator_pid" "the coordinator" 20000

refused=$(sed -n 's/^hostile: refused connections \([0-9]*\)$/\1/p' "$work/hostile.log")
lines=$(grep -c "control server on port $port: refused" "$work/coordinator.log")
summaries=$(grep -c "more refused connections not logged" "$work/coordinator.log")
[ -n "$refused" ] && [ "$refused" -gt 0 ] || fail "the hostile client counted no refusal"
[ "$lines" -gt 0 ] || fail "the coordinator logged no refusal"
[ "$summaries" -gt 0 ] || fail "the coordinator logged no summary of the refusals it did not log"
[ $((lines * 20)) -lt "$refused" ] || fail "$lines log lines for $refused refusals: not rate-limited"
grep -q "wrong_secret" "$work/coordinator.log" || fail "no wrong-secret refusal was logged"

grep "^hostile:" "$work/hostile.log"
echo "hostile: $refused connections refused, $lines log lines and $summaries summaries; a wrong" \
  "secret failed in $took ms; replica 1 joined under attack ($joined_ms ms after the wrong-secret" \
  "join began) and read bit-exact; $versions versions bit-exact on both replicas"
