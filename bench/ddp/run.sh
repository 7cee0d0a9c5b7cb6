#!/usr/bin/env bash
# Training step time on CPU, 2 ranks x 1 thread, side by side in one run:
#   A = dtlaunch-train --synthetic (our DDP runtime, C++)
#   B = bench/ddp/torch_ddp.py     (torch.nn.parallel.DistributedDataParallel, Gloo)
# Same model, batch, synthetic data and SGD. Runs alternate A B B A A B ... so that drift in a
# shared machine's load hits both sides alike; the table gives medians over the repetitions.
#
# usage: bench/ddp/run.sh [BUILD_DIR]        (default: build)
# knobs (environment): REPS=5 STEPS=300 WARMUP=20 BATCH=64 BUCKETS_MB="25 0.1" WORLDS=2
#   WORLDS="1 2": world sizes to run (1: the same step with no peer to wait for)
#   PHASES=1: our side is bench/ddp/ddp_phases (dtlaunch-train's loop with a clock between the
#   phases of the step) and PyTorch's runs with --phases; adds a table of the phases, both sides
#   measured the same way (docs/benchmarks.md)
#   SAME_MALLOC=1: both sides run with glibc's malloc set as DdpOptions::keep_step_memory sets
#   it for ours (MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_=1 GiB), so that PyTorch
#   gets the same allocator policy
#   DEVICE=cuda (with PHASES=1): model and data on the GPU, NCCL on both sides (scripts/gpu-check.sh)
#   BIND=1: both sides' rank r runs under `taskset -c r` (what dtlaunch --cpu-bind exclusive gives
#   2 ranks on a 2-CPU node), so that both are bound the same way (docs/benchmarks.md)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
train=$build/apps/train/dtlaunch-train
py=${PYTHON:-/usr/bin/python3}  # a python3 with torch (here Debian's python3-torch)
REPS=${REPS:-5}
STEPS=${STEPS:-300}
WARMUP=${WARMUP:-20}
BATCH=${BATCH:-64}
BUCKETS_MB=${BUCKETS_MB:-"25 0.1"}
BIND=${BIND:-0}
WORLDS=${WORLDS:-2}
PHASES=${PHASES:-0}
SAME_MALLOC=${SAME_MALLOC:-0}
DEVICE=${DEVICE:-cpu}
malloc_env=()
((SAME_MALLOC)) && malloc_env=(MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824)
NPROC=2
phases_exe=$build/bench/ddp/ddp_phases
SAMPLES=$((BATCH * 32))  # per rank; the data cycles every 32 steps

((PHASES)) || [[ -x $train ]] ||
  { echo "run.sh: $train not found: build target dtlaunch-train first" >&2; exit 2; }
[[ $DEVICE == cpu || $PHASES == 1 ]] || { echo "run.sh: DEVICE=$DEVICE needs PHASES=1" >&2; exit 2; }
((PHASES == 0)) || [[ -x $phases_exe ]] ||
  { echo "run.sh: $phases_exe not found: build target ddp_phases first" >&2; exit 2; }
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
      env "${malloc_env[@]}" RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 "${bind[@]}" "$@" >"$log" 2>&1 &
    else
      env "${malloc_env[@]}" RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 "${bind[@]}" "$@" >/dev/null 2>&1 &
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
# One row per run: side world bucket_mb rep ms_per_step hidden_share allreduce_ms buckets, then
# with PHASES=1 the phases line's values (data zero forward backward step item comm overlap).
results=$tmp/results.tsv

# phase_fields LOG: the values of the "phases:" line's "name value" pairs, tab-separated.
phase_fields() {
  local line
  line=$(grep '^phases:' "$1") || return 0
  read -r -a f <<<"$line"
  printf '\t%s' "${f[2]}" "${f[4]}" "${f[6]}" "${f[8]}" "${f[10]}" "${f[12]}" "${f[14]}" "${f[16]}"
}

run_ours() {
  local line
  if ((PHASES)); then
    run_ranks "$tmp/a.log" "$phases_exe" --synthetic "$SAMPLES" --batch-size "$BATCH" \
      --max-steps "$STEPS" --warmup-steps "$WARMUP" --threads 1 --bucket-cap-mb "$1" \
      --device "$DEVICE"
    line=$(grep '^timing:' "$tmp/a.log")
    read -r -a f <<<"$line"
    read -r -a g <<<"$(grep '^phases:' "$tmp/a.log")"
    printf 'ours\t%s\t%s\t%s\t%s\t-\t-\t%s' "$NPROC" "$1" "$2" "${f[4]}" "${g[18]}" >>"$results"
  else
    run_ranks "$tmp/a.log" "$train" --synthetic "$SAMPLES" --batch-size "$BATCH" \
      --epochs 1000000 --max-steps "$STEPS" --warmup-steps "$WARMUP" --threads 1 --log-every 0 \
      --stop-check-every 0 --bucket-cap-mb "$1"
    line=$(grep '^timing:' "$tmp/a.log")
    # timing: steps S ms/step X allreduce_ms/step A hidden_ms/step H hidden_share F buckets B
    read -r -a f <<<"$line"
    printf 'ours\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$NPROC" "$1" "$2" "${f[4]}" "${f[10]}" "${f[6]}" \
      "${f[12]}" >>"$results"
  fi
  phase_fields "$tmp/a.log" >>"$results"
  echo >>"$results"
}

run_torch() {
  local extra=()
  ((PHASES)) && extra=(--phases --device "$DEVICE")
  run_ranks "$tmp/b.log" "$py" "$here/torch_ddp.py" --synthetic "$SAMPLES" --batch-size "$BATCH" \
    --max-steps "$STEPS" --warmup-steps "$WARMUP" --threads 1 --bucket-cap-mb "$1" "${extra[@]}"
  local line
  line=$(grep '^timing:' "$tmp/b.log")
  read -r -a f <<<"$line"
  printf 'torch\t%s\t%s\t%s\t%s\t-\t-\t-' "$NPROC" "$1" "$2" "${f[4]}" >>"$results"
  phase_fields "$tmp/b.log" >>"$results"
  echo >>"$results"
  ((PHASES == 0)) || grep -o 'buckets [0-9]* gloo_threads [0-9?]*' "$tmp/b.log" >"$tmp/torch-info"
}

echo "# bench/ddp: world sizes $WORLDS x 1 thread, batch $BATCH/rank, $STEPS steps ($WARMUP" \
  "warm-up), $REPS repetitions per side, bucket caps (MiB): $BUCKETS_MB, bound $BIND," \
  "phases $PHASES, device $DEVICE, same malloc $SAME_MALLOC, $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "# host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc)" \
  "cores, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg) (before)"
for NPROC in $WORLDS; do
  for mb in $BUCKETS_MB; do
    for ((i = 0; i < REPS; i++)); do
      if ((i % 2 == 0)); then
        run_ours "$mb" "$i"; run_torch "$mb" "$i"
      else
        run_torch "$mb" "$i"; run_ours "$mb" "$i"
      fi
    done
  done
done
echo "# load $(cut -d' ' -f1-3 /proc/loadavg) (after)"
[[ -s $tmp/torch-info ]] && echo "# PyTorch's DDP (last run): $(cat "$tmp/torch-info")"

"$py" - "$results" <<'PY'
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print("| world | bucket cap MiB | ours ms/step | PyTorch DDP ms/step "
      "| PyTorch / ours (pairs: median, range) | ours: buckets | all-reduce ms/step "
      "| hidden behind backward |")
print("|---|---|---|---|---|---|---|---|")
keys = list(dict.fromkeys((r[1], r[2]) for r in rows))
for world, mb in keys:
    ours = {r[3]: r[1:] for r in rows if r[0] == "ours" and (r[1], r[2]) == (world, mb)}
    torch = {r[3]: r[1:] for r in rows if r[0] == "torch" and (r[1], r[2]) == (world, mb)}
    o = st.median(float(r[3]) for r in ours.values())
    t = st.median(float(r[3]) for r in torch.values())
    # Each repetition ran the two sides back to back: their ratio cancels slow drifts in load.
    ratios = sorted(float(torch[k][3]) / float(ours[k][3]) for k in ours)
    nb = next(iter(ours.values()))[6]
    if next(iter(ours.values()))[4] == "-":  # PHASES=1: the Reducer's spans are below
        extra = "- | -"
    else:
        hidden = st.median(float(r[4]) for r in ours.values())
        ar = st.median(float(r[5]) for r in ours.values())
        extra = f"{ar:.2f} | {100 * hidden:.0f}%"
    print(f"| {world} | {mb} | {o:.2f} | {t:.2f} | {st.median(ratios):.3f} "
          f"({ratios[0]:.2f}-{ratios[-1]:.2f}) | {nb} | {extra} |")

def med(vals):
    v = sorted(vals)
    return f"{st.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f})"

names = ["data", "zero_grad", "forward", "backward", "optimizer step", "loss.item"]
if rows and len(rows[0]) > 8:
    print()
    print("Phases, ms per step, median (range) over the repetitions. comm: first bucket launched to "
          "gradients written back; overlap: its part before backward's computation ended; "
          "wait after backward = comm - overlap; hidden = overlap / comm (both sides: DDP "
          "Reducer's own statistics, PyTorch's from _get_ddp_logging_data()).")
    print()
    print("| world | bucket cap MiB | side | " + " | ".join(names) +
          " | comm | wait after backward | hidden |")
    print("|---|---|---|" + "---|" * (len(names) + 3))
    for world, mb in keys:
        for side in ("ours", "torch"):
            rs = [r for r in rows if r[0] == side and (r[1], r[2]) == (world, mb)]
            cols = [med(float(r[8 + k]) for r in rs) for k in range(len(names))]
            comm = [float(r[14]) for r in rs]
            wait = [float(r[14]) - float(r[15]) for r in rs]
            share = [float(r[15]) / float(r[14]) if float(r[14]) > 0 else 0 for r in rs]
            print(f"| {world} | {mb} | {side} | " + " | ".join(cols) +
                  f" | {med(comm)} | {med(wait)} | {100 * st.median(share):.0f}% |")
print()
print("all runs (ms/step):")
for side in ("ours", "torch"):
    for world, mb in keys:
        vals = " ".join(r[4] for r in rows if r[0] == side and (r[1], r[2]) == (world, mb))
        print(f"  {side:5s} world {world} cap {mb:>5s} MiB: {vals}")
PY
