#!/usr/bin/env bash
# ctest fixture for the slurm label: `cluster_fixture.sh up REPO N` / `cluster_fixture.sh down REPO`.
# The cluster's base dir comes from SLURM_NETNS_DIR (set per build dir by CMake), so a stale
# cluster from an interrupted run of this build is cleaned up and nobody else's is touched.
# Exit 77 (skip) only where the machine cannot run the cluster and CI is not true.
set -uo pipefail
action=${1:?up|down}
repo=${2:?repo root}
cluster=$repo/scripts/slurm-cluster.sh
: "${SLURM_NETNS_DIR:?SLURM_NETNS_DIR must name the cluster dir of this build}"

if ! why=$("$cluster" check); then
  if [[ ${CI:-} == true ]]; then
    echo "FAIL: CI=true but this machine cannot run the Slurm test cluster: $why"
    exit 1
  fi
  echo "SKIP: this machine cannot run the Slurm test cluster: $why"
  exit 77
fi

case $action in
up)
  nodes=${3:?node count}
  "$cluster" down # leftovers of an interrupted run of this same build, if any
  "$cluster" up "$nodes" || exit 1
  "$cluster" status
  ;;
down)
  # The scenarios wait for idle nodes at their start (slurmtest.py); the last one's leftovers are
  # checked here, where the wait holds only the cluster's lock: a node still allocated 120 s
  # after the last scenario is a job or step that never ended.
  leaks=0
  if cluster_env=$("$cluster" env); then
    eval "$cluster_env"
    deadline=$((SECONDS + 120))
    while :; do
      listing=$(timeout 10 sinfo -h -N -o '%N %t') || listing="sinfo failed (exit $?)"
      busy=$(grep -v ' idle$' <<<"$listing")
      [[ -z $busy ]] && break
      if ((SECONDS >= deadline)); then
        echo "LEAK: nodes not idle 120 s after the last scenario: $busy"
        leaks=1
        break
      fi
      sleep 0.5
    done
  fi
  # Names of what up made, read before down deletes the record of them.
  mapfile -t netns < <(awk '$1=="netns"{print $2}' "$SLURM_NETNS_DIR/created" 2>/dev/null)
  mapfile -t links < <(awk '$1=="link"{print $2}' "$SLURM_NETNS_DIR/created" 2>/dev/null)
  start=$EPOCHREALTIME
  "$cluster" down || exit 1
  awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "down took %.1f s\n", b - a }'
  for n in "${netns[@]}"; do [[ ! -e /run/netns/$n ]] || { echo "LEAK: netns $n"; leaks=1; }; done
  for l in "${links[@]}"; do ! ip link show "$l" >/dev/null 2>&1 || { echo "LEAK: link $l"; leaks=1; }; done
  [[ ! -e $SLURM_NETNS_DIR ]] || { echo "LEAK: $SLURM_NETNS_DIR"; leaks=1; }
  # Daemons name the config under the base dir on their command line; nothing may still run it.
  if pgrep -af -- "$SLURM_NETNS_DIR/" >/dev/null; then
    echo "LEAK: processes still refer to $SLURM_NETNS_DIR:"
    pgrep -af -- "$SLURM_NETNS_DIR/"
    leaks=1
  fi
  if grep -q -- "$SLURM_NETNS_DIR" /proc/mounts; then
    echo "LEAK: mounts under $SLURM_NETNS_DIR"
    leaks=1
  fi
  exit $leaks
  ;;
*)
  echo "usage: cluster_fixture.sh up REPO N | down REPO" >&2
  exit 2
  ;;
esac
