#!/bin/sh
# Local mode's start-up as the number of workers grows: wall time to start, supervise and reap
# N workers of /bin/true for N = 256, 1,024 and 4,096 (the launcher's limit), and the cost per
# worker, which stays flat when start-up is linear. With a second build directory, both builds
# run side by side in one hyperfine run per N (before / after a change).
#   bench/proc/scale.sh BUILD_DIR [OTHER_BUILD_DIR]      (paths without spaces)
#   RUNS=5 WARMUP=1 SIZES="256 1024 4096" PROGRAM=/bin/true
# Prints the CPU model, the CPU count and the load average next to the figures: on a shared
# machine they move with the load, the ratios much less. Figures: docs/benchmarks.md.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [OTHER_BUILD_DIR]" >&2; exit 2; }
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
SIZES=${SIZES:-256 1024 4096}
PROGRAM=${PROGRAM:-/bin/true}
BUILDS="$*"
command -v hyperfine >/dev/null || { echo "hyperfine not found" >&2; exit 1; }
for b in $BUILDS; do
  [ -x "$b/apps/dtlaunch/dtlaunch" ] || { echo "$b/apps/dtlaunch/dtlaunch: not built" >&2; exit 1; }
done
# 4,096 workers: dtlaunch holds 2 pipes for each.
[ "$(ulimit -n)" -ge 9000 ] || ulimit -n 9000 ||
  { echo "ulimit -n is $(ulimit -n): raise it to at least 9000" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "== CPU: $cpu, $(nproc) CPUs"
for n in $SIZES; do
  set --
  for b in $BUILDS; do
    set -- "$@" -n "$b" "$b/apps/dtlaunch/dtlaunch --nproc-per-node $n -- $PROGRAM"
  done
  echo "== $n workers of $PROGRAM; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  hyperfine -N --style basic --runs "$RUNS" --warmup "$WARMUP" --export-json "$OUT/$n.json" "$@"
  cut -d' ' -f1-3 /proc/loadavg >"$OUT/$n.load"
done

/usr/bin/python3 - "$OUT" $SIZES <<'PY'
import json, sys
out, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
print("\n| build | workers | mean wall time | ± σ | per worker | load after |")
print("|---|---|---|---|---|---|")
for n in sizes:
    load = open(f"{out}/{n}.load").read().strip()
    for r in json.load(open(f"{out}/{n}.json"))["results"]:
        print(f"| {r['command']} | {n} | {r['mean']:.3f} s | {r['stddev']:.3f} s "
              f"| {r['mean'] / n * 1e3:.3f} ms | {load} |")
PY
