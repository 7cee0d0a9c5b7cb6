#!/bin/sh
# The example's training time with 2 ranks, --cpu-bind exclusive against none, side by side in
# one hyperfine run (the runs interleave nothing, but share the machine's state and minute).
#   bench/affinity/cpu_bind.sh [BUILD_DIR]          (default: build)
# TRAIN=path overrides BUILD_DIR/apps/train/dtlaunch-train; STEPS (default 200) optimizer steps
# per run; RUNS (default 3). Needs hyperfine and the Fashion-MNIST dataset. Figures:
# docs/benchmarks.md.
set -eu
BUILD=${1:-build}
DTLAUNCH="$BUILD/apps/dtlaunch/dtlaunch"
TRAIN=${TRAIN:-$BUILD/apps/train/dtlaunch-train}
STEPS=${STEPS:-200}
RUNS=${RUNS:-3}
[ -x "$DTLAUNCH" ] || { echo "no $DTLAUNCH: build the dtlaunch target" >&2; exit 1; }
[ -x "$TRAIN" ] || { echo "no $TRAIN: build dtlaunch-train (needs LibTorch)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine not found" >&2; exit 1; }

ARGS="--max-steps $STEPS --log-every 0 --stop-check-every 0"
echo "== 2 ranks, $STEPS steps each run, $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$DTLAUNCH" --nproc-per-node 2 --cpu-bind exclusive --dry-run "$TRAIN" | grep '^# cpus'
hyperfine -N --style basic --runs "$RUNS" --warmup 1 \
  -n "cpu-bind none" "$DTLAUNCH --nproc-per-node 2 --cpu-bind none $TRAIN $ARGS" \
  -n "cpu-bind exclusive" "$DTLAUNCH --nproc-per-node 2 --cpu-bind exclusive $TRAIN $ARGS"
