#!/usr/bin/env bash
# Rank 0's cost per check-in (bench/doctor/checkin_load.cpp), one size after the other, and with a
# second build (another version of serve()) the two alternating size by size, so that both see
# the same machine load.
#   bench/doctor/checkin_load.sh BUILD_DIR [BEFORE_BUILD_DIR]
# PER_CONNECTION=1 (one connection per task, as under Slurm; rank 0 then holds N descriptors)
# or 8 (a node's 8 ranks on one connection); SIZES="2048 4096 8192 16384".
set -euo pipefail
after=${1:?usage: $0 BUILD_DIR [BEFORE_BUILD_DIR]}/bench/doctor/doctor_checkin_load
before=${2:+$2/bench/doctor/doctor_checkin_load}
k=${PER_CONNECTION:-1}
sizes=${SIZES:-2048 4096 8192 16384}
echo "$(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $k report(s) per connection"
for n in $sizes; do
  if [[ -n $before ]]; then
    echo "before: $("$before" --per-connection "$k" "$n" | tail -1)"
  fi
  echo "after:  $("$after" --per-connection "$k" "$n" | tail -1)"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
