#!/bin/bash
# --watch's cost on the example's step time (docs/benchmarks.md, "dtlaunch --watch"): the same
# srun of dtlaunch-train with and without --watch, PAIRS pairs alternating, one rank per node in a
# 3-node test cluster of its own (scripts/slurm-cluster.sh; needs root). Prints the example's
# `timing` line of each run. Usage: bench/watch-step-time.sh [BUILD_DIR]   (default: build)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
export SLURM_NETNS_DIR=${SLURM_NETNS_DIR:-/tmp/dtlaunch-watch-bench} SLURM_NETNS_BRIDGE=${SLURM_NETNS_BRIDGE:-dtlwbench}
export SLURM_NETNS_NS_PREFIX=${SLURM_NETNS_NS_PREFIX:-wb-} SLURM_NETNS_SUBNET=${SLURM_NETNS_SUBNET:-10.79.1}
export SLURM_NETNS_CTLD_PORT=${SLURM_NETNS_CTLD_PORT:-17401}
cluster=$repo/scripts/slurm-cluster.sh
"$cluster" up 3 || exit 1
trap '"$cluster" down >/dev/null 2>&1' EXIT
eval "$("$cluster" env)"
for pair in $(seq "${PAIRS:-4}"); do
  for watch in "" "--watch"; do
    echo -n "pair $pair ${watch:-exec}: "
    timeout 120 srun -N3 --ntasks-per-node=1 --cpus-per-task=1 "$build/apps/dtlaunch/dtlaunch" $watch -- \
      "$build/apps/train/dtlaunch-train" --synthetic 9600 --batch-size 32 --log-every 0 2>&1 | grep '^timing'
  done
done
