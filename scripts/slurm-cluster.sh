#!/usr/bin/env bash
# A real multi-node Slurm cluster on one machine: one network namespace per node.
#
#   slurm-cluster.sh up N     start munged, slurmctld and N slurmd (node1..nodeN); returns when all idle
#   slurm-cluster.sh down     stop and remove exactly what `up` made (no-op when nothing is up)
#   slurm-cluster.sh status   print the nodes, daemons and sinfo; exit 0 only when everything runs
#   slurm-cluster.sh env      print `export` lines for clients: eval "$(slurm-cluster.sh env)"
#   slurm-cluster.sh start-node K   start node K's slurmd again after it died (a node that went down)
#
# Layout: bridge $BRIDGE with $SUBNET.1 in the host namespace (slurmctld, munged, client commands),
# netns nodeK with eth0 = $SUBNET.(10+K) and its own hostname, a private /etc/hosts and slurmd.
# Nothing in /etc is touched: config, state, logs, sockets and pid files live under $BASE.
# Needs root (network namespaces, mounts, a bridge). See docs/slurm-cluster.md.
#
# Settings (environment):
#   SLURM_NETNS_DIR        base directory, deleted by down              [/tmp/slurm-netns]
#   SLURM_NETNS_PREFIX     node names: PREFIX1..N                       [node]
#   SLURM_NETNS_NS_PREFIX  prepended to the node names for the netns and veth names, which are
#                          machine-wide: lets two clusters with the same node names coexist  []
#   SLURM_NETNS_BRIDGE     bridge name                                  [slnbr0]
#   SLURM_NETNS_SUBNET     first three octets of the private /24        [10.77.0]
#   SLURM_NETNS_CTLD_PORT  slurmctld TCP port                           [16817]
#   SLURM_NETNS_CPUS       CPUs each node claims                        [4]
#   SLURM_NETNS_GPUS       fake GPUs per node (0: no GRES)              [4]
#   SLURM_NETNS_CGROUP     fake: private empty cgroupfs for slurmd; host: the host's   [fake]
#   SLURM_NETNS_GRACE      seconds from SIGTERM to SIGKILL in down      [5]
#   SLURM_NETNS_CRED_EXPIRE  credential lifetime = delay before a requeued job restarts [5]
set -euo pipefail

BASE=${SLURM_NETNS_DIR:-/tmp/slurm-netns}
PREFIX=${SLURM_NETNS_PREFIX:-node}
NS_PREFIX=${SLURM_NETNS_NS_PREFIX:-}
BRIDGE=${SLURM_NETNS_BRIDGE:-slnbr0}
SUBNET=${SLURM_NETNS_SUBNET:-10.77.0}
CTLD_PORT=${SLURM_NETNS_CTLD_PORT:-16817}
CPUS=${SLURM_NETNS_CPUS:-4}
GPUS=${SLURM_NETNS_GPUS:-4}
CGROUP=${SLURM_NETNS_CGROUP:-fake}
GRACE=${SLURM_NETNS_GRACE:-5}
CRED_EXPIRE=${SLURM_NETNS_CRED_EXPIRE:-5}

CTLD_NAME=slurmctl # slurmctld's hostname in its own UTS namespace, so the machine's name never matters
CONF=$BASE/etc/slurm.conf
STATE=$BASE/created # one line per thing `up` made, in order; `down` undoes exactly these

die() {
  echo "slurm-cluster: $*" >&2
  exit 1
}
log() { echo "slurm-cluster: $*" >&2; }

check_settings() {
  [[ $BASE == /* && $BASE != / && $BASE != *..* ]] || die "SLURM_NETNS_DIR must be an absolute path other than /: '$BASE'"
  [[ $PREFIX =~ ^[a-z][a-z0-9-]{0,8}$ ]] || die "SLURM_NETNS_PREFIX must be 1-9 lower-case letters/digits: '$PREFIX'"
  [[ $SUBNET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "SLURM_NETNS_SUBNET must be three octets like 10.77.0: '$SUBNET'"
  [[ $NS_PREFIX =~ ^[a-z0-9-]{0,6}$ ]] || die "SLURM_NETNS_NS_PREFIX must be 0-6 lower-case letters/digits/dashes: '$NS_PREFIX'"
  [[ ${#BRIDGE} -le 15 ]] || die "SLURM_NETNS_BRIDGE is longer than 15 characters: '$BRIDGE'"
  local v
  for v in CTLD_PORT CPUS GPUS GRACE CRED_EXPIRE; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "SLURM_NETNS_$v must be a non-negative integer: '${!v}'"
  done
  [[ $CGROUP == fake || $CGROUP == host ]] || die "SLURM_NETNS_CGROUP must be fake or host: '$CGROUP'"
}

# Why the machine cannot run a cluster, or nothing when it can. Tests use this to decide to skip.
unsupported_reason() {
  [[ $(id -u) -eq 0 ]] || {
    echo "not root (needs CAP_SYS_ADMIN and CAP_NET_ADMIN for namespaces, mounts and a bridge)"
    return
  }
  local c
  for c in ip nsenter unshare munged mungekey slurmctld slurmd sinfo scontrol; do
    command -v "$c" >/dev/null || {
      echo "$c is not installed (run scripts/setup.sh)"
      return
    }
  done
  [[ -e /proc/self/ns/net ]] || {
    echo "the kernel has no network namespaces"
    return
  }
  unshare --net --uts --mount true 2>/dev/null || {
    echo "cannot create network/UTS/mount namespaces here (unprivileged container?)"
    return
  }
  return 0
}

node_name() { echo "$PREFIX$1"; }
netns_name() { echo "$NS_PREFIX$PREFIX$1"; }
node_addr() { echo "$SUBNET.$((10 + $1))"; }
record() { echo "$*" >>"$STATE"; }

# The pid in a pid file, only if that process is alive, not a zombie, and still runs `comm`:
# a recycled pid never gets killed.
live_pid() {
  local file=$1 comm=$2 pid state
  [[ -r $file ]] || return 1
  pid=$(tr -dc 0-9 <"$file")
  [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ $state != Z ]] || return 1
  echo "$pid"
}

alive() { [[ -d /proc/$1 ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

wait_for() { # wait_for SECONDS COMMAND...: poll every 50 ms
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.05
  done
}

write_config() {
  local n=$1 k
  mkdir -p "$BASE"/{etc,ctld/state,log,tmp,dev}
  {
    echo "127.0.0.1 localhost"
    echo "$SUBNET.1 $CTLD_NAME $(hostname -s 2>/dev/null || hostname)"
    for ((k = 1; k <= n; k++)); do echo "$(node_addr "$k") $(node_name "$k")"; done
  } >"$BASE/etc/hosts"

  # srun listens on a port of SrunPortRange for each step. Inside the kernel's ephemeral range
  # (32768-60999 by default) those ports are also handed to outgoing connections, and after the
  # thousands of short connections of the tests before it (Gloo ranks, stores) every one of them
  # could be taken or in TIME_WAIT: seen at the end of a whole suite, "sock_bind_listen_range:
  # all ports in range (60001, 60999) exhausted". So the range sits just outside the ephemeral
  # one, as dtlaunch's own MASTER_PORT range does (lib/launch/port.hpp).
  local eph_lo eph_hi srun_ports
  read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range
  if ((eph_hi + 1000 <= 65535)); then
    srun_ports="$((eph_hi + 1))-$((eph_hi + 1000))"
  else
    srun_ports="$((eph_lo - 1000))-$((eph_lo - 1))"
  fi
  local gres="" nodes="${PREFIX}[1-$n]"
  ((n > 1)) || nodes="${PREFIX}1"
  ((GPUS == 0)) || gres="Gres=gpu:$GPUS"
  cat >"$CONF" <<EOF
# Generated by scripts/slurm-cluster.sh: a throw-away test cluster. No cgroups, systemd or database.
ClusterName=dtlaunch
SlurmctldHost=$CTLD_NAME($SUBNET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
SrunPortRange=$srun_ports
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket.2,cred_expire=$CRED_EXPIRE
StateSaveLocation=$BASE/ctld/state
SlurmctldPidFile=$BASE/ctld/slurmctld.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdSpoolDir=$BASE/nodes/%n/spool
SlurmdPidFile=$BASE/nodes/%n/slurmd.pid
SlurmdLogFile=$BASE/log/slurmd.%n.log
TmpFS=$BASE/tmp
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=1
MailProg=/bin/true
KillWait=2
MinJobAge=60
InactiveLimit=0
GresTypes=gpu
EOF
  for ((k = 1; k <= n; k++)); do
    echo "NodeName=$(node_name "$k") NodeAddr=$(node_addr "$k") NodeHostname=$(node_name "$k") CPUs=$CPUS $gres State=UNKNOWN"
  done >>"$CONF"
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >>"$CONF"

  # Fake GPUs: Slurm wants character devices and takes the index from the trailing digits.
  echo "AutoDetect=off" >"$BASE/etc/gres.conf"
  if ((GPUS > 0)); then
    for ((k = 0; k < GPUS; k++)); do ln -s /dev/null "$BASE/dev/nvidia$k"; done
    echo "NodeName=$nodes Name=gpu File=$BASE/dev/nvidia[0-$((GPUS - 1))]" >>"$BASE/etc/gres.conf"
  fi
  # An empty cgroup.conf next to slurm.conf, so that a host /etc/slurm/cgroup.conf is never read.
  echo "# empty on purpose: defaults, never a host /etc/slurm/cgroup.conf" >"$BASE/etc/cgroup.conf"
}

start_network() {
  local n=$1 k name veth
  ip link add "$BRIDGE" type bridge
  record "link $BRIDGE"
  ip addr add "$SUBNET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for ((k = 1; k <= n; k++)); do
    name=$(netns_name "$k")
    veth="vh-$name"
    [[ ${#veth} -le 15 ]] || die "interface name $veth is longer than 15 characters"
    ip netns add "$name"
    record "netns $name"
    ip link add "$veth" type veth peer name eth0 netns "$name"
    record "link $veth"
    ip link set "$veth" master "$BRIDGE" up
    ip -n "$name" addr add "$(node_addr "$k")/24" dev eth0
    ip -n "$name" link set eth0 up
    ip -n "$name" link set lo up
  done
}

start_munge() {
  mkdir -p "$BASE/munge"
  chmod 0755 "$BASE" "$BASE/munge" # munged refuses sockets in dirs others cannot reach
  mungekey --create --keyfile="$BASE/munge/munge.key" >/dev/null
  chmod 0400 "$BASE/munge/munge.key"
  record "pid munged $BASE/munge/munged.pid"
  munged --socket="$BASE/munge/munge.socket.2" --key-file="$BASE/munge/munge.key" \
    --pid-file="$BASE/munge/munged.pid" --log-file="$BASE/log/munged.log" \
    --seed-file="$BASE/munge/munged.seed"
  wait_for 5 live_pid "$BASE/munge/munged.pid" munged >/dev/null || die "munged did not start"
}

start_slurmctld() {
  record "pid slurmctld $BASE/ctld/slurmctld.pid"
  # Own UTS namespace with hostname slurmctl, so SlurmctldHost matches whatever the machine is called.
  unshare --uts -- sh -c "hostname $CTLD_NAME && exec slurmctld -f '$CONF'"
  wait_for 10 live_pid "$BASE/ctld/slurmctld.pid" slurmctld >/dev/null || die "slurmctld did not start"
}

start_slurmd() {
  local k=$1 name ns cg=""
  name=$(node_name "$k")
  ns=$(netns_name "$k")
  mkdir -p "$BASE/nodes/$name/spool"
  grep -qxF "pid slurmd $BASE/nodes/$name/slurmd.pid" "$STATE" || record "pid slurmd $BASE/nodes/$name/slurmd.pid"
  if [[ $CGROUP == fake ]]; then
    # slurmd 22.05 always loads a cgroup plugin. Give it an empty named v1 hierarchy in its own
    # mount namespace so it never touches the host's cgroups (gotcha 2 of the recipe).
    cg="mount -t tmpfs -o mode=0755 slurmnetns /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&"
    cg+=" mount -t cgroup -o none,name=slurmnetns slurmnetns /sys/fs/cgroup/systemd &&"
  fi
  # nsenter, not `ip netns exec`: the latter remounts /sys and hides /sys/fs/cgroup from slurmd.
  nsenter --net="/run/netns/$ns" -- unshare --uts --mount --propagation slave -- sh -c \
    "mount --bind '$BASE/etc/hosts' /etc/hosts && $cg hostname $name && exec slurmd -f '$CONF' -N $name"
}

all_idle() {
  local n=$1 idle
  idle=$(SLURM_CONF=$CONF timeout 5 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l) || return 1
  ((idle == n))
}

cmd_up() {
  local n=${1:-}
  [[ $n =~ ^[1-9][0-9]*$ && $n -le 200 ]] || die "usage: slurm-cluster.sh up N (1 <= N <= 200), got '${n}'"
  local why
  why=$(unsupported_reason)
  [[ -z $why ]] || die "this machine cannot run the cluster: $why"
  [[ ! -e $STATE ]] || die "a cluster is already up in $BASE (run down first)"
  ip link show "$BRIDGE" >/dev/null 2>&1 && die "bridge $BRIDGE already exists"
  local k
  for ((k = 1; k <= n; k++)); do
    [[ ! -e /run/netns/$(netns_name "$k") ]] || die "network namespace $(netns_name "$k") already exists"
  done
  [[ -z $(ip -4 route show "$SUBNET.0/24") ]] || die "$SUBNET.0/24 is already routed on this machine"
  [[ ! -e $BASE ]] || die "$BASE exists but holds no cluster state; remove it or pick SLURM_NETNS_DIR"

  local t0=$EPOCHREALTIME
  mkdir -p "$BASE"
  record "base $BASE"
  record "nodes $n"
  record "gpus $GPUS"
  record "prefix $PREFIX"
  record "subnet $SUBNET"
  trap 'log "up failed; logs follow"; tail -n 20 "$BASE"/log/*.log >&2 2>/dev/null || true; cmd_down' EXIT
  write_config "$n"
  start_network "$n"
  start_munge
  start_slurmctld
  for ((k = 1; k <= n; k++)); do start_slurmd "$k"; done
  wait_for 20 all_idle "$n" || die "nodes did not become idle within 20 s"
  trap - EXIT
  log "up: $n nodes idle in $(awk "BEGIN{printf \"%.2f\", $EPOCHREALTIME - $t0}") s; eval \"\$($0 env)\" to use it"
}

# TERM every process (pids), wait up to GRACE seconds, then KILL what is left.
terminate() {
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local deadline=$((SECONDS + GRACE)) p left
  while :; do
    left=()
    for p in "$@"; do alive "$p" && left+=("$p"); done
    ((${#left[@]} > 0)) || return 0
    ((SECONDS < deadline)) || break
    sleep 0.05
  done
  log "SIGKILL to ${left[*]} after ${GRACE} s"
  kill -KILL "${left[@]}" 2>/dev/null || true
  for p in "${left[@]}"; do wait_for 5 eval "! alive $p" || log "pid $p did not die"; done
}

cmd_down() {
  trap - EXIT
  set +e
  if [[ ! -f $STATE ]]; then
    log "down: nothing to tear down in $BASE"
    return 0
  fi
  local kind a b pids=() p
  # Cancel jobs first so slurmd reaps its steps while it still runs.
  if p=$(live_pid "$BASE/ctld/slurmctld.pid" slurmctld); then
    local jobs
    jobs=$(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null)
    if [[ -n $jobs ]]; then
      # shellcheck disable=SC2086 # one argument per job id
      SLURM_CONF=$CONF timeout 5 scancel $jobs 2>/dev/null
      wait_for "$GRACE" eval "[[ -z \$(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]]"
    fi
  fi
  # Daemons together: each takes seconds to exit after SIGTERM.
  while read -r kind a b; do
    [[ $kind == pid ]] && p=$(live_pid "$b" "$a") && pids+=("$p")
  done <"$STATE"
  terminate "${pids[@]}"
  # slurmstepd and task processes left inside our node namespaces (and only those).
  pids=()
  while read -r kind a b; do
    if [[ $kind == netns && -e /run/netns/$a ]]; then
      for p in $(ip netns pids "$a" 2>/dev/null); do pids+=("$p"); done
    fi
  done <"$STATE"
  terminate "${pids[@]}"
  # Undo in reverse order of creation.
  local lines
  mapfile -t lines < <(tac "$STATE")
  for line in "${lines[@]}"; do
    read -r kind a b <<<"$line"
    case $kind in
    netns) [[ -e /run/netns/$a ]] && ip netns del "$a" ;;
    link) ip link show "$a" >/dev/null 2>&1 && ip link del "$a" ;;
    esac
  done
  # The base dir was made by up (its first record), so removing it removes nothing else.
  if [[ $(head -n1 "$STATE") == "base $BASE" ]]; then rm -rf -- "$BASE"; fi
  log "down: done"
  return 0
}

cmd_status() {
  [[ -f $STATE ]] || {
    echo "no cluster in $BASE"
    return 1
  }
  local ok=0 kind a b p
  while read -r kind a b; do
    case $kind in
    pid) if p=$(live_pid "$b" "$a"); then echo "$a pid $p ($b)"; else
      echo "$a NOT RUNNING ($b)"
      ok=1
    fi ;;
    netns) if [[ -e /run/netns/$a ]]; then echo "netns $a"; else
      echo "netns $a MISSING"
      ok=1
    fi ;;
    esac
  done <"$STATE"
  SLURM_CONF=$CONF timeout 5 sinfo -N -o '%N %T %c %G' || ok=1
  return $ok
}

cmd_start_node() {
  local k=${1:-} n
  [[ -f $STATE ]] || die "no cluster in $BASE (run up N first)"
  n=$(awk '$1=="nodes"{print $2}' "$STATE")
  [[ $k =~ ^[1-9][0-9]*$ && $k -le $n ]] || die "usage: slurm-cluster.sh start-node K (1 <= K <= $n), got '$k'"
  local pidfile=$BASE/nodes/$(node_name "$k")/slurmd.pid
  ! live_pid "$pidfile" slurmd >/dev/null || die "the slurmd of $(node_name "$k") already runs"
  start_slurmd "$k"
  wait_for 10 live_pid "$pidfile" slurmd >/dev/null || die "the slurmd of $(node_name "$k") did not start"
}

cmd_env() {
  [[ -f $STATE ]] || die "no cluster in $BASE (run up N first)"
  echo "export SLURM_CONF=$CONF"
  echo "export SLURM_NETNS_DIR=$BASE"
  echo "export SLURM_NETNS_PREFIX=$(awk '$1=="prefix"{print $2}' "$STATE")"
  echo "export SLURM_NETNS_SUBNET=$(awk '$1=="subnet"{print $2}' "$STATE")"
  echo "export SLURM_NETNS_NODES=$(awk '$1=="nodes"{print $2}' "$STATE")"
  echo "export SLURM_NETNS_GPUS=$(awk '$1=="gpus"{print $2}' "$STATE")"
}

check_settings
case ${1:-} in
up) cmd_up "${2:-}" ;;
down) cmd_down ;;
status) cmd_status ;;
env) cmd_env ;;
start-node) cmd_start_node "${2:-}" ;;
check) # exit 0 when this machine can run the cluster, else print why and exit 1
  why=$(unsupported_reason)
  [[ -z $why ]] || {
    echo "$why"
    exit 1
  }
  ;;
*) die "usage: slurm-cluster.sh up N | down | status | env | check | start-node K" ;;
esac
