#!/bin/bash
# Live recovery with real processes and signals on one machine (issue 32, docs/ddp.md "Live
# recovery"): 3 ranks of live_worker train (heartbeat timeout 3 s); ranks are SIGKILLed (by themselves, at a given step)
# or SIGSTOPped (by this script), and a replacement is started with DTLAUNCH_DDP_LIVE_JOIN=1 and
# the lost rank's RANK, as `dtlaunch job --live` would. The survivors must keep their processes
# and end with the fault-free run's weights, bit for bit; the losses that cannot be recovered
# must end every survivor with status 76 and a line that says why.
# Usage: live_test.sh LIVE_WORKER DTLAUNCH_STORE FORGE_STORE_PY
set -u
worker=$1 store_host=$2 forger=$3
for f in "$worker" "$store_host"; do
  [ -x "$f" ] || { echo "FAIL: $f is not built"; exit 1; }
done
dir=$(mktemp -d)
declare -A pid
cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "${store_pid:-}" ] && kill "$store_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
export WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1 LIVE_STEPS=24
export DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3 DTLAUNCH_DDP_LIVE_WAIT=30 DTLAUNCH_DDP_LIVE=1
fail=0
case_name=""

bad() {
  echo "FAIL ($case_name): $*"
  fail=1
}

# A new job: its own port and marks, no process left from the last one.
new_case() {
  case_name=$1
  pid=()
  mkdir -p "$dir/$case_name"
  export LIVE_MARKS="$dir/$case_name"
  MASTER_PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export MASTER_PORT
  echo "== $case_name"
}

# start NAME RANK [VAR=VALUE...]: one process, its output in NAME.log.
start() {
  local name=$1 rank=$2
  shift 2
  RANK=$rank LOCAL_RANK=$rank env "$@" timeout 120 "$worker" >"$LIVE_MARKS/$name.log" 2>&1 &
  pid[$name]=$!
}

# expect NAME STATUS: waits for NAME and checks its exit status.
expect() {
  wait "${pid[$1]}"
  local got=$?
  [ "$got" = "$2" ] || bad "$1 exited $got, expected $2"
}

# says NAME TEXT: NAME's output has TEXT.
says() {
  grep -qF -- "$2" "$LIVE_MARKS/$1.log" || bad "$1 did not say: $2"
}

# The worker's own pid (timeout runs it as a child), from its first line.
wpid() {
  for _ in $(seq 300); do
    local p
    p=$(sed -n 's/^pid \([0-9]*\) rank .*/\1/p' "$LIVE_MARKS/$1.log" 2>/dev/null)
    [ -n "$p" ] && { echo "$p"; return; }
    sleep 0.1
  done
  bad "$1 printed no pid"
}

# kept NAME RANK GENERATION: the process that started as NAME ended the run itself.
kept() {
  says "$1" "done rank $2 pid $(wpid "$1") step $LIVE_STEPS generation $3 replacement 0"
}

digest_of() {
  sed -n 's/^weights sha256 \([0-9a-f]\{64\}\)$/\1/p' "$LIVE_MARKS/$1.log"
}

show() {
  for f in "$LIVE_MARKS"/*.log; do
    echo "-- $(basename "$f")"
    cat "$f"
  done
}

new_case fault-free
for r in 0 1 2; do start "r$r" $r; done
for r in 0 1 2; do expect "r$r" 0; done
reference=$(digest_of r0)
[ -n "$reference" ] || bad "rank 0 printed no digest"
show

new_case kill
for r in 0 1 2; do start "r$r" $r LIVE_KILL=2:8 LIVE_STEP_MS=40; done
expect r2 137
start rep 2 DTLAUNCH_DDP_LIVE_JOIN=1
for n in r0 r1 rep; do expect $n 0; done
for n in r0 r1; do says $n "recovered before step 8 (generation 1)"; done
says rep "joined the running job as a replacement in generation 1 with step 8's state from rank 0"
says rep "done rank 2 pid $(wpid rep) step 24 generation 1 replacement 1"
for r in 0 1; do kept "r$r" $r 1; done
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

new_case same-rank-twice
for r in 0 1 2; do start "r$r" $r LIVE_KILL=2:6,2:14 LIVE_STEP_MS=40; done
expect r2 137
start rep1 2 DTLAUNCH_DDP_LIVE_JOIN=1 LIVE_KILL=2:6,2:14 LIVE_STEP_MS=40
expect rep1 137
start rep2 2 DTLAUNCH_DDP_LIVE_JOIN=1 LIVE_KILL=2:6,2:14 LIVE_STEP_MS=40
for n in r0 r1 rep2; do expect $n 0; done
for n in r0 r1; do says $n "recovered before step 14 (generation 2)"; done
for r in 0 1; do kept "r$r" $r 2; done
says rep2 "in generation 2 with step 14's state"
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

# A storm: 5 faults in one job, ranks 1 and 2 in turn, each replacement killed in its turn.
new_case storm
storm=(LIVE_KILL=1:4,2:8,1:12,2:16,1:20 LIVE_STEP_MS=40)
for r in 0 1 2; do start "r$r" $r "${storm[@]}"; done
expect r1 137
start r1b 1 DTLAUNCH_DDP_LIVE_JOIN=1 "${storm[@]}"
expect r2 137
start r2b 2 DTLAUNCH_DDP_LIVE_JOIN=1 "${storm[@]}"
expect r1b 137
start r1c 1 DTLAUNCH_DDP_LIVE_JOIN=1 "${storm[@]}"
expect r2b 137
start r2c 2 DTLAUNCH_DDP_LIVE_JOIN=1 "${storm[@]}"
expect r1c 137
start r1d 1 DTLAUNCH_DDP_LIVE_JOIN=1 "${storm[@]}"
for n in r0 r1d r2c; do expect $n 0; done
kept r0 0 5
for s in 4 8 12 16 20; do says r0 "recovered before step $s"; done
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

# Another build (the worker with a byte appended) and another model (a hidden layer one wider)
# are refused before they join; the job's own program then takes the place.
new_case other-program
cp "$worker" "$LIVE_MARKS/other_build"
printf x >>"$LIVE_MARKS/other_build"
for r in 0 1 2; do start "r$r" $r LIVE_KILL=2:8 LIVE_STEP_MS=40; done
expect r2 137
worker_saved=$worker
worker="$LIVE_MARKS/other_build"
start bad_build 2 DTLAUNCH_DDP_LIVE_JOIN=1
worker=$worker_saved
start bad_model 2 DTLAUNCH_DDP_LIVE_JOIN=1 LIVE_HIDDEN=65
expect bad_build 3
says bad_build "refused to join the running job as rank 2: its executable differs from the job's"
expect bad_model 3
says bad_model "refused to join the running job as rank 2: its training state differs from the job's (here 'model: module 0.weight:Float[65,32]"
start rep 2 DTLAUNCH_DDP_LIVE_JOIN=1
for n in r0 r1 rep; do expect $n 0; done
for r in 0 1; do kept "r$r" $r 1; done
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

# A second loss while the survivors wait for the first one's replacement: they abandon that
# generation and want both ranks in the next.
new_case second-loss
for r in 0 1 2; do start "r$r" $r LIVE_KILL=2:8 LIVE_STEP_MS=40; done
expect r2 137
sleep 1
kill -9 "$(wpid r1)"
expect r1 137
start rep2 2 DTLAUNCH_DDP_LIVE_JOIN=1
start rep1 1 DTLAUNCH_DDP_LIVE_JOIN=1
for n in r0 rep1 rep2; do expect $n 0; done
says r0 "recovered before step 8 (generation 2)"
kept r0 0 2
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

# A process outside the job writes into the store a record wanting rank 1 (which would end it as
# replaced) and a garbled program record: with the job's key, neither changes what happens.
new_case forged-records
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
# The records are forged first, then rank 2 is killed: 60 steps of 100 ms leave time for both.
for r in 0 1 2; do start "r$r" $r LIVE_STEPS=60 LIVE_STEP_MS=100 DTLAUNCH_JOB_KEY=$key; done
wpid r0 >/dev/null
env -u RANK /usr/bin/python3 "$forger" "$MASTER_PORT" dtlaunch/live/wanted/1 "generation 99" \
  dtlaunch/live/program $'garbage\x1b[2J' >"$LIVE_MARKS/forger.log" 2>&1 || bad "the forger failed"
grep -q "^done rank" "$LIVE_MARKS/r0.log" && bad "the job ended before the fault"
kill -9 "$(wpid r2)"
expect r2 137
start rep 2 DTLAUNCH_DDP_LIVE_JOIN=1 DTLAUNCH_JOB_KEY=$key LIVE_STEPS=60 LIVE_STEP_MS=100
for n in r0 r1 rep; do expect $n 0; done
says r1 "a record wanting rank 1 that is not this job's was ignored"
says rep "the running job's program record has no valid seal; it was ignored"
grep -q $'\x1b' "$LIVE_MARKS"/r*.log "$LIVE_MARKS"/rep.log && bad "a raw escape reached the output"
for r in 0 1; do says "r$r" "done rank $r pid $(wpid "r$r") step 60 generation 1 replacement 0"; done
show

new_case frozen
for r in 0 1 2; do start "r$r" $r LIVE_STEP_MS=100; done
sleep 1.5
frozen=$(wpid r1)
kill -STOP "$frozen"
start rep 1 DTLAUNCH_DDP_LIVE_JOIN=1 LIVE_STEP_MS=100
for _ in $(seq 300); do
  grep -q "recovered before step" "$LIVE_MARKS/r0.log" && break
  sleep 0.1
done
kill -CONT "$frozen"
expect r1 76
says r1 "rank 1 ($(uname -n)) was replaced in generation 1 while it was stopped or cut off"
for n in r0 r2 rep; do expect $n 0; done
says r0 "recovered before step"
for r in 0 2; do kept "r$r" $r 1; done
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

# A rank frozen for less than the heartbeat's timeout is no loss: nothing recovers.
new_case short-freeze
for r in 0 1 2; do start "r$r" $r LIVE_STEP_MS=100; done
short=$(wpid r1)
sleep 1
kill -STOP "$short"
sleep 1.5
kill -CONT "$short"
for r in 0 1 2; do expect "r$r" 0; done
for r in 0 1 2; do kept "r$r" $r 0; done
grep -q "live recovery\|peer lost" "$LIVE_MARKS"/r*.log && bad "a recovery or a loss after a 1.5 s freeze"
[ "$(digest_of r0)" = "$reference" ] || bad "weights $(digest_of r0) differ from the fault-free $reference"
show

new_case rank0-lost
for r in 0 1 2; do start "r$r" $r LIVE_KILL=0:5; done
expect r0 137
for n in r1 r2; do
  expect $n 76
  says $n "live recovery cannot replace rank 0, which hosts the job's store"
done
show

# dtlaunch-store's bad input: one line naming the option, status 2 (CLI11 words the range
# differently by version: "0 to 65535" in bookworm's, "[0 - 65535]" in trixie's).
out=$("$store_host" --port 70000 2>&1)
[ $? = 2 ] && grep -q -- "--port: Value 70000 not in range" <<<"$out" ||
  bad "dtlaunch-store --port 70000: $out"

# The store in a process of its own (dtlaunch-store): rank 0 is replaced like any other, and
# rank 1, now the lowest rank at the highest step, sends the state.
new_case rank0-replaced
"$store_host" --port "$MASTER_PORT" >"$LIVE_MARKS/store.out" 2>&1 &
store_pid=$!
for _ in $(seq 100); do grep -q "hosting the store" "$LIVE_MARKS/store.out" && break; sleep 0.1; done
for r in 0 1 2; do start "r$r" $r LIVE_KILL=0:8 LIVE_STEP_MS=40 DTLAUNCH_STORE_HOSTED=1; done
expect r0 137
start rep 0 DTLAUNCH_DDP_LIVE_JOIN=1 DTLAUNCH_STORE_HOSTED=1
for n in r1 r2 rep; do expect $n 0; done
says rep "joined the running job as a replacement in generation 1 with step 8's state from rank 1"
for r in 1 2; do kept "r$r" $r 1; done
[ "$(digest_of rep)" = "$reference" ] || bad "weights $(digest_of rep) differ from the fault-free $reference"
kill "$store_pid"
wait "$store_pid" || bad "dtlaunch-store did not end 0 on SIGTERM"
show

# Without DTLAUNCH_DDP_LIVE=1 (no launcher will start replacements) a LiveRun program fails on a
# loss at once, as one on init_process_group does.
new_case not-live
for r in 0 1 2; do start "r$r" $r LIVE_KILL=1:5 DTLAUNCH_DDP_LIVE=0; done
expect r1 137
for n in r0 r2; do
  expect $n 76
  says $n "peer lost (heartbeat, timeout 3 s): rank 1"
  grep -q "live recovery" "$LIVE_MARKS/$n.log" && bad "$n tried a live recovery"
done
show

new_case no-replacement
for r in 0 1 2; do start "r$r" $r LIVE_KILL=1:5 DTLAUNCH_DDP_LIVE_WAIT=3; done
expect r1 137
for n in r0 r2; do
  expect $n 76
  says $n "live recovery: no replacement for rank 1 joined within 3 s (DTLAUNCH_DDP_LIVE_WAIT)"
done
show

exit $fail
