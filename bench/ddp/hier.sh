#!/usr/bin/env bash
# All_reduce across nodes on a Slurm test cluster of its own (scripts/slurm-cluster.sh: nodes in
# network namespaces of this machine), each node's eth0 shaped with `tc tbf`, three sides side by
# side in one run, in alternation:
#   hier  = ours, DTLAUNCH_DDP_HIER=1: shared memory inside the node, Gloo among the nodes by slice
#   ring  = ours, DTLAUNCH_DDP_HIER=0: Gloo's ring over all ranks (the algorithm PyTorch runs)
#   torch = PyTorch's ProcessGroupGloo (bench/ddp/torch_allreduce.py, Debian's python3-torch)
# each under `srun dtlaunch`. Prints every run's rank-0 line, then a table of medians with the
# node-count bound 2(N-1)/N x S / B (docs/benchmarks.md, "All_reduce across nodes"), and for the
# all_reduce and the step alike the median of the pairs: torch / hier within each alternation.
#
# usage (root, the Slurm packages installed, nothing else on the bench cluster's names):
#   bench/ddp/hier.sh [BUILD_DIR]            (default: build; targets dtlaunch, allreduce_latency)
# knobs (environment):
#   LAYOUTS="3x4"          NODESxRANKS_PER_NODE, e.g. "2x2 2x4 3x2 3x4"
#   RATES="1gbit"          tc tbf rates of each node's link, e.g. "1gbit 200mbit"
#   SIZES="1024 262144 8388608"   float32 elements: 4 KB, 1 MiB, 32 MiB (67108864: 256 MiB)
#   REPS=3                 alternations of the three sides
#   SIDES="hier ring torch"
#   STEP_LAYOUTS="3x4"     layouts for the DDP step table (empty: none): the step of a 25 M-parameter
#                          MLP (bench/ddp/mlp_step.cpp, torch_mlp_step.py), the same three sides plus
#                          "compute", ours with every step under no_sync() (no all_reduce)
#   LINK_GAPS=0            1: sample node 1's link every 2 ms during each run and print its idle
#                          gaps (bench/ddp/link_gaps.py): where an all_reduce leaves the link unused
#   STEPS=5                measured steps (after 2 unmeasured) per run
#   STEP_SIDES="hier ring torch compute"   add hier-first: ours, hierarchical, with PyTorch's
#                          1 MiB first bucket (mlp_step --first-bucket); hier-copy: ours without
#                          gradients as bucket views (--separate-grads); torch-view: PyTorch's DDP
#                          with gradient_as_bucket_view=True
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
dtl=$build/apps/dtlaunch/dtlaunch
exe=$build/bench/ddp/allreduce_latency
step_exe=$build/bench/ddp/mlp_step
py=${PYTHON:-/usr/bin/python3}
LAYOUTS=${LAYOUTS:-3x4}
RATES=${RATES:-1gbit}
SIZES=${SIZES:-1024 262144 8388608}
REPS=${REPS:-3}
SIDES=${SIDES:-hier ring torch}
STEP_LAYOUTS=${STEP_LAYOUTS-3x4}
STEPS=${STEPS:-5}
STEP_SIDES=${STEP_SIDES:-hier ring torch compute}
LINK_GAPS=${LINK_GAPS:-0}
[[ $LINK_GAPS == [01] ]] || { echo "hier.sh: LINK_GAPS='$LINK_GAPS': use 0 or 1" >&2; exit 2; }
for f in "$dtl" "$exe" "$step_exe"; do
  [[ -x $f ]] || { echo "hier.sh: $f not found: build targets dtlaunch, allreduce_latency and mlp_step" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "hier.sh: needs root (network namespaces, tc)" >&2; exit 2; }

# A cluster of its own, beside the test suite's (other names, bridge, subnet and port).
export SLURM_NETNS_DIR=/tmp/dtlaunch-bench-netns SLURM_NETNS_BRIDGE=bnbr0 \
  SLURM_NETNS_SUBNET=10.78.0 SLURM_NETNS_CTLD_PORT=16917 SLURM_NETNS_NS_PREFIX=b \
  SLURM_NETNS_GPUS=0 SLURM_NETNS_CPUS=4
cluster=$root/scripts/slurm-cluster.sh
max_nodes=0
for l in $LAYOUTS $STEP_LAYOUTS; do ((${l%x*} > max_nodes)) && max_nodes=${l%x*}; done
"$cluster" up "$max_nodes" >/dev/null
trap '"$cluster" down >/dev/null 2>&1 || true' EXIT
eval "$("$cluster" env)"

rate_bits() {  # 1gbit -> 1000000000, 200mbit -> 200000000
  local r=${1,,}
  case $r in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *) echo "hier.sh: rate '$1': use NNNgbit or NNNmbit" >&2; exit 2 ;;
  esac
}

shape() {
  for ((k = 1; k <= max_nodes; k++)); do
    ip netns exec "bnode$k" tc qdisc replace dev eth0 root tbf rate "$1" burst 256kb latency 50ms
  done
}

# Repetitions and unmeasured warm-up per size: enough samples for a median, a bounded run.
reps_for() { if (($1 <= 262144)); then echo "100 20"; elif (($1 <= 8388608)); then echo "5 2"; else echo "2 1"; fi; }

# side nodes ppn what prefix field -- command...: runs the command on the nodes (the ring side
# with DTLAUNCH_DDP_HIER=0) and prints rank 0's `field` from its line starting with `prefix`.
run_side() {
  local side=$1 nodes=$2 ppn=$3 what=$4 prefix=$5 field=$6 line
  shift 7
  local gaps_pid='' gaps_out
  if [[ $LINK_GAPS == 1 ]]; then
    gaps_out=$(mktemp)  # not a fixed name in a directory under /tmp that another user may have made
    ip netns exec bnode1 "$py" "$here/link_gaps.py" >"$gaps_out" &
    gaps_pid=$!
  fi
  line=$(DTLAUNCH_DDP_HIER=$([[ $side == ring ]] && echo 0 || echo 1) OMP_NUM_THREADS=1 \
    timeout 900 srun -N"$nodes" --ntasks-per-node="$ppn" "$dtl" -- "$@" 2>&1 |
    grep "^$prefix" || true)
  if [[ -n $gaps_pid ]]; then
    kill -TERM "$gaps_pid" && wait "$gaps_pid" || true
    echo "# $what $side ${nodes}x$ppn: node 1 $(cat "$gaps_out")" >&2
    rm -f -- "$gaps_out"
  fi
  [[ -n $line ]] || { echo "hier.sh: $what $side ${nodes}x$ppn: no result" >&2; exit 1; }
  echo "# $what $side ${nodes}x$ppn: $line" >&2
  awk -v f="$field" '{for (i = 1; i < NF; i++) if ($i == f) print $(i + 1)}' <<<"$line"
}

one_run() {  # side nodes ppn numel -> rank 0's median in microseconds
  local side=$1 nodes=$2 ppn=$3 numel=$4 reps warm
  read -r reps warm < <(reps_for "$numel")
  local args=("$numel" "$reps" "$warm")
  case $side in
    hier | ring) set -- "$exe" "${args[@]}" ;;
    torch) set -- "$py" "$here/torch_allreduce.py" "${args[@]}" ;;
  esac
  run_side "$side" "$nodes" "$ppn" "all_reduce $numel" allreduce: median_us -- "$@"
}

one_step() {  # side nodes ppn -> rank 0's milliseconds per step
  local side=$1 nodes=$2 ppn=$3
  case $side in
    hier | ring) set -- "$step_exe" "$STEPS" 2 ;;
    hier-first) set -- "$step_exe" "$STEPS" 2 16 --first-bucket ;;
    hier-copy) set -- "$step_exe" "$STEPS" 2 16 --separate-grads ;;
    torch-view) set -- "$py" "$here/torch_mlp_step.py" "$STEPS" 2 16 --bucket-view ;;
    compute) set -- "$step_exe" "$STEPS" 2 16 --no-sync ;;
    torch) set -- "$py" "$here/torch_mlp_step.py" "$STEPS" 2 ;;
  esac
  run_side "$side" "$nodes" "$ppn" step mlp-step: ms_per_step -- "$@"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# pair_median "A1 A2 ..." "B1 B2 ...": the median of A_i / B_i, each pair from one alternation
# (the two sides ran next to each other): the machine's drift over a run cancels in each pair.
pair_median() {
  local a=($1) b=($2) i
  ((${#a[@]} && ${#a[@]} == ${#b[@]})) || { echo -; return; }
  for i in "${!a[@]}"; do awk -v x="${a[i]}" -v y="${b[i]}" 'BEGIN{print x / y}'; done | median |
    awk '{printf "%.2f", $1}'
}

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) $(nproc) CPUs; $(uptime)"
declare -A results v
for rate in $RATES; do
  shape "$rate"
  for layout in $LAYOUTS; do
    nodes=${layout%x*} ppn=${layout#*x}
    for numel in $SIZES; do
      for ((rep = 0; rep < REPS; rep++)); do
        sides=($SIDES)
        ((rep % 2)) && sides=($(printf '%s\n' "${sides[@]}" | tac))  # A B C, C B A, ...
        for side in "${sides[@]}"; do
          results[$rate/$layout/$numel/$side]+="$(one_run "$side" "$nodes" "$ppn" "$numel") "
        done
      done
    done
  done
done

echo
echo "| link | nodes x ranks | size | $(for s in $SIDES; do printf '%s ms | ' "$s"; done)bound ms | torch / hier | torch / hier, median of pairs | hier / bound |"
echo "|---|---|---|$(for s in $SIDES; do printf -- '---|'; done)---|---|---|---|"
for rate in $RATES; do
  bits=$(rate_bits "$rate")
  for layout in $LAYOUTS; do
    nodes=${layout%x*}
    for numel in $SIZES; do
      declare -A ms=()
      row="| $rate | $layout | $((numel * 4)) B |"
      for side in $SIDES; do
        ms[$side]=$(tr ' ' '\n' <<<"${results[$rate/$layout/$numel/$side]}" | grep . | median |
          awk '{printf "%.2f", $1 / 1000}')
        row+=" ${ms[$side]} |"
      done
      bound=$(awk -v n="$nodes" -v s=$((numel * 4)) -v b="$bits" 'BEGIN{printf "%.2f", 2*(n-1)/n*s*8/b*1000}')
      ratio() { [[ -n ${ms[$1]:-} && -n ${ms[$2]:-} ]] && awk -v a="${ms[$1]}" -v b="${ms[$2]}" 'BEGIN{printf "%.2f", a/b}' || echo -; }
      hb=$( [[ -n ${ms[hier]:-} ]] && awk -v a="${ms[hier]}" -v b="$bound" 'BEGIN{printf "%.2f", a/b}' || echo -)
      pairs=$(pair_median "${results[$rate/$layout/$numel/torch]:-}" "${results[$rate/$layout/$numel/hier]:-}")
      echo "$row $bound | $(ratio torch hier) | $pairs | $hb |"
      unset ms
    done
  done
done

[[ -n $STEP_LAYOUTS ]] || { echo "# $(date -u +%FT%TZ) $(uptime)"; exit 0; }
step_sides=($STEP_SIDES)
declare -A steps
for rate in $RATES; do
  shape "$rate"
  for layout in $STEP_LAYOUTS; do
    for ((rep = 0; rep < REPS; rep++)); do
      sides=("${step_sides[@]}")
      ((rep % 2)) && sides=($(printf '%s\n' "${sides[@]}" | tac))
      for side in "${sides[@]}"; do
        steps[$rate/$layout/$side]+="$(one_step "$side" "${layout%x*}" "${layout#*x}") "
      done
    done
  done
done
echo
echo "DDP step, 25.2 M-parameter MLP, batch 16 a rank, medians in ms:"
echo
echo "| link | nodes x ranks | $(printf '%s | ' "${step_sides[@]}")torch / hier | torch / hier, median of pairs |"
echo "|---|---|$(printf -- '---|%.0s' "${step_sides[@]}")---|---|"
for rate in $RATES; do
  for layout in $STEP_LAYOUTS; do
    row="| $rate | $layout |"
    for side in "${step_sides[@]}"; do
      v[$side]=$(tr ' ' '\n' <<<"${steps[$rate/$layout/$side]}" | grep . | median)
      row+=" ${v[$side]} |"
    done
    pairs=$(pair_median "${steps[$rate/$layout/torch]:-}" "${steps[$rate/$layout/hier]:-}")
    echo "$row $(awk -v a="${v[torch]:-}" -v b="${v[hier]:-}" 'BEGIN{if (a == "" || b == "") print "-"; else printf "%.2f", a/b}') | $pairs |"
  done
done
echo "# $(date -u +%FT%TZ) $(uptime)"
