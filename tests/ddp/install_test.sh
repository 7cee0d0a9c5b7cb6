#!/usr/bin/env bash
# The installed package as a user sees it: `cmake --install --component ddp` into a temporary
# prefix, then docs/ddp.md's minimal program and its CMakeLists.txt (extracted from the page, so
# the docs cannot drift from what is tested) configured with find_package(dtlaunch), built, and
# run as 2 ranks. Usage: install_test.sh BUILD_DIR DOCS_MD [GENERATOR]
set -euo pipefail
build=$1
docs=$2
generator=${3:-Ninja}

work=$(mktemp -d /tmp/ddp_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --component ddp --prefix "$prefix" >/dev/null
for f in include/dtlaunch/ddp.h lib/cmake/dtlaunch/dtlaunchConfig.cmake \
         lib/cmake/dtlaunch/dtlaunchConfigVersion.cmake lib/cmake/dtlaunch/dtlaunchDdpTargets.cmake \
         lib/libdtlaunch_ddp.so; do
  [[ -e $prefix/$f ]] || { echo "FAIL: the install lacks $f"; find "$prefix"; exit 1; }
done
# Only the one public header is installed.
headers=$(find "$prefix/include" -type f | wc -l)
[[ $headers -eq 1 ]] || { echo "FAIL: $headers headers installed, expected 1"; exit 1; }

sh "$(dirname "$0")/consumer_from_docs.sh" "$docs" "$work/consumer"

# No build type: the quickest torch/torch.h compile (about 12 s rather than 22 s with -O2 -g).
cmake -S "$work/consumer" -B "$work/consumer/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAIL: configure"; exit 1; }
cmake --build "$work/consumer/build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; echo "FAIL: build"; exit 1; }
exe=$work/consumer/build/train_min

# The program must run on the installed library, not on the build tree's.
resolved=$(ldd "$exe" | awk '/libdtlaunch_ddp/ { print $3 }')
[[ $resolved == "$prefix"/lib/* ]] || { echo "FAIL: libdtlaunch_ddp resolved to '$resolved'"; exit 1; }

# two_ranks EXE NAME: runs EXE as ranks 0 and 1 on a free port, their output in NAME0.log and
# NAME1.log; fails the test when a rank fails.
two_ranks() {
  local port pids=() status=0
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for rank in 0 1; do
    env RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      timeout 120 "$1" >"$work/$2$rank.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  cat "$work/${2}0.log" "$work/${2}1.log"
  ((status == 0)) || { echo "FAIL: a rank of $1 failed"; exit 1; }
}

two_ranks "$exe" rank

# Rank 0 prints "epoch E loss L" for 5 epochs; training must have reduced the loss.
first=$(awk '$1 == "epoch" && $2 == 0 { print $4 }' "$work/rank0.log")
last=$(awk '$1 == "epoch" && $2 == 4 { print $4 }' "$work/rank0.log")
[[ -n $first && -n $last ]] || { echo "FAIL: no loss lines"; exit 1; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 10) }' ||
  { echo "FAIL: loss went from $first to $last, expected a tenfold drop"; exit 1; }

# The live-recovery program of docs/ddp.md ("Live recovery"), built the same way and run as 2
# ranks without faults.
awk '$0 == "<!-- consumer:live_min.cpp -->" { s = 1; next }
     s == 1 && /^```/ { s = 2; next }
     s == 2 && /^```/ { exit }
     s == 2 { print }' "$docs" >"$work/consumer/live_min.cpp"
[[ -s $work/consumer/live_min.cpp ]] || { echo "FAIL: no live_min.cpp block in $docs"; exit 1; }
printf 'add_executable(live_min live_min.cpp)\ntarget_link_libraries(live_min PRIVATE dtlaunch::ddp)\n' \
  >>"$work/consumer/CMakeLists.txt"
cmake --build "$work/consumer/build" >"$work/build_live.log" 2>&1 ||
  { cat "$work/build_live.log"; echo "FAIL: build live_min"; exit 1; }
two_ranks "$work/consumer/build/live_min" live
grep -qx "done at step 1000" "$work/live0.log" || { echo "FAIL: live_min did not reach step 1000"; exit 1; }
echo "PASS: installed package built and ran; loss $first -> $last; live_min reached step 1000"
