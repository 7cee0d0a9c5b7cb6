#!/bin/sh
# Writes docs/ddp.md's minimal program and its CMakeLists.txt into DIR, each taken from the block
# after its marker line "<!-- consumer:NAME -->" and a fence line, so that the docs cannot drift
# from what is built: tests/ddp/install_test.sh, tests/package/source_build.sh and
# scripts/gpu-check.sh build it. Usage: consumer_from_docs.sh DOCS_MD DIR
set -eu
docs=$1
dir=$2
mkdir -p "$dir"
for name in CMakeLists.txt train_min.cpp; do
  awk -v marker="<!-- consumer:$name -->" '
    $0 == marker { state = 1; next }
    state == 1 && /^```/ { state = 2; next }
    state == 2 && /^```/ { exit }
    state == 2 { print }' "$docs" >"$dir/$name"
  [ -s "$dir/$name" ] || { echo "FAIL: no $name block in $docs"; exit 1; }
done
