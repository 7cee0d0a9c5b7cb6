#!/usr/bin/env bash
# The cost of the DDP runtime's diagnostics on the training step (docs/benchmarks.md): the
# example's --synthetic run, 2 ranks x 1 thread, in three settings run in turn A B C C B A ...
#   off     DTLAUNCH_DDP_TRACE_ENTRIES=0 (sequence numbers only, no flight recorder)
#   on      the default flight recorder (2000 entries)
#   check   the recorder and DTLAUNCH_DDP_CHECK=1 (a signature all_gather before each collective)
#
# usage: bench/ddp/recorder.sh [BUILD_DIR]   knobs: REPS=6 STEPS=300 WARMUP=20 BATCH=64 BUCKET_MB=25
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
train=$build/apps/train/dtlaunch-train
REPS=${REPS:-6} STEPS=${STEPS:-300} WARMUP=${WARMUP:-20} BATCH=${BATCH:-64} BUCKET_MB=${BUCKET_MB:-25}
[[ -x $train ]] || { echo "recorder.sh: $train not found: build target dtlaunch-train" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((20000 + RANDOM % 20000))

# one SETTING: prints ms/step of rank 0
one() {
  local extra=() pids=() r
  case $1 in
    off) extra=(DTLAUNCH_DDP_TRACE_ENTRIES=0) ;;
    on) extra=() ;;
    check) extra=(DTLAUNCH_DDP_CHECK=1) ;;
  esac
  port=$((port + 1))
  for r in 0 1; do
    env "${extra[@]}" RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port OMP_NUM_THREADS=1 "$train" --synthetic $((BATCH * 32)) \
      --batch-size "$BATCH" --epochs 1000000 --max-steps "$STEPS" --warmup-steps "$WARMUP" \
      --threads 1 --log-every 0 --stop-check-every 0 --bucket-cap-mb "$BUCKET_MB" \
      >"$tmp/$r.log" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r"; done
  # timing: steps S ms/step X ...
  awk '/^timing:/ {print $5}' "$tmp/0.log"
}

echo "# bench/ddp/recorder.sh: 2 ranks x 1 thread, batch $BATCH/rank, $STEPS steps ($WARMUP warm-up)," \
  "bucket cap $BUCKET_MB MiB, $REPS repetitions"
echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
order=(off on check check on off)
for ((i = 0; i < REPS; i++)); do
  for s in "${order[@]}"; do
    printf '%s\t%s\t%s\n' "$s" "$i" "$(one "$s")" | tee -a "$tmp/results.tsv"
  done
done
/usr/bin/python3 - "$tmp/results.tsv" <<'PY'
import statistics, sys
rows = [l.split('\t') for l in open(sys.argv[1]).read().split('\n') if l]
by = {}
for s, i, ms in rows:
    by.setdefault(s, {}).setdefault(int(i), []).append(float(ms))
print("setting  median ms/step  min    max    ratio to off (median of per-rep ratios, min-max)")
off = {i: statistics.mean(v) for i, v in by["off"].items()}
for s in ("off", "on", "check"):
    vals = [x for v in by[s].values() for x in v]
    ratios = [statistics.mean(by[s][i]) / off[i] for i in off]
    print(f"{s:8} {statistics.median(vals):14.2f}  {min(vals):6.2f} {max(vals):6.2f}  "
          f"{statistics.median(ratios):.4f} ({min(ratios):.4f}-{max(ratios):.4f})")
PY
