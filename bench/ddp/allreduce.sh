#!/usr/bin/env bash
# One all_reduce's time, 2 ranks on this node, Gloo (DTLAUNCH_DDP_SHM=0) and shared memory in
# alternation, REPS runs each: bench/ddp/allreduce.sh [BUILD_DIR] (default build).
# knobs: NUMEL=107000 (float32; 428 KB, dtlaunch-train's gradients) COUNT=2000 REPS=4 NPROC=2
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
exe=$build/bench/ddp/allreduce_latency
[[ -x $exe ]] || { echo "allreduce.sh: $exe not found: build target allreduce_latency" >&2; exit 2; }
NUMEL=${NUMEL:-107000} COUNT=${COUNT:-2000} REPS=${REPS:-4} NPROC=${NPROC:-2}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
echo "# $(date -u +%FT%TZ) $(uptime)"
for ((rep = 0; rep < REPS; rep++)); do
  for shm in 0 1; do
    port=$(free_port) pids=()
    for ((r = 0; r < NPROC; r++)); do
      RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port OMP_NUM_THREADS=1 DTLAUNCH_DDP_SHM=$shm "$exe" "$NUMEL" "$COUNT" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
  done
done
echo "# $(date -u +%FT%TZ) $(uptime)"
