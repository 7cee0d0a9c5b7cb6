#!/usr/bin/env bash
# Live recovery across "nodes" (network namespaces of this machine, scripts/slurm-cluster.sh's,
# without Slurm's launcher), each node's eth0 shaped with `tc tbf`: 3 ranks on nodes 1-3, node 4
# the spare, the store in dtlaunch-store on the host's bridge address. For each fault on node 2's
# rank (kill: SIGKILL; freeze: SIGSTOP; cut: its link down, up again once the job went on) and on
# node 1's (kill0: rank 0), a replacement is started on node 4 at once, as a launcher would.
# Prints per fault: the time from the fault to rank 0's (or its replacement's) first completed
# step, the phases rank 0 reports (caught after the verdict, tear down, re-form, agree, transfer),
# the state's size and the transfer's rate against the link's (docs/benchmarks.md, "Live
# recovery").
#
# usage (root; builds live_worker and dtlaunch-store in BUILD_DIR):
#   bench/ddp/live.sh [BUILD_DIR]
# knobs (environment):
#   RATE=1gbit      tc tbf rate of each node's link
#   HIDDEN=4096     live_worker's hidden width for the fault rows: 0.18 M parameters, 1.4 MB of
#                   state with SGD's momentum
#   BIG_HIDDEN=600000  a last kill row with 25.8 M parameters, 206 MB of state ("": none)
#   FAULTS="kill freeze cut kill0"
#   TIMEOUT=3       DTLAUNCH_DDP_HEARTBEAT_TIMEOUT
#   STEPS=12        steps per run (4 x STEPS for the small model); the fault comes after step 3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
worker=$build/tests/ddp/live_worker
store=$build/apps/store/dtlaunch-store
RATE=${RATE:-1gbit}
HIDDEN=${HIDDEN:-4096}
BIG_HIDDEN=${BIG_HIDDEN-600000}
FAULTS=${FAULTS:-kill freeze cut kill0}
TIMEOUT=${TIMEOUT:-3}
STEPS=${STEPS:-12}
for f in "$worker" "$store"; do
  [[ -x $f ]] || { echo "live.sh: $f not found: build live_worker and dtlaunch-store" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "live.sh: needs root (network namespaces, tc)" >&2; exit 2; }

export SLURM_NETNS_DIR=/tmp/dtlaunch-bench-netns SLURM_NETNS_BRIDGE=bnbr0 \
  SLURM_NETNS_SUBNET=10.78.0 SLURM_NETNS_CTLD_PORT=16917 SLURM_NETNS_NS_PREFIX=b \
  SLURM_NETNS_GPUS=0 SLURM_NETNS_CPUS=4
cluster=$root/scripts/slurm-cluster.sh
"$cluster" up 4 >/dev/null
work=$(mktemp -d)
store_pid=""
cleanup() {
  [[ -n $store_pid ]] && kill "$store_pid" 2>/dev/null
  pkill -9 -f "$worker" 2>/dev/null || true
  "$cluster" down >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
for k in 1 2 3 4; do
  ip netns exec "bnode$k" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 256kb latency 50ms
done

port=29530
export WORLD_SIZE=3 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.78.0.1 OMP_NUM_THREADS=1 \
  GLOO_SOCKET_IFNAME=eth0 DTLAUNCH_STORE_HOSTED=1 DTLAUNCH_DDP_LIVE=1 DTLAUNCH_DDP_LIVE_WAIT=60 \
  DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=$TIMEOUT LIVE_LOG_STEPS=1 \
  DTLAUNCH_RUN_ID=live-bench

# rank NODE RANK LOG [VAR=VALUE...]: a rank in node NODE's namespace.
rank() {
  local node=$1 r=$2 log=$3
  shift 3
  # NODE_RANK: the namespaces share this machine's host name and boot id, and would otherwise
  # be taken for one node (the shared-memory all_reduce, past the links).
  ip netns exec "bnode$node" env RANK="$r" LOCAL_RANK=0 NODE_RANK=$((node - 1)) NNODES=4 "$@" \
    timeout 600 "$worker" >"$log" 2>&1 &
}

# pid_of LOG: the worker's own pid, which it prints once its group is formed.
pid_of() {
  for _ in $(seq 1200); do
    local p
    p=$(sed -n 's/^pid \([0-9]*\) rank .*/\1/p' "$1" 2>/dev/null)
    [[ -n $p ]] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "live.sh: $1 printed no pid" >&2
  exit 1
}

wait_line() {  # LOG TEXT: up to 2 minutes
  for _ in $(seq 1200); do
    grep -q -- "$2" "$1" 2>/dev/null && return
    sleep 0.1
  done
  echo "live.sh: $1 never said: $2" >&2
  exit 1
}

field() {  # LOG PATTERN WORD-BEFORE: the word after WORD-BEFORE on the first line matching
  grep -m1 -- "$2" "$1" | awk -v w="$3" '{for (i = 1; i < NF; i++) if ($i == w) {print $(i + 1); exit}}'
}

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) $(nproc) CPUs; $(uptime)"
echo "| fault | fault -> first step s | detect s | caught after verdict s | tear down s | re-form s | agree s | transfer s | state MB | transfer Mbit/s | link Mbit/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
# run_fault FAULT HIDDEN: one job, one fault, one table row.
run_fault() {
  local fault=$1 hidden=$2 dir=$work/$1-$2
  mkdir -p "$dir"
  export LIVE_HIDDEN=$hidden
  # A small model's steps take milliseconds: 100 ms of sleep in each (counted in the first step
  # after the recovery) leaves time to inject the fault mid-run.
  export LIVE_STEP_MS=$((hidden > 100000 ? 0 : 100)) LIVE_STEPS=$((hidden > 100000 ? STEPS : 4 * STEPS))
  # Each run with a store of its own, on a port of its own.
  port=$((port + 1))
  export DTLAUNCH_RUN_ID=live-bench-$fault MASTER_PORT=$port
  [[ -n $store_pid ]] && { kill "$store_pid" 2>/dev/null; wait "$store_pid" 2>/dev/null || true; }
  "$store" --port "$port" >"$dir/store.out" 2>&1 &
  store_pid=$!
  for _ in $(seq 100); do grep -q "hosting the store" "$dir/store.out" && break; sleep 0.1; done
  declare -A p=()
  for r in 0 1 2; do rank $((r + 1)) "$r" "$dir/r$r.log"; done
  for r in 0 1 2; do p[$r]=$(pid_of "$dir/r$r.log"); done
  victim=1 vnode=2
  [[ $fault == kill0 ]] && victim=0 vnode=1
  watcher=$(( victim == 0 ? 1 : 0 ))
  wait_line "$dir/r$watcher.log" "^step 3 done"
  t0=$(date +%s.%N)
  case $fault in
    kill | kill0) kill -9 "${p[$victim]}" ;;
    freeze) kill -STOP "${p[$victim]}" ;;
    cut) ip netns exec "bnode$vnode" ip link set eth0 down ;;
  esac
  rank 4 "$victim" "$dir/rep.log" DTLAUNCH_DDP_LIVE_JOIN=1
  wait_line "$dir/r$watcher.log" "recovered before step"
  case $fault in
    freeze) kill -CONT "${p[$victim]}" ;;
    cut) ip netns exec "bnode$vnode" ip link set eth0 up ;;
  esac
  wait_line "$dir/r$watcher.log" "^done rank"
  wait_line "$dir/rep.log" "^done rank"
  rep=$(pid_of "$dir/rep.log")
  # The first step completed after the recovery.
  first=$(awk -v t0="$t0" '/^recovered before step/ {r = 1} r && $1 == "step" && $4 == "at" {print $5 - t0; exit}' "$dir/r$watcher.log")
  # The recovery lines of the lowest surviving rank, which is also the donor here.
  rec=$dir/r$watcher.log
  verdict=$(field "$rec" "replaced; verdict at" at)
  detect=$(awk -v a="$verdict" -v b="$t0" 'BEGIN {printf "%.2f", a - b}')
  caught=$(field "$rec" "replaced; verdict at" caught)
  teardown=$(field "$rec" "replaced; verdict at" down)
  reform=$(field "$rec" "replaced; verdict at" re-form)
  agree=$(field "$rec" "agreed on step" agree)
  transfer=$(field "$rec" "agreed on step" transfer)
  mb=$(grep -m1 "agreed on step" "$rec" | sed -n "s/.*'s state, \([0-9.]*\) MB.*/\1/p")
  mbit=$(grep -m1 "agreed on step" "$rec" | sed -n 's/.* s (\([0-9]*\) Mbit\/s).*/\1/p')
  link=$(( $(sed 's/gbit/000/; s/mbit//' <<<"${RATE,,}") ))
  printf '| %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$fault" "${first:-nan}" \
    "${detect:-?}" "${caught:-?}" "${teardown:-?}" "${reform:-?}" "${agree:-?}" "${transfer:-?}" "${mb:-?}" \
    "${mbit:-?}" "$link"
  for f in "$dir"/r*.log "$dir"/rep.log; do sed "s|^|# $fault $(basename "$f"): |" "$f" | grep -v " done at " >&2; done
  for r in 0 1 2; do kill -9 "${p[$r]}" 2>/dev/null || true; done
  kill -9 "$rep" 2>/dev/null || true
}

for fault in $FAULTS; do run_fault "$fault" "$HIDDEN"; done
# The transfer's rate: a state of at least 200 MB (25.8 M parameters and their momentum).
[[ -n $BIG_HIDDEN ]] && run_fault kill "$BIG_HIDDEN"
