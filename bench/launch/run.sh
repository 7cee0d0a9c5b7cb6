#!/usr/bin/env bash
# dtlaunch's own cost under Slurm, start to exec: the same trivial program run directly and
# through dtlaunch, side by side in one hyperfine run (no shell in between: -N).
#   bench/launch/run.sh [path/to/dtlaunch [path/to/other/dtlaunch]]
#     (default: build/apps/dtlaunch/dtlaunch; with a second binary, both are run in the same
#     hyperfine run and compared, e.g. a dynamic build against the release file of
#     scripts/package.sh: docs/install.md)
# Prints hyperfine's table and the added time per task; docs/benchmarks.md records a run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dtlaunch=${1:-$root/build/apps/dtlaunch/dtlaunch}
other=${2:-}
for bin in "$dtlaunch" ${other:+"$other"}; do
  [[ -x $bin ]] || { echo "bench: $bin not built (cmake --build build --target dtlaunch)" >&2; exit 2; }
done
command -v hyperfine >/dev/null || { echo "bench: hyperfine missing (scripts/setup.sh installs it)" >&2; exit 2; }

# The environment of task 37 of a 64-task step on 8 nodes, as srun would set it; the direct run
# sees the same environment, so only dtlaunch's work differs.
export SLURM_JOB_ID=918273 SLURM_STEP_ID=3 SLURM_PROCID=37 SLURM_LOCALID=5 SLURM_NODEID=4
export SLURM_STEP_NUM_TASKS=64 SLURM_STEP_NUM_NODES=8 SLURM_STEP_NODELIST='gpu[001-004,010-013]'
export SLURM_STEP_TASKS_PER_NODE='8(x8)' SLURM_DISTRIBUTION=block SLURM_CPUS_PER_TASK=12
export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7

json=$(mktemp)
trap 'rm -f "$json"' EXIT
second=()
[[ -n $other ]] && second=(-n other "$other /bin/true")
hyperfine -N --warmup 100 --runs 2000 --export-json "$json" \
  -n direct "/bin/true" \
  -n dtlaunch "$dtlaunch /bin/true" "${second[@]}"

/usr/bin/python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
d, l = r["direct"], r["dtlaunch"]
added_ms = (l["mean"] - d["mean"]) * 1e3
added_median_ms = (l["median"] - d["median"]) * 1e3
print(f"direct   mean {d['mean']*1e3:.3f} ms  median {d['median']*1e3:.3f} ms")
print(f"dtlaunch mean {l['mean']*1e3:.3f} ms  median {l['median']*1e3:.3f} ms")
print(f"added per task: mean {added_ms:.3f} ms, median {added_median_ms:.3f} ms (target < 2 ms)")
if "other" in r:
    o = r["other"]
    print(f"other    mean {o['mean']*1e3:.3f} ms  median {o['median']*1e3:.3f} ms")
    print(f"other / dtlaunch: mean {o['mean'] / l['mean']:.3f}, median {o['median'] / l['median']:.3f}")
PY
