#!/bin/bash
# A job in local mode (dtlaunch --nproc-per-node 3, Gloo ranks of ddp_worker, a 3 s heartbeat)
# while forger.py, a process outside the job on the same node, sends forged, replayed and
# trickled heartbeat frames to every port each rank listens on (docs/security.md). The job must
# end healthy (exit 0) and each rank must say what its heartbeat refused.
# Usage: forger_test.sh DTLAUNCH DDP_WORKER FORGER_PY
set -u
dtlaunch=$1 worker=$2 forger=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
marker="DTLAUNCH_FORGER_TEST=$$-$RANDOM"
export "${marker?}" DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3 DTLAUNCH_DDP_SHM=0 DDP_TEST_TIMEOUT_MS=120000
export DDP_TEST_QUIET_SECONDS=14 DDP_TEST_CHECKPOINT="$dir/checkpoint" OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK DTLAUNCH_JOB_KEY
timeout 120 "$dtlaunch" --nproc-per-node 3 "$worker" quiet >"$dir/job.log" 2>&1 &
job=$!
env -u RANK /usr/bin/python3 "$forger" "$marker" 3 >"$dir/forger.log" 2>&1
forged=$?
wait $job
status=$?
cat "$dir/forger.log" "$dir/job.log"
fail=0
[ $forged = 0 ] || { echo "FAIL: the forger could not run ($forged)"; fail=1; }
[ $status = 0 ] || { echo "FAIL: the job ended with $status, not 0"; fail=1; }
for r in 0 1 2; do
  grep -q "quiet ok rank $r" "$dir/job.log" || { echo "FAIL: rank $r did not finish"; fail=1; }
  grep -q "rank $r: the heartbeat .* refused (.*bad MAC .*) from outside the job (job key" \
    "$dir/job.log" || { echo "FAIL: rank $r reported no refused frames"; fail=1; }
done
grep -q "peer lost" "$dir/job.log" && { echo "FAIL: a forged frame was acted on"; fail=1; }
exit $fail
