#!/bin/sh
# Run by tests/package/check.sh as uid 65534 in a root filesystem where root installed LibTorch
# (as a site would): the DDP runtime built from the sources in $HOME/src and installed into
# $HOME/.local exactly as docs/install.md says, then docs/ddp.md's minimal program built against
# it with find_package(dtlaunch), and run as 2 ranks by the release tarball's dtlaunch in local
# mode. Usage: source_build.sh VERSION
set -eu
version=$1
cd "$HOME"
fail() {
  echo "FAIL: $*"
  exit 1
}
[ "$(id -u)" = 65534 ] || fail "runs as uid $(id -u), not as the unprivileged user"

cmake -S src -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDTLAUNCH_BUILD_LAUNCHER=OFF \
  >configure.log 2>&1 || { cat configure.log; fail "configure of the runtime"; }
cmake --build build >build.log 2>&1 || { tail -n 60 build.log; fail "build of the runtime"; }
cmake --install build --prefix "$HOME/.local" >install.log 2>&1 ||
  { cat install.log; fail "cmake --install --prefix ~/.local"; }
[ -f "$HOME/.local/lib/cmake/dtlaunch/dtlaunchConfig.cmake" ] || fail "no dtlaunchConfig.cmake"

# The user's project: docs/ddp.md's minimal program and its CMakeLists.txt.
sh src/tests/ddp/consumer_from_docs.sh src/docs/ddp.md consumer || fail "the program in docs/ddp.md"
cmake -S consumer -B consumer/build -G Ninja -DCMAKE_PREFIX_PATH="$HOME/.local" \
  >consumer.log 2>&1 || { cat consumer.log; fail "configure of the user's project"; }
cmake --build consumer/build >>consumer.log 2>&1 || { tail -n 60 consumer.log; fail "build of the user's project"; }

tar -xzf "dtlaunch-$version-linux-x86_64.tar.gz"
OMP_NUM_THREADS=1 timeout 120 "dtlaunch-$version-linux-x86_64/bin/dtlaunch" --nproc-per-node 2 \
  consumer/build/train_min >run.log 2>&1 || { cat run.log; fail "2 ranks in local mode"; }
# Rank 0 prints "epoch E loss L" for 5 epochs (local mode prefixes "[rank 0] "): training
# must have reduced the loss tenfold.
first=$(awk '$1 == "[rank" && $2 == "0]" && $3 == "epoch" && $4 == 0 { print $6 }' run.log)
last=$(awk '$1 == "[rank" && $2 == "0]" && $3 == "epoch" && $4 == 4 { print $6 }' run.log)
[ -n "$first" ] && [ -n "$last" ] || { cat run.log; fail "no loss lines from rank 0"; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 10) }' ||
  fail "loss went from $first to $last, expected a tenfold drop"
echo "PASS: runtime built into ~/.local as uid 65534, user project ran 2 ranks: loss $first -> $last"
