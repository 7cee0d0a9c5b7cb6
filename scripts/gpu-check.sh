#!/usr/bin/env bash
# The DDP runtime's GPU check: one prepared run on the GPU machine (one GPU, LibTorch 2.x from
# the torch wheel, CUDA and NCCL under /usr/local/cuda). Nothing in the build or the tests
# needs it. It:
#   1. configures and builds the runtime, the test worker and (when its dependencies are there)
#      the example dtlaunch-train against the wheel's LibTorch, with CUDA and NCCL;
#   2. runs the Gloo tests of the worker as 2 ranks on the 2.x build (the hook and c10d APIs);
#   3. runs the NCCL backend at world size 1: collectives on CUDA and CPU tensors, DDP training
#      on the GPU against a one-process reference;
#   4. runs a live recovery on NCCL (3 ranks on the one GPU, one killed and replaced) and the
#      example on the GPU;
#   5. builds the runtime alone from source into a HOME's .local as docs/install.md says, a
#      user project against it with find_package(dtlaunch), and runs it with the release
#      tarball's launcher (dist/, carried here) on the GPU;
#   6. decomposes the training step at world size 1 on the GPU, ours against PyTorch's DDP
#      (bench/ddp/run.sh PHASES=1 DEVICE=cuda: data, forward, backward, the wait after
#      backward, optimizer step), 3 runs per side per bucket size, table in phases-gpu.log;
# and prints a table of the steps. Bounded by 8 minutes in all (each step has its own limit).
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]     (default: build-gpu; logs in BUILD_DIR/gpu-check)
# Environment: PYTHON (default python3, must import torch), CUDA_HOME (default /usr/local/cuda),
# JOBS (default: all cores), GLOO_INCLUDE_DIR (a directory holding gloo/: a pip torch wheel
# ships none of Gloo's headers, and without them the runtime has no Gloo backend, so the rows
# that need Gloo are skipped and say so).
set -uo pipefail

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)
# Steps run as "$self __run FUNCTION ARGS..." under timeout(1), which cannot run a function.
if [[ ${1:-} == __run ]]; then
  mode=run
  shift
else
  mode=main
  export GPU_CHECK_BUILD=${1:-$root/build-gpu}
  export GPU_CHECK_START=$(date +%s)
fi
start=$GPU_CHECK_START
build=$GPU_CHECK_BUILD
logs=$build/gpu-check
mkdir -p "$logs"
python=${PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-$(nproc)}
budget=480  # seconds, all steps together

rows=()
failed=0
# step NAME LIMIT_SECONDS COMMAND...: runs with a limit clipped to what is left of the budget,
# logs to $logs/NAME.log, and adds a row to the table.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - start)))
  ((limit > left)) && limit=$left
  if ((limit < 5)); then
    rows+=("$(printf '%-22s %-6s %6s  %s' "$name" SKIP - "out of time")")
    failed=1
    return 1
  fi
  local t0=$(date +%s) rc
  timeout --kill-after=10 "$limit" "$self" __run "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0)) result=ok note
  note=$(grep -E '^(PASS|FAIL|ERROR)|dtlaunch: |dtlaunch ddp: |dtlaunch-train: |accuracy|error' "$logs/$name.log" | tail -n 1 | cut -c1-80)
  if ((rc != 0)); then
    result=FAIL
    ((rc == 124 || rc == 137)) && note="timed out after ${limit}s"
    failed=1
  fi
  rows+=("$(printf '%-22s %-6s %5ss  %s' "$name" "$result" "$secs" "$note")")
  return $rc
}

# skip NAME WHY: a row for a step this machine cannot run; the check fails, since it is incomplete.
skip() {
  rows+=("$(printf '%-22s %-6s %6s  %s' "$1" SKIP - "$2")")
  failed=1
}

# A port nobody listens on now, for a rank 0 of this machine.
free_port() {
  "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Runs the worker scenario as N local ranks on a free port; fails if any rank fails.
ranks() {
  local n=$1 scenario=$2 port pids=() r rc=0
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port DTLAUNCH_CUDA_DEVICE=0 OMP_NUM_THREADS=1 \
      "$build/tests/ddp/ddp_worker" "$scenario" >"$logs/$scenario-rank$r.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  for ((r = 0; r < n; r++)); do sed "s/^/[rank $r] /" "$logs/$scenario-rank$r.out"; done
  # One summary line for the table: failures, else the checks and the largest DDP difference.
  cat "$logs/$scenario"-rank*.out | awk -v rc=$rc -v n="$n" '
    /^FAIL|^ERROR/ { bad++; if (!first) first = $0 }
    / checks, / { checks += $(NF - 3) }
    /max\|diff\|=/ && !/control/ { for (i = 1; i <= NF; i++) if ($i ~ /^max\|diff\|=/) {
        v = substr($i, 11) + 0; if (v > worst) worst = v } }
    END {
      if (bad || rc) printf "FAIL: %s\n", (first ? first : "a rank exited non-zero")
      else printf "PASS: %d ranks, %d collective checks, DDP max|diff| %.2g\n", n, checks, worst
    }'
  return $rc
}

info() {
  echo "host: $(hostname)"
  nvidia-smi -L 2>&1 | head -n 4
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "prefix", torch.utils.cmake_prefix_path)'
  cmake --version | head -n 1
  # NCCL may come with the toolkit, from the distribution (/usr/lib) or from a wheel.
  ls "$cuda_home/include/nccl.h" /usr/include/nccl.h 2>/dev/null
  ldconfig -p | grep -m 2 libnccl || echo "libnccl: not in the loader's cache"
  local gloo
  gloo=$("$python" -c 'import torch, os; print(os.path.join(torch.utils.cmake_prefix_path, "..", "..", "include", "gloo"))')
  [[ -d $gloo ]] && echo "gloo headers: in the wheel" || echo "gloo headers: not in the wheel"
  echo "GLOO_INCLUDE_DIR=${GLOO_INCLUDE_DIR:-(unset)}"
}

configure() {
  local prefix
  prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  local gen=() cuda=(-DCUDAToolkit_ROOT="$cuda_home")
  if [[ -n ${GLOO_INCLUDE_DIR:-} ]]; then
    cuda+=(-DDTLAUNCH_GLOO_INCLUDE_DIR="$GLOO_INCLUDE_DIR")
  else
    cuda+=(-UDTLAUNCH_GLOO_INCLUDE_DIR)
  fi
  command -v ninja >/dev/null && gen=(-G Ninja)
  # A CUDA LibTorch's CMake config may enable the CUDA language: point it at this nvcc.
  [[ -x $cuda_home/bin/nvcc ]] && cuda+=(-DCMAKE_CUDA_COMPILER="$cuda_home/bin/nvcc")
  # The whole project when its other dependencies (CLI11, Catch2) are installed; else
  # only what this check needs, through a small wrapper project.
  # Release: no -g, the quickest compile of the torch headers.
  if cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "${cuda[@]}"; then
    echo "configured: whole project"
  else
    echo "whole-project configure failed (see above); using the wrapper project"
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
    local wrap=$build/wrapper-src
    mkdir -p "$wrap"
    cat >"$wrap/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(dtlaunch VERSION 0.1.0 LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
include(GNUInstallDirs)
include($root/cmake/Warnings.cmake)
add_subdirectory($root/lib/core lib/core)
target_include_directories(dtlaunch_core PUBLIC $root/lib)
set(DTLAUNCH_BUILD_DDP ON)
add_subdirectory($root/lib/ddp lib/ddp)
find_package(Torch REQUIRED)
add_executable(ddp_worker $root/tests/ddp/ddp_worker.cpp)
target_link_libraries(ddp_worker PRIVATE dtlaunch::ddp)
set_target_properties(ddp_worker PROPERTIES RUNTIME_OUTPUT_DIRECTORY \${CMAKE_BINARY_DIR}/tests/ddp)
EOF
    cmake -S "$wrap" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" "${cuda[@]}" || return 1
  fi
  grep -q 'DTLAUNCH_DDP_HAVE_NCCL:INTERNAL=ON' "$build/CMakeCache.txt" ||
    { echo "FAIL: NCCL backend not enabled"; return 1; }
  if grep -q 'DTLAUNCH_DDP_HAVE_GLOO:INTERNAL=ON' "$build/CMakeCache.txt"; then
    echo "dtlaunch: NCCL and Gloo backends enabled"
  else
    echo "dtlaunch: NCCL backend enabled, no Gloo headers (Gloo rows skipped)"
  fi
}

build_targets() {
  local targets=(ddp_worker)
  local all
  all=$(cmake --build "$build" --target help 2>/dev/null)
  [[ $all == *dtlaunch-train* ]] && targets+=(dtlaunch-train)
  [[ $all == *live_worker* ]] && targets+=(live_worker)
  [[ $all == *ddp_phases* ]] && targets+=(ddp_phases)
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" && echo "PASS: built ${targets[*]}"
}

example() {
  local exe=$build/apps/train/dtlaunch-train
  [[ -x $exe ]] || { echo "dtlaunch: the example was not built (its dependencies are missing)"; return 1; }
  local port data=()
  port=$(free_port)
  if [[ -d /usr/share/datasets/fashion-mnist ]]; then
    data=(--data-dir /usr/share/datasets/fashion-mnist --cache-dir "$build/fmnist" --epochs 1)
  else
    data=(--synthetic 8192 --epochs 1)  # no dataset on this machine
  fi
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$port DTLAUNCH_CUDA_DEVICE=0 "$exe" --backend nccl "${data[@]}"
}

# Live recovery on NCCL (docs/ddp.md, "Live recovery"): 3 ranks of tests/ddp/live_worker on the
# one GPU, each with its own NCCL_HOSTID (NCCL refuses two ranks of one host on one GPU; as
# three hosts they talk over sockets), the model and its dropout on the GPU (the CUDA generator's
# state goes with the training state). Fault-free, then rank 2 SIGKILLs itself at step 8 and a replacement joins:
# the survivors keep their processes and every run ends with the same weights.
live_nccl() {
  local exe=$build/tests/ddp/live_worker
  [[ -x $exe ]] || { echo "dtlaunch: tests/ddp/live_worker was not built"; return 1; }
  local dir=$logs/live-nccl port r digests=() rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  export WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 OMP_NUM_THREADS=1 LIVE_STEPS=24 \
    DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3 DTLAUNCH_DDP_LIVE_WAIT=30 DTLAUNCH_DDP_LIVE=1 \
    DTLAUNCH_CUDA_DEVICE=0 LIVE_DEVICE=group LIVE_STEP_MS=40 NCCL_SHM_DISABLE=1 \
    NCCL_P2P_DISABLE=1
  for run in fault-free kill; do
    export LIVE_MARKS=$dir/$run
    mkdir -p "$LIVE_MARKS"
    port=$(free_port)
    local kill=() pids=()
    [[ $run == kill ]] && kill=(LIVE_KILL=2:8)
    for r in 0 1 2; do
      env RANK=$r LOCAL_RANK=$r MASTER_PORT=$port NCCL_HOSTID=gpucheck-$r "${kill[@]}" \
        timeout 120 "$exe" >"$LIVE_MARKS/r$r.log" 2>&1 &
      pids+=($!)
    done
    if [[ $run == kill ]]; then
      wait "${pids[2]}"
      env RANK=2 LOCAL_RANK=2 MASTER_PORT=$port NCCL_HOSTID=gpucheck-2b DTLAUNCH_DDP_LIVE_JOIN=1 \
        timeout 120 "$exe" >"$LIVE_MARKS/rep.log" 2>&1 &
      pids[2]=$!
    fi
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    for f in "$LIVE_MARKS"/*.log; do sed "s|^|[$run $(basename "$f" .log)] |" "$f"; done
    digests+=("$(sed -n 's/^weights sha256 //p' "$LIVE_MARKS/r0.log")")
  done
  grep -q "recovered before step 8 (generation 1)" "$dir/kill/r0.log" || rc=1
  grep -q "done rank 2 .* replacement 1" "$dir/kill/rep.log" || rc=1
  grep -q "backend nccl" "$dir/kill/rep.log" || { echo "FAIL: the runtime did not pick NCCL"; rc=1; }
  if ((rc == 0)) && [[ -n ${digests[0]} && ${digests[0]} == "${digests[1]}" ]]; then
    echo "PASS: NCCL, rank 2 killed at step 8 and replaced live, weights ${digests[0]:0:16} as fault-free"
  else
    echo "FAIL: live recovery on NCCL (digests ${digests[*]}; logs in $dir)"
    return 1
  fi
}

# The install path of docs/install.md on this machine: the runtime alone
# (-DDTLAUNCH_BUILD_LAUNCHER=OFF) built against the wheel's LibTorch and installed into a
# HOME's .local, docs/ddp.md's minimal program built against it with find_package(dtlaunch),
# and run by the release tarball's launcher (dist/, from scripts/package.sh: carried to this
# machine when it is there) in local mode, 1 rank: kAuto picks NCCL on a GPU node.
install_from_source() {
  local home=$build/install-home prefix tarball
  tarball=$(ls "$root"/dist/dtlaunch-*-linux-x86_64.tar.gz 2>/dev/null | head -n 1)
  [[ -n $tarball ]] || { echo "dtlaunch: no release tarball in dist/ (run scripts/package.sh)"; return 1; }
  prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  rm -rf "$home" && mkdir -p "$home/consumer"
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  local cuda=(-DCUDAToolkit_ROOT="$cuda_home")
  [[ -x $cuda_home/bin/nvcc ]] && cuda+=(-DCMAKE_CUDA_COMPILER="$cuda_home/bin/nvcc")
  cmake -S "$root" -B "$home/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
    -DDTLAUNCH_BUILD_LAUNCHER=OFF "${cuda[@]}" >"$home/configure.log" 2>&1 ||
    { tail -n 30 "$home/configure.log"; echo "FAIL: configure"; return 1; }
  grep -A3 'dtlaunch: ' "$home/configure.log"
  cmake --build "$home/build" -j "$jobs" >"$home/build.log" 2>&1 ||
    { tail -n 30 "$home/build.log"; echo "FAIL: build"; return 1; }
  cmake --install "$home/build" --prefix "$home/.local" || { echo "FAIL: install"; return 1; }
  sh "$root/tests/ddp/consumer_from_docs.sh" "$root/docs/ddp.md" "$home/consumer" || return 1
  cmake -S "$home/consumer" -B "$home/consumer/build" "${gen[@]}" \
    -DCMAKE_PREFIX_PATH="$home/.local;$prefix" >"$home/consumer.log" 2>&1 &&
    cmake --build "$home/consumer/build" >>"$home/consumer.log" 2>&1 ||
    { tail -n 30 "$home/consumer.log"; echo "FAIL: the user's project"; return 1; }
  tar -xzf "$tarball" -C "$home"
  local launcher
  launcher=$(ls "$home"/dtlaunch-*/bin/dtlaunch)
  echo "launcher: $("$launcher" --version), $(ldd "$launcher" | wc -l) shared objects; $(ldd --version | head -n 1)"
  DTLAUNCH_CUDA_DEVICE=0 "$launcher" --nproc-per-node 1 "$home/consumer/build/train_min" || return 1
  echo "PASS: runtime from source (wheel's LibTorch) into .local, user project, release launcher"
}

# The step decomposed, world size 1 on the GPU, both sides alternating (docs/benchmarks.md).
phases() {
  [[ -x $build/bench/ddp/ddp_phases ]] ||
    { echo "dtlaunch: bench/ddp/ddp_phases was not built (its dependencies are missing)"; return 1; }
  PYTHON=$python DTLAUNCH_CUDA_DEVICE=0 PHASES=1 DEVICE=cuda WORLDS=1 REPS=3 STEPS=200 WARMUP=20 \
    "$root/bench/ddp/run.sh" "$build" || return 1
  echo "PASS: phases measured (table above)"
}

if [[ $mode == run ]]; then
  "$@"
  exit
fi

step info 30 info
# Gloo headers from elsewhere may not match this LibTorch: if the build fails with them, the
# runtime is built again without (NCCL only), so that the GPU rows still run.
step configure 150 configure &&
  { step build 300 build_targets ||
    { [[ -n ${GLOO_INCLUDE_DIR:-} ]] && unset GLOO_INCLUDE_DIR &&
      step configure-no-gloo 60 configure && step build-no-gloo 240 build_targets; }; } &&
  {
    if grep -q 'DTLAUNCH_DDP_HAVE_GLOO:INTERNAL=ON' "$build/CMakeCache.txt"; then
      step gloo-collectives-x2 60 ranks 2 collectives
      step gloo-train-x2 60 ranks 2 train
      step gloo-unused-x2 60 ranks 2 unused
    else
      skip gloo-x2 "no Gloo headers: set GLOO_INCLUDE_DIR"
    fi
    step nccl-x1 120 ranks 1 nccl
    # Rank 1 passes the rendezvous and never joins NCCL: rank 0's init must end at its 10 s
    # deadline with kTimeout naming rank 1 (ncclCommInitRank alone would wait forever). Rank 1
    # asks for Gloo to get there.
    if grep -q 'DTLAUNCH_DDP_HAVE_GLOO:INTERNAL=ON' "$build/CMakeCache.txt"; then
      step nccl-init-bounded-x2 60 ranks 2 nccl-init-lost
    else
      skip nccl-init-bounded-x2 "rank 1 needs Gloo: set GLOO_INCLUDE_DIR"
    fi
    step live-nccl-x3 90 live_nccl
    step example-gpu 150 example
    step install-from-source 150 install_from_source
    step phases-gpu-x1 150 phases
  }

echo
echo "dtlaunch DDP runtime, GPU check ($(($(date +%s) - start)) s; logs in $logs)"
printf '%-22s %-6s %6s  %s\n' step result time note
for row in "${rows[@]}"; do echo "$row"; done
exit $failed
