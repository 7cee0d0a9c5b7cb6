#!/bin/sh
# Wall time to start, supervise and reap --nproc-per-node 8 workers of a trivial program, with
# dtlaunch and with torchrun side by side in one hyperfine run, then dtlaunch's cost per worker.
#   bench/proc/torchrun_vs_dtlaunch.sh [BUILD_DIR]      (default: build)
# Needs hyperfine and Debian's python3-torch (torchrun). Figures: docs/local-mode.md.
#
# torchrun workaround: torch 1.13 on Python 3.11 crashes in its log-redirect parsing with the
# default options (Std.from_str("0") finds no member, since Python 3.11 no longer yields the 0
# member NONE when iterating an IntFlag, returns None, and to_map(None) raises AttributeError:
# 'NoneType' object has no attribute 'get'). Passing a mapping for a local rank that does not
# exist, "--redirects 9:3 --tee 9:3", makes every real local rank 0..8 fall back to Std.NONE,
# which is torchrun's default behaviour (no redirection, no tee).
set -eu
BUILD=${1:-build}
N=${NPROC:-8}
RUNS=${RUNS:-5}  # torchrun runs; dtlaunch runs for at least 3 s (hyperfine --min-runs)
PROGRAM=${PROGRAM:-/bin/true}

LAUNCHER="$BUILD/apps/dtlaunch/dtlaunch"
if [ -x "$LAUNCHER" ] && "$LAUNCHER" --nproc-per-node 1 -- /bin/true >/dev/null 2>&1; then
  DT="$LAUNCHER --nproc-per-node"
else
  # Before the launcher had local mode: the library's own harness, the same run_workers.
  LAUNCHER="$BUILD/tests/proc/proc_driver"
  DT="$LAUNCHER --nproc"
  echo "note: $BUILD/apps/dtlaunch/dtlaunch has no local mode; measuring $LAUNCHER" >&2
fi
command -v torchrun >/dev/null || { echo "torchrun not found (apt install python3-torch)" >&2; exit 1; }
command -v hyperfine >/dev/null || { echo "hyperfine not found" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "== $N workers of $PROGRAM: dtlaunch vs torchrun ($(nproc) CPUs)"
hyperfine -N --style basic --min-runs "$RUNS" --warmup 1 --export-json "$OUT/vs.json" \
  -n dtlaunch "$DT $N -- $PROGRAM" \
  -n torchrun "torchrun --standalone --nproc_per_node $N --redirects 9:3 --tee 9:3 --no_python $PROGRAM" \
  -n "torchrun --monitor_interval 0.1" \
  "torchrun --standalone --nproc_per_node $N --monitor_interval 0.1 --redirects 9:3 --tee 9:3 --no_python $PROGRAM"

echo "== dtlaunch's cost per worker: 1, 8 and 64 workers"
hyperfine -N --style basic --warmup 3 --min-runs 30 --export-json "$OUT/scale.json" \
  -n n1 "$DT 1 -- $PROGRAM" -n n8 "$DT 8 -- $PROGRAM" -n n64 "$DT 64 -- $PROGRAM" \
  -n "64 x $PROGRAM from sh" "sh -c 'for i in \$(seq 64); do $PROGRAM & done; wait'"

/usr/bin/python3 - "$OUT/vs.json" "$OUT/scale.json" <<'PY'
import json, sys
vs = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
sc = {r["command"]: r for r in json.load(open(sys.argv[2]))["results"]}
dt = vs["dtlaunch"]["mean"]
print(f"\ndtlaunch mean {dt*1e3:.2f} ms")
for name in ("torchrun", "torchrun --monitor_interval 0.1"):
    t = vs[name]["mean"]
    print(f"{name}: mean {t:.3f} s = {t/dt:.0f} x dtlaunch")
n1, n8, n64 = (sc[k]["mean"] for k in ("n1", "n8", "n64"))
sh64 = sc["64 x " + [k for k in sc if k.startswith("64 x ")][0][5:]]["mean"]
print(f"dtlaunch 1 / 8 / 64 workers: {n1*1e3:.2f} / {n8*1e3:.2f} / {n64*1e3:.2f} ms")
print(f"per extra worker (64 vs 8): {(n64-n8)/56*1e3:.3f} ms")
print(f"64 workers, dtlaunch minus sh spawning the same: {(n64-sh64)*1e3:.2f} ms "
      f"= {(n64-sh64)/64*1e3:.3f} ms per worker")
PY
