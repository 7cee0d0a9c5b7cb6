#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build, and train a small CNN on
# Fashion-MNIST with 2 workers that dtlaunch spawns and supervises (local mode, no Slurm),
# using dtlaunch's C++ DDP runtime over Gloo: 2 epochs, about 88% test accuracy, under a
# minute on 2 CPU cores once built.
#   scripts/demo.sh [extra dtlaunch-train options, e.g. --max-steps 100]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bash scripts/setup.sh
# Same directory and options as scripts/test.sh, so that either reuses the other's build.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build -j"$(nproc)" --target dtlaunch dtlaunch-train

checkpoint=$(mktemp -d)/fashion-cnn.pt
set -x
build/apps/dtlaunch/dtlaunch --nproc-per-node 2 \
  build/apps/train/dtlaunch-train --epochs 2 --checkpoint "$checkpoint" "$@"
