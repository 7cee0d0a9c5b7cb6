#!/usr/bin/env bash
# What a late rank 0 costs the others at rendezvous. Every rank starts at once under a launcher,
# so the clients usually try the store before rank 0 (which hosts it) listens. Runs the DDP test
# worker's `rendezvous` scenario (init_process_group + barrier) as 2 ranks, alternating:
#   first: rank 0 starts, then rank 1 DELAY seconds later;
#   late:  rank 1 starts, then rank 0 DELAY seconds later;
# and times each from the second start until both ranks have exited. The difference of the
# medians (late - first) is what a client pays for having come early.
#
# Usage: bench/ddp/rendezvous.sh [BUILD_DIR] [REPS]   (default build, 15; DELAY=0.3 seconds)
set -euo pipefail
build=${1:-build}
reps=${2:-15}
delay=${DELAY:-0.3}
worker=$build/tests/ddp/ddp_worker
[[ -x $worker ]] || { echo "rendezvous.sh: no $worker (build the tests first)" >&2; exit 2; }
python=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run ORDER: prints the seconds from the second start until both ranks are done.
run() {
  local order=$1 port first second
  port=$(free_port)
  if [[ $order == first ]]; then first=0 second=1; else first=1 second=0; fi
  start_rank() {
    env RANK=$1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$worker" rendezvous >"$tmp/rank$1.out" 2>&1
  }
  start_rank $first &
  local p1=$!
  sleep "$delay"
  local t0
  t0=$(date +%s%N)
  start_rank $second &
  local p2=$!
  wait $p1 && wait $p2 || { cat "$tmp"/rank*.out >&2; echo "rendezvous.sh: a rank failed" >&2; exit 1; }
  echo $((($(date +%s%N) - t0) / 1000000))  # milliseconds
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

: >"$tmp/first"
: >"$tmp/late"
for ((i = 0; i < reps; i++)); do
  run first >>"$tmp/first"
  run late >>"$tmp/late"
done
first=$(median <"$tmp/first")
late=$(median <"$tmp/late")
echo "rank 0 first (median of $reps): $first ms"
echo "rank 0 ${delay} s late (median of $reps): $late ms"
echo "cost of an early client: $(awk -v a="$late" -v b="$first" 'BEGIN { print a - b }') ms"
