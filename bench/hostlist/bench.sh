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
for shape in few many blank; do
  # Through the environment, so that blanks in the expression reach the programs as one argument;
  # hyperfine subtracts the shell's own start-up time.
  export EXPR
  EXPR=$("$bench" --expr "$shape")
  # Same hosts, same order, or the timing means nothing.
  cmp <("$dtlaunch" hostnames "$EXPR") <(scontrol show hostnames "$EXPR")
  echo "== $shape: $(scontrol show hostnames "$EXPR" | wc -l) hosts, ${#EXPR}-byte expression"
  hyperfine --warmup 3 --runs 20 --export-markdown "$tmp/$shape.md" \
    -n dtlaunch "$dtlaunch hostnames \"\$EXPR\"" \
    -n scontrol "scontrol show hostnames \"\$EXPR\"" >/dev/null
  cat "$tmp/$shape.md"
done
echo "== in-process"
"$bench"
