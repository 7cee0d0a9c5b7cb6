#!/usr/bin/env bash
# Training step time on CPU, 2 ranks x 1 thread, side by side in one run:
#   A = dtlaunch-train --synthetic (our DDP runtime, C++)
#   B = bench/ddp/torch_ddp.py     (torch.nn.parallel.DistributedDataParallel, Gloo)
# Same model, batch, synthetic data and SGD. Runs alternate A B B A A B ... so that drift in a
# shared machine's load hits both sides alike; the table gives medians over the repetitions.
#
# usage: bench/ddp/run.sh [BUILD_DIR]        (default: build)
# knobs (environment): REPS=5 STEPS=300 WARMUP=20 BATCH=64 BUCKETS_MB="25 0.1"
#   BIND=1: both sides' rank r runs under `taskset -c r` (what dtlaunch --cpu-bind exclusive gives
#   2 ranks on a 2-CPU node), so that both are bound the same way (docs/benchmarks.md)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
train=$build/apps/train/dtlaunch-train
py=/usr/bin/python3  # the python3 that has torch (Debian's python3-torch)
REPS=${REPS:-5}
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-20}
BATCH=${BATCH:-64}
BUCKETS_MB=${BUCKETS_MB:-"25 0.1"}
BIND=${BIND:-0}
NPROC=2
SAMPLES=$((BATCH * 32))  # per rank; the data cycles every 32 steps

[[ -x $train ]] || { echo "run.sh: $train not found: build target dtlaunch-train first" >&2; exit 2; }
$py -c 'import torch.distributed' 2>/dev/null ||
  { echo "run.sh: $py has no torch: install python3-torch" >&2; exit 2; }

free_port() {
  $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run_ranks LOG CMD...: NPROC ranks of CMD on this host; rank 0's output goes to LOG.
run_ranks() {
  local log=$1; shift
  local port pids=() r rc=0
  port=$(free_port)
  for ((r = 0; r < NPROC; r++)); do
    local bind=()
    ((BIND)) && bind=(taskset -c "$r")
    if ((r == 0)); then
      RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port OMP_NUM_THREADS=1 "${bind[@]}" "$@" >"$log" 2>&1 &
    else
      RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port OMP_NUM_THREADS=1 "${bind[@]}" "$@" >/dev/null 2>&1 &
    fi
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  if ((rc != 0)); then
    echo "run.sh: a rank failed ($rc): $*" >&2
    cat "$log" >&2
    exit 1
  fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.tsv  # side bucket_mb rep ms_per_step hidden_share allreduce_ms buckets

run_ours() {
  run_ranks "$tmp/a.log" "$train" --synthetic "$SAMPLES" --batch-size "$BATCH" --epochs 1000000 \
    --max-steps "$STEPS" --warmup-steps "$WARMUP" --threads 1 --log-every 0 \
    --stop-check-every 0 --bucket-cap-mb "$1"
  local line
  line=$(grep '^timing:' "$tmp/a.log")
  # timing: steps S ms/step X allreduce_ms/step A hidden_ms/step H hidden_share F buckets B
  read -r -a f <<<"$line"
  printf 'ours\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "${f[4]}" "${f[10]}" "${f[6]}" "${f[12]}" \
    >>"$results"
}

run_torch() {
  run_ranks "$tmp/b.log" "$py" "$here/torch_ddp.py" --synthetic "$SAMPLES" --batch-size "$BATCH" \
    --max-steps "$STEPS" --warmup-steps "$WARMUP" --threads 1 --bucket-cap-mb "$1"
  local line
  line=$(grep '^timing:' "$tmp/b.log")
  read -r -a f <<<"$line"
  printf 'torch\t%s\t%s\t%s\t-\t-\t-\n' "$1" "$2" "${f[4]}" >>"$results"
}

echo "# bench/ddp: $NPROC ranks x 1 thread, batch $BATCH/rank, $STEPS steps ($WARMUP warm-up)," \
  "$REPS repetitions per side, bucket caps (MiB): $BUCKETS_MB"
echo "# host: $(nproc) cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
for mb in $BUCKETS_MB; do
  for ((i = 0; i < REPS; i++)); do
    if ((i % 2 == 0)); then
      run_ours "$mb" "$i"; run_torch "$mb" "$i"
    else
      run_torch "$mb" "$i"; run_ours "$mb" "$i"
    fi
  done
done

"$py" - "$results" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print("| bucket cap MiB | ours ms/step | PyTorch DDP ms/step | PyTorch / ours (pairs: median, range) "
      "| ours: buckets | all-reduce ms/step | hidden behind backward |")
print("|---|---|---|---|---|---|---|")
for mb in dict.fromkeys(r[1] for r in rows):
    ours = {r[2]: r for r in rows if r[0] == "ours" and r[1] == mb}
    torch = {r[2]: r for r in rows if r[0] == "torch" and r[1] == mb}
    o = st.median(float(r[3]) for r in ours.values())
    t = st.median(float(r[3]) for r in torch.values())
    # Each repetition ran the two sides back to back: their ratio cancels slow drifts in load.
    ratios = sorted(float(torch[k][3]) / float(ours[k][3]) for k in ours)
    hidden = st.median(float(r[4]) for r in ours.values())
    ar = st.median(float(r[5]) for r in ours.values())
    nb = next(iter(ours.values()))[6]
    print(f"| {mb} | {o:.2f} | {t:.2f} | {st.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) "
          f"| {nb} | {ar:.2f} | {100 * hidden:.0f}% |")
print()
print("all runs (ms/step):")
for side in ("ours", "torch"):
    for mb in dict.fromkeys(r[1] for r in rows):
        vals = " ".join(r[3] for r in rows if r[0] == side and r[1] == mb)
        print(f"  {side:5s} cap {mb:>5s} MiB: {vals}")
PY
