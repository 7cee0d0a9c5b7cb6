#!/usr/bin/env bash
# libdtlaunch_ddp.so exports ddp.h's API and nothing of its own beyond it: no dtlaunch::ddp::detail
# symbol, nothing of the static libraries it links (dtlaunch::core, contract, heartbeat), and the
# entry points a program needs. What remains besides are vague-linkage instantiations of std and
# c10 templates, which every module that uses them carries. Usage: exports_test.sh LIBRARY
set -euo pipefail
lib=$1

# "T dtlaunch::ddp::plan_buckets(...)" -> "dtlaunch::ddp::plan_buckets(...)"; "typeinfo for X" -> X.
names=$(nm -D --defined-only -C "$lib" | cut -d' ' -f3- | sed -E 's/^(typeinfo name|typeinfo|vtable|VTT|construction vtable) for //')
count=$(wc -l <<<"$names")
leaked=$(grep -E '^dtlaunch::' <<<"$names" | grep -vE '^dtlaunch::ddp::' || true)
internal=$(grep -E '^dtlaunch::ddp::detail::' <<<"$names" || true)
if [[ -n $leaked || -n $internal ]]; then
  echo "FAIL: $lib exports what is not ddp.h's API:"
  printf '%s\n' "$leaked" "$internal" | grep -v '^$' | head -20
  exit 1
fi
for needed in 'dtlaunch::ddp::init_process_group(' 'dtlaunch::ddp::plan_buckets(' \
              'dtlaunch::ddp::DistributedDataParallel::DistributedDataParallel(' \
              'dtlaunch::ddp::Error'; do
  grep -qF "$needed" <<<"$names" || { echo "FAIL: $lib does not export $needed"; exit 1; }
done
echo "ok: $count exported symbols, none of dtlaunch's outside ddp.h's API"
