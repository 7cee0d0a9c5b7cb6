#!/usr/bin/env bash
# The DDP runtime and the example against LibTorch 2.x, on CPU, without a GPU machine: Debian's
# own LibTorch 2.x in a chroot of a newer Debian (trixie: 2.6; sid: the newest Debian has), so
# that the 2.x switches (autograd hooks, c10d Backend, optionals, the libuv TCPStore) are built
# with -Werror and run, not only written from upstream headers. It:
#   1. makes (or reuses) a root filesystem of SUITE with mmdebstrap: g++, cmake, libtorch-dev,
#      python3-torch, Catch2 (v3 there), CLI11, Fashion-MNIST;
#   2. unpacks the headers of SUITE's CUDA LibTorch (libtorch-cuda-dev, contrib) beside it;
#   3. configures the whole project in the chroot and builds the DDP runtime, its tests, the
#      example dtlaunch-train and its test;
#   4. compiles the NCCL backend's CUDA-tensor path (DTLAUNCH_DDP_TORCH_CUDA, on c10::cuda
#      streams) against the CUDA LibTorch headers and /usr/local/cuda, to an object: compile
#      only, no GPU; and, as a control, checks that the same file does not compile against the
#      CPU-only headers, so the check is known to reach that code;
#   5. runs the torch-labelled tests in the chroot: the sampler against that suite's
#      python3-torch, collectives, DDP parity, rendezvous errors, the installed package, and
#      the example's bad-input test (FULL=1 adds the two long training tests, about 3 minutes,
#      and the heartbeat's and the straggler's timing tests, about 2 minutes).
#
# Usage: scripts/libtorch2-check.sh [--prepare | --build | --test] [SUITE]
#   SUITE: trixie (default) or sid
#   --prepare   only steps 1 and 2 (scripts/test.sh runs this in the background during its build)
#   --build     steps 1 to 4; --test: step 5 on what --build built. scripts/test.sh builds at
#               nice 19 while build/'s tests run, then tests; without a flag, all five steps.
# Environment: MIRROR (default http://deb.debian.org/debian), JOBS (default: all cores),
#   FULL=1, DTLAUNCH_LIBTORCH2_DIR (default build-libtorch2-SUITE in the repository root).
# Needs root (mmdebstrap --mode=root, a private mount namespace, chroot) and Debian's mirror.
# Nothing is left mounted: every mount lives in a mount namespace that ends with the step.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stage=all
case ${1:-} in
  --prepare | --build | --test)
    stage=${1#--}
    shift
    ;;
esac
suite=${1:-trixie}
case $suite in
  trixie | sid) ;;
  *)
    echo "libtorch2-check: SUITE '$suite' is not one of trixie, sid" >&2
    exit 2
    ;;
esac
mirror=${MIRROR:-http://deb.debian.org/debian}
jobs=${JOBS:-$(nproc)}
work=${DTLAUNCH_LIBTORCH2_DIR:-$root/build-libtorch2-$suite}
rootfs=$work/rootfs
build=$work/build
cuda_home=/usr/local/cuda
torch_cuda=/opt/libtorch-cuda # inside the chroot

packages=(g++ cmake ninja-build libtorch-dev libgloo-dev python3-torch catch2 libcli11-dev
  zlib1g-dev dataset-fashion-mnist ca-certificates)
stamp="$suite ${packages[*]}"

if ((EUID != 0)); then
  echo "libtorch2-check: needs root (mmdebstrap, mount namespaces, chroot)" >&2
  exit 2
fi
for tool in mmdebstrap unshare chroot; do
  command -v "$tool" >/dev/null || {
    echo "libtorch2-check: $tool is missing (scripts/setup.sh installs it)" >&2
    exit 2
  }
done

# in_chroot COMMAND: runs bash -c COMMAND in the chroot, with the repository at its own path,
# /dev, /proc and the host's CUDA toolkit (read-only) mounted in a private mount namespace.
in_chroot() {
  mkdir -p "$rootfs$root" "$rootfs$cuda_home"
  local mounts="mount --rbind /dev '$rootfs/dev' && mount -t proc proc '$rootfs/proc' &&
    mount --bind '$root' '$rootfs$root'"
  [[ -d $cuda_home/include ]] && mounts+=" && mount --bind -o ro '$cuda_home' '$rootfs$cuda_home'"
  unshare --mount --propagation private bash -c "$mounts && exec chroot '$rootfs' \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
    PYTHONDONTWRITEBYTECODE=1 CTEST_OUTPUT_ON_FAILURE=1 bash -c \"\$0\"" "$1"
}

# shellcheck source=lib/rootfs.sh
source "$root/scripts/lib/rootfs.sh"

prepare() {
  local list
  list=$(IFS=,; echo "${packages[*]}")
  echo -n "libtorch2-check: "
  # A mirror that is a snapshot serves sid's Release past its Valid-Until date (seen here:
  # "expired (invalid since 25d)"); the signatures are still checked.
  ensure_rootfs "$rootfs" "$stamp" "$suite" "$mirror" --variant=apt --components=main,contrib \
    --include="$list" --aptopt='Acquire::Check-Valid-Until "false"'
  cp /etc/hosts "$rootfs/etc/hosts"
  if [[ ! -f $rootfs$torch_cuda/.unpacked ]]; then
    # Headers only: the CUDA LibTorch itself (1.4 GB, with NVIDIA's libraries) is not needed
    # to compile, and conflicts with libtorch-dev.
    in_chroot "set -e; apt-get update -qq; cd /tmp; rm -f libtorch-cuda-dev_*.deb
      apt-get download -qq libtorch-cuda-dev; rm -rf $torch_cuda
      dpkg -x libtorch-cuda-dev_*.deb $torch_cuda; rm -f libtorch-cuda-dev_*.deb
      rm -rf /var/lib/apt/lists/*; touch $torch_cuda/.unpacked"
  fi
  in_chroot "dpkg-query -W -f='\${Version}' libtorch-dev" >"$work/libtorch-version"
}

prepare
if [[ $stage == prepare ]]; then
  echo "libtorch2-check: $suite ready, LibTorch $(cat "$work/libtorch-version")"
  exit 0
fi

status=0
rows=()
# step NAME COMMAND: runs COMMAND in the chroot, logs to $work/NAME.log, adds a row.
step() {
  local name=$1 t0=$SECONDS rc=0
  in_chroot "$2" >"$work/$name.log" 2>&1 || rc=$?
  local result=ok
  if ((rc)); then
    result=FAIL
    status=1
    echo "--- $name failed (exit $rc); the end of $work/$name.log:"
    tail -n 60 "$work/$name.log"
    # ctest's summary ends the log; the failed tests' own lines are further up.
    if [[ $name == tests ]]; then bash "$root/scripts/lib/ctest-failures.sh" "$work/$name.log"; fi
  fi
  rows+=("$(printf '%-16s %-5s %5ss  %s' "$name" "$result" $((SECONDS - t0)) "$3")")
  return $rc
}

# Release: no -g, the quickest compile of the torch headers. Warnings are errors, as in build/.
targets="dtlaunch_ddp ddp_unit_test ddp_proc_test ddp_worker live_worker dtlaunch-store dtlaunch-train train_test"
if [[ $stage != test ]]; then
  if step configure "cmake -S '$root' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDTLAUNCH_WARNINGS_AS_ERRORS=ON -DDTLAUNCH_BUILD_BENCHMARKS=OFF" \
    "g++ $(in_chroot 'g++ -dumpfullversion')"; then
    step build "cmake --build '$build' -j$jobs --target $targets" "$targets" || true
  fi

  # The CUDA path, compile only: the flags CMake gives dtlaunch_ddp's sources, with the CUDA
  # LibTorch's headers in place of the CPU ones.
  cuda_flags="-std=c++20 -O0 -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Werror \
    -D_GLIBCXX_USE_CXX11_ABI=1 -DUSE_C10D_GLOO -DUSE_DISTRIBUTED \
    -DDTLAUNCH_DDP_HAVE_NCCL=1 -DDTLAUNCH_DDP_TORCH_CUDA=1 \
    -I'$root/lib' -I'$root/lib/ddp/include' -I'$root/lib/ddp/src' -I'$build/lib/ddp/generated' -isystem '$cuda_home/include'"
  if [[ -f $cuda_home/include/nccl.h ]]; then
    step cuda-compile "g++ $cuda_flags -isystem $torch_cuda/usr/include \
      -isystem $torch_cuda/usr/include/torch/csrc/api/include \
      -c '$root/lib/ddp/src/nccl_group.cpp' -o /tmp/nccl_group_cuda.o" \
      "nccl_group.cpp with DTLAUNCH_DDP_TORCH_CUDA, CUDA LibTorch headers" || true
    # The control: against the CPU-only headers the CUDA path must not compile.
    step cuda-control "if g++ $cuda_flags -isystem /usr/include/torch/csrc/api/include \
      -fsyntax-only '$root/lib/ddp/src/nccl_group.cpp' >/tmp/control.log 2>&1; then
        echo 'compiled without the CUDA LibTorch headers: the check above proves nothing'; exit 1
      fi; grep -m 1 'c10/cuda' /tmp/control.log" \
      "the same file fails on CPU-only headers (c10/cuda missing)" || true
  else
    rows+=("$(printf '%-16s %-5s %5ss  %s' cuda-compile FAIL 0 "no $cuda_home/include/nccl.h")")
    status=1
  fi
fi

# Left out as well: the runtime's own timing tests, whose subject does not depend on LibTorch's
# version (the heartbeat's 60 s no-false-alarm run, the recorder's straggler statistics): build/
# runs them, and they were 110 s of the chroot's tests (docs/slurm-cluster.md, the suite's time).
# And the heartbeat forger test, which runs a local-mode job and so needs the launcher, not
# built here: what it tests, the heartbeat's gate (lib/heartbeat), uses nothing of LibTorch.
exclude='^train: (85% test accuracy|a stop signal)|^ddp: ?(heartbeat: no false alarm|a straggler)'
exclude+='|^ddp_heartbeat_forger_test$'
[[ ${FULL:-0} == 1 ]] && exclude='^$'
if [[ $stage == test && ! -x $build/tests/ddp/ddp_proc_test ]]; then
  rows+=("$(printf '%-16s %-5s %5ss  %s' tests FAIL 0 "nothing built: run --build first")")
  status=1
elif [[ $stage != build && -x $build/tests/ddp/ddp_proc_test ]]; then
  step tests "cd '$build' && ctest --timeout 600 -L torch -E '$exclude'" \
    "ctest -L torch$([[ ${FULL:-0} == 1 ]] || echo ', without the two long training tests')" || true
  grep -E 'tests passed|tests failed' "$work/tests.log" | tail -n 1 | sed 's/^/  /' || true
fi

echo
echo "dtlaunch DDP runtime on Debian $suite's LibTorch $(cat "$work/libtorch-version") (logs in $work)"
printf '%-16s %-5s %6s  %s\n' step result time note
for row in "${rows[@]}"; do echo "$row"; done
exit $status
