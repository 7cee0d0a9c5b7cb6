#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it (.ci/run calls this script):
#   1. scripts/setup.sh (idempotent: installs the Debian packages the build and tests need)
#   2. build/       g++, RelWithDebInfo, warnings as errors, everything incl. the LibTorch runtime;
#                   ctest runs every label: unit and blackbox on every core, then proc alone,
#                   then torch beside slurm (ctest -j2: one test of each at a time)
#   3. build-asan/  clang, AddressSanitizer + UndefinedBehaviorSanitizer, no LibTorch, with the
#                   libFuzzer targets; ctest runs unit, blackbox, proc, hostlist and fuzz
#   4. build-libtorch2-trixie/  the DDP runtime, its tests and the example built and tested
#                   against LibTorch 2.x (Debian trixie's 2.6) in a chroot, and the NCCL
#                   backend's CUDA-tensor path compiled against the CUDA LibTorch headers
#                   (scripts/libtorch2-check.sh)
#   5. build-package/ + dist/  the release files (scripts/package.sh: the launcher built in a
#                   bullseye chroot for its glibc floor, the tarball, the wheel, the .deb), then
#                   installed and run in minimal bullseye and trixie chroots as an unprivileged
#                   user, the runtime built from source into $HOME/.local there
#                   (tests/package/check.sh), and the Slurm layout scenario run with the
#                   packaged binary (ctest -L packaged)
# Steps 3, 4 and 5 build in the background at nice 19 from the start: while step 2 compiles
# they get next to nothing, and while build/'s tests run, which spend much of their time waiting
# (timeouts, Slurm, ranks that sleep), they get the CPU those tests leave idle. Their own tests
# run afterwards, as build/'s do; step 5's beside step 4's, which mostly wait on ranks.
# Where the time goes, per phase, and how it was measured: docs/slurm-cluster.md, "The suite's
# time".
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
  mkdir -p build-asan
  rm -f build-asan/background.done
  (
    # Marks the end, built or not: the LibTorch 2.x build waits for it, since this one's tests
    # come first.
    trap 'touch build-asan/background.done' EXIT
    set -e
    CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DDTLAUNCH_SANITIZE=ON -DDTLAUNCH_BUILD_DDP=OFF -DDTLAUNCH_BUILD_FUZZERS=ON \
      -DDTLAUNCH_BUILD_BENCHMARKS=OFF -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
    nice -n 19 cmake --build build-asan -j"$jobs"
    echo "build-asan/ built in the background, done at $((SECONDS - start))s"
  ) >build-asan/background.log 2>&1 &
  asan_build=$!
  # The root filesystem is mostly downloading and unpacking; the build follows at nice 19.
  mkdir -p build-libtorch2-trixie
  (
    if ! scripts/libtorch2-check.sh --prepare trixie >build-libtorch2-trixie/prepare.log 2>&1; then
      cat build-libtorch2-trixie/prepare.log
      echo "FAILED: the trixie root filesystem for the LibTorch 2.x check could not be made"
      exit 1
    fi
    tail -n 1 build-libtorch2-trixie/prepare.log
    while [[ ! -e build-asan/background.done ]]; do sleep 2; done
    built=0
    nice -n 19 scripts/libtorch2-check.sh --build trixie || built=$?
    echo "LibTorch 2.x built in the background, done at $((SECONDS - start))s"
    exit $built
  ) >build-libtorch2-trixie/background.log 2>&1 &
  libtorch2_build=$!
  # The release files: the root filesystems first (downloading, then unpacking: CPU that build/
  # would otherwise miss, hence nice 19 too), then the launcher's build.
  mkdir -p build-package
  (
    set -e
    nice -n 19 scripts/package.sh --prepare
    nice -n 19 tests/package/check.sh --prepare
    nice -n 19 scripts/package.sh
    echo "release files built in the background, done at $((SECONDS - start))s"
  ) >build-package/background.log 2>&1 &
  package_build=$!
fi

step "configure and build: build/ (g++)"
# Line tables (-g1) are enough for a backtrace; full debug information of the LibTorch templates
# was a fifth of each LibTorch file's compile time.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build -j"$jobs"

status=0
# Every ctest run's output, kept for the closing summary of failures.
suite_log=build/ctest-suite.log
: >"$suite_log"
failure_logs=("$suite_log")
run_ctest() { ctest "$@" 2>&1 | tee -a "$suite_log"; }
# The unit and blackbox labels (pure functions, dtlaunch run once per case, the comparisons with
# scontrol, the golden files) have no timing in them and run on every core. The proc label
# (supervised processes, signals, grace periods) runs alone, one test at a time. Then the two
# long chains, each one test at a time as before, run side by side (ctest -j2): the torch label
# (Gloo ranks, python3-torch, training: they hold the lock dtlaunch_torch_ranks) and the Slurm
# scenarios (they hold their cluster's lock). Both spend most of their time waiting (timeouts,
# heartbeats, sleeping ranks, srun). The tests that judge ranks' relative speed (stragglers:
# slurm.trace_dump, the DDP straggler test) and slurm.job, which times each phase of a recovery,
# hold both locks: beside the other chain a straggler was named in a healthy run. The detectors'
# scenarios (doctor, heartbeat, watch) run beside the torch tests: a detector must hold under
# load (docs/slurm-cluster.md, "The suite's time").
parallel_labels='unit|blackbox'
step "tests: build/, labels $parallel_labels in parallel"
run_ctest --test-dir build --output-on-failure --timeout 600 -L "$parallel_labels" -j"$jobs" || status=1
step "tests: build/, label proc, one at a time"
run_ctest --test-dir build --output-on-failure --timeout 600 -L proc -LE "$parallel_labels" || status=1
step "tests: build/, labels torch and slurm: the two chains side by side"
run_ctest --test-dir build --output-on-failure --timeout 600 -LE "$parallel_labels|proc|packaged" -j2 ||
  status=1

if ((!fast)); then
  step "build-asan/ (clang, ASan+UBSan, fuzzers): waiting for its background build"
  if wait "$asan_build"; then
    tail -n 1 build-asan/background.log
  else
    tail -n 60 build-asan/background.log
    echo "FAILED: build-asan/ did not build"
    status=1
  fi
  step "tests: build-asan/ (sanitizers)"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # build/ compares 2000 random expressions with scontrol; here 500 are enough for the
  # sanitizers (the fuzz targets add their own), and the rest was a minute of scontrol runs.
  export DTLAUNCH_HOSTLIST_CASES=500
  run_ctest --test-dir build-asan --output-on-failure --timeout 600 -L "$parallel_labels|fuzz" \
    -j"$jobs" || status=1
  run_ctest --test-dir build-asan --output-on-failure --timeout 600 -L 'proc|hostlist' \
    -LE "$parallel_labels|fuzz" || status=1
fi

if ((!fast)); then
  step "LibTorch 2.x in a Debian trixie chroot: waiting for its background build, then tests"
  libtorch2_failed=0
  wait "$libtorch2_build" || libtorch2_failed=$?
  cat build-libtorch2-trixie/background.log
  step "release files: waiting for their background build"
  package_failed=0
  wait "$package_build" || package_failed=$?
  tail -n 8 build-package/background.log
  if ((package_failed)); then
    echo "FAILED: the release files could not be built"
    status=1
  else
    # The source build as a user compiles the runtime in the same chroot the LibTorch 2.x
    # tests use, beside them: those tests mostly wait on their ranks.
    tests/package/check.sh >build-package/check.log 2>&1 &
    package_check=$!
  fi
  if ((libtorch2_failed)); then
    status=1
  else
    scripts/libtorch2-check.sh --test trixie || status=1
    failure_logs+=(build-libtorch2-trixie/tests.log)
  fi
  if ((!package_failed)); then
    step "release files: installed and run as a user (tests/package/check.sh)"
    wait "$package_check" || status=1
    cat build-package/check.log
    step "release files: the Slurm layout scenario with the packaged dtlaunch"
    run_ctest --test-dir build --output-on-failure --timeout 600 -L packaged || status=1
  fi
fi

step "done"
if ((status)); then
  # CI keeps only the end of this output: the failed tests' own lines come again here.
  bash scripts/lib/ctest-failures.sh "${failure_logs[@]}"
  echo "FAILED: see the ctest output above"
else
  echo "all tests passed"
fi
exit $status
