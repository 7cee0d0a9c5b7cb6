#!/bin/bash
# dtlaunch-train recovers live, with no checkpoint (issue 32 item 4; docs/example.md): 3 ranks on
# synthetic data with DTLAUNCH_DDP_LIVE=1; rank 2 is SIGKILLed in the first epoch and a replacement
# started with DTLAUNCH_DDP_LIVE_JOIN=1, as `dtlaunch job --live` would; rank 1 is killed near the
# end of that epoch and replaced too. The survivors keep their processes and rank 0 ends with
# the weights sha256 of a fault-free run with the same seed; two fault-free runs print the same.
# Then a stop signal during a recovery ends the survivors' wait for a replacement with 75.
# Usage: live_train_test.sh DTLAUNCH_TRAIN
set -u
train=$1
[ -x "$train" ] || { echo "FAIL: $train is not built"; exit 1; }
dir=$(mktemp -d)
declare -A pid
cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
export WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1
export DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3 DTLAUNCH_DDP_LIVE_WAIT=30 DTLAUNCH_DDP_LIVE=1
# 2 epochs of 40 steps; a progress line at every step, so that a fault lands mid-run.
args=(--synthetic 1280 --batch-size 32 --epochs 2 --log-every 1 --seed 5 --backend gloo)
fail=0
run=""

bad() {
  echo "FAIL ($run): $*"
  fail=1
}

new_run() {
  run=$1
  pid=()
  mkdir -p "$dir/$run"
  MASTER_PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export MASTER_PORT
}

# start NAME RANK [VAR=VALUE...]
start() {
  local name=$1 rank=$2
  shift 2
  RANK=$rank LOCAL_RANK=$rank env "$@" timeout 120 "$train" "${args[@]}" >"$dir/$run/$name.log" 2>&1 &
  pid[$name]=$!
}

# kill_rank NAME: SIGKILL to the program itself (timeout runs it as its child).
kill_rank() {
  pkill -9 -P "${pid[$1]}" || bad "no process of $1 to kill"
}

expect() {
  wait "${pid[$1]}"
  local got=$?
  [ "$got" = "$2" ] || bad "$1 exited $got, expected $2"
}

# wait_for NAME TEXT: up to 60 s for NAME's output to have TEXT.
wait_for() {
  for _ in $(seq 600); do
    grep -qF -- "$2" "$dir/$run/$1.log" && return
    sleep 0.1
  done
  bad "$1 never said: $2"
}

digest_of() {
  sed -n 's/^weights sha256 \([0-9a-f]\{64\}\)$/\1/p' "$dir/$run/$1.log"
}

show() {
  for f in "$dir/$run"/*.log; do
    echo "-- $(basename "$f")"
    cat "$f"
  done
}

for n in 1 2; do
  new_run "fault-free-$n"
  for r in 0 1 2; do start "r$r" $r; done
  for r in 0 1 2; do expect "r$r" 0; done
  digests[$n]=$(digest_of r0)
  [ -n "${digests[$n]}" ] || bad "rank 0 printed no digest"
done
show
[ "${digests[1]}" = "${digests[2]}" ] || bad "two fault-free runs: ${digests[1]} and ${digests[2]}"

new_run faults
for r in 0 1 2; do start "r$r" $r; done
wait_for r0 "epoch 1/2 step 10/40"
kill_rank r2
start rep2 2 DTLAUNCH_DDP_LIVE_JOIN=1
wait_for r0 "epoch 1/2 step 39/40"
kill_rank r1
start rep1 1 DTLAUNCH_DDP_LIVE_JOIN=1
for n in r0 rep1 rep2; do expect $n 0; done
expect r1 137
expect r2 137
wait_for r0 "live recovery, generation 2"
wait_for rep2 "joined the running job as a replacement in generation 1"
wait_for rep1 "joined the running job as a replacement in generation 2"
[ "$(digest_of r0)" = "${digests[1]}" ] ||
  bad "weights $(digest_of r0) differ from the fault-free ${digests[1]}"
show

# A stop signal (preemption) while the survivors wait for a replacement that never comes: they
# leave within moments with 75, as at start-up, not after DTLAUNCH_DDP_LIVE_WAIT (30 s here).
new_run stop-in-recovery
for r in 0 1 2; do start "r$r" $r; done
wait_for r0 "epoch 1/2 step 10/40"
kill_rank r2
wait_for r0 "peer lost"
wait_for r1 "peer lost"
sleep 1
stopped_at=$SECONDS
pkill -TERM -P "${pid[r0]}" || bad "no process of r0 to stop"
pkill -TERM -P "${pid[r1]}" || bad "no process of r1 to stop"
expect r0 75
expect r1 75
expect r2 137
took=$((SECONDS - stopped_at))
((took < 10)) || bad "the survivors left ${took} s after the signal (the wait is 30 s)"
for n in r0 r1; do
  grep -q "stopped error: .*a stop signal (request_stop()) ended the live recovery from" \
    "$dir/$run/$n.log" ||
    bad "$n did not say that the stop ended its recovery"
done
show
exit $fail
