#!/usr/bin/env bash
# Whole-process comparison, side by side in one hyperfine run: `dtlaunch hostnames` against
# `scontrol show hostnames` (Debian's Slurm 22.05) on two expressions of 600,000 hosts, then the
# in-process throughput. Usage: bench/hostlist/bench.sh BUILD_DIR   (e.g. build)
set -euo pipefail
build=${1:?usage: bench.sh BUILD_DIR}
bench=$build/bench/hostlist/dtlaunch_hostlist_bench
dtlaunch=$build/apps/dtlaunch/dtlaunch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'ClusterName=bench\nSlurmctldHost=localhost\n' >"$tmp/slurm.conf"
export SLURM_CONF=$tmp/slurm.conf
for shape in few many; do
  expr=$("$bench" --expr "$shape")
  # Same hosts, same order, or the timing means nothing.
  cmp <("$dtlaunch" hostnames "$expr") <(scontrol show hostnames "$expr")
  echo "== $shape: $(scontrol show hostnames "$expr" | wc -l) hosts, ${#expr}-byte expression"
  hyperfine -N --warmup 3 --runs 20 --export-markdown "$tmp/$shape.md" \
    -n dtlaunch "$dtlaunch hostnames $expr" \
    -n scontrol "scontrol show hostnames $expr" >/dev/null
  cat "$tmp/$shape.md"
done
echo "== in-process"
"$bench"
