#!/bin/bash
# Two of three ranks (with a job key) wait at the rendezvous while forge_store.py writes a forged
# dtlaunch/rdzv/failed record, with terminal escapes, into rank 0's store. Rank 1 must ignore it,
# with one escaped line, and end with rank 0's own diagnosis (the rendezvous timed out); nothing
# of the forged text may reach the output raw (issue 35 A2, docs/security.md).
# Usage: forged_failure_test.sh DDP_WORKER FORGE_STORE_PY
set -u
worker=$1 forger=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port DTLAUNCH_JOB_KEY=$key
# 15 s: the forger (python3-torch) must write while the ranks still wait; under load its import
# alone takes seconds, and with 8 s the test failed once (a 38 s run) beside the unit tests.
export DDP_TEST_TIMEOUT_MS=15000 OMP_NUM_THREADS=1 DTLAUNCH_DDP_SHM=0
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r timeout 60 "$worker" rendezvous >"$dir/rank$r.log" 2>&1 &
done
env -u RANK /usr/bin/python3 "$forger" "$port" >"$dir/forger.log" 2>&1
forged=$?
wait
cat "$dir/forger.log" "$dir/rank0.log" "$dir/rank1.log"
fail=0
[ $forged = 0 ] || { echo "FAIL: the forger could not write ($forged)"; fail=1; }
grep -q 'rank 1: a forged failure record was ignored ("\\\\x1b\]0;owned\\\\x07forged: peer lost' \
  "$dir/rank1.log" || { echo "FAIL: rank 1 did not say it ignored the forged record"; fail=1; }
grep -q "timed out after 15 s: 2 of 3 ranks arrived; missing ranks: 2" "$dir/rank1.log" ||
  { echo "FAIL: rank 1 did not end with rank 0's diagnosis"; fail=1; }
if grep -q $'\x1b' "$dir/rank0.log" "$dir/rank1.log"; then
  echo "FAIL: a raw escape reached the output"
  fail=1
fi
exit $fail
