#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script):
#   1. scripts/setup.sh (idempotent: installs the Debian packages the build and tests need)
#   2. build/       g++, RelWithDebInfo, warnings as errors, everything incl. the LibTorch runtime;
#                   ctest runs every label: unit, blackbox, proc, hostlist, torch, slurm
#   3. build-asan/  clang, AddressSanitizer + UndefinedBehaviorSanitizer, no LibTorch, with the
#                   libFuzzer targets; ctest runs unit, blackbox, proc, hostlist and fuzz
#   4. build-libtorch2-trixie/  the DDP runtime, its tests and the example built and tested
#                   against LibTorch 2.x (Debian trixie's 2.6) in a chroot, and the NCCL
#                   backend's CUDA-tensor path compiled against the CUDA LibTorch headers
#                   (scripts/libtorch2-check.sh; its root filesystem is made in the background
#                   while step 2 builds)
# Options: --fast skips steps 3 and 4 (for a quick local check; CI never passes it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

fast=0
[[ ${1:-} == --fast ]] && fast=1

bash scripts/setup.sh
jobs=$(nproc)
start=$SECONDS

step() { printf '\n=== %s (%ds)\n' "$*" $((SECONDS - start)); }

if ((!fast)); then
  # Mostly downloading and unpacking: it overlaps the compiles below.
  mkdir -p build-libtorch2-trixie
  scripts/libtorch2-check.sh --prepare trixie >build-libtorch2-trixie/prepare.log 2>&1 &
  libtorch2_prepare=$!
fi

step "configure and build: build/ (g++)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build -j"$jobs"

if ((!fast)); then
  step "configure and build: build-asan/ (clang, ASan+UBSan, fuzzers)"
  CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDTLAUNCH_SANITIZE=ON -DDTLAUNCH_BUILD_DDP=OFF -DDTLAUNCH_BUILD_FUZZERS=ON \
    -DDTLAUNCH_BUILD_BENCHMARKS=OFF -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
  cmake --build build-asan -j"$jobs"
fi

status=0
step "tests: build/"
ctest --test-dir build --output-on-failure --timeout 600 || status=1

if ((!fast)); then
  step "tests: build-asan/ (sanitizers)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir build-asan --output-on-failure --timeout 600 -L 'unit|blackbox|proc|hostlist|fuzz' \
    || status=1
fi

if ((!fast)); then
  step "LibTorch 2.x: build and tests in a Debian trixie chroot"
  if wait "$libtorch2_prepare"; then
    tail -n 1 build-libtorch2-trixie/prepare.log
    scripts/libtorch2-check.sh trixie || status=1
  else
    cat build-libtorch2-trixie/prepare.log
    echo "FAILED: the trixie root filesystem for the LibTorch 2.x check could not be made"
    status=1
  fi
fi

step "done"
if ((status)); then
  echo "FAILED: see the ctest output above"
else
  echo "all tests passed"
fi
exit $status
