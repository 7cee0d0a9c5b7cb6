#!/usr/bin/env bash
# The release files of scripts/package.sh, installed and run as a user of a cluster would: in
# fresh root filesystems of minimal Debian bullseye (glibc 2.31, the oldest Debian the mirror
# serves; the binary's floor by its symbols is 2.28, which scripts/package.sh checks) and
# trixie, made with mmdebstrap --variant=minbase, as an unprivileged user (uid 65534) with a
# throwaway HOME, with nothing installed but what minbase brings (python3-venv for the wheel):
#   tarball-bullseye, tarball-trixie   unpacked anywhere: --version, hostnames, a Slurm
#                                      --dry-run of a two-node step, local mode with 2 workers,
#                                      --cpu-bind numa --dry-run (no hwloc there)
#   wheel-trixie                       pip install --no-index into a fresh venv, then
#                                      `dtlaunch hostlist n1 n2 n3` from the venv's PATH
#   deb-trixie                         dpkg -i (root), then /usr/bin/dtlaunch --version (user)
#   golden                             the packaged binary gives the golden --dry-run outputs
#   source-build                       the DDP runtime built from source into $HOME/.local as
#                                      uid 65534 in the LibTorch 2.x chroot of
#                                      scripts/libtorch2-check.sh (LibTorch installed by root
#                                      as a site would), a user project built against it with
#                                      find_package(dtlaunch), run as 2 ranks by the tarball's
#                                      dtlaunch in local mode
# Each root filesystem is made once, kept as a tar, and unpacked anew for every case, so no case
# sees what another installed.
#
# Usage: tests/package/check.sh [--prepare]    (--prepare: only make the root filesystems)
# Environment: MIRROR, DTLAUNCH_PACKAGE_DIR (default build-package), DIST (default dist),
#   DTLAUNCH_LIBTORCH2_DIR (default build-libtorch2-trixie): as scripts/package.sh and
#   scripts/libtorch2-check.sh use them. Needs root, and scripts/package.sh run before.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mirror=${MIRROR:-http://deb.debian.org/debian}
work=${DTLAUNCH_PACKAGE_DIR:-$root/build-package}
dist=${DIST:-$root/dist}
libtorch2=${DTLAUNCH_LIBTORCH2_DIR:-$root/build-libtorch2-trixie}
version=$(sed -n 's/^project(dtlaunch VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")

if ((EUID != 0)); then
  echo "package check: needs root (mmdebstrap, chroot)" >&2
  exit 2
fi

# rootfs_tar NAME SUITE [PACKAGES]: $work/NAME.tar, a minbase SUITE with PACKAGES, made once.
rootfs_tar() {
  local name=$1 suite=$2 include=${3:-} tar=$work/$1.tar
  local stamp="$suite minbase $include"
  if [[ -f $tar && -f $tar.stamp && $(cat "$tar.stamp") == "$stamp" ]]; then
    return 0
  fi
  rm -rf "$tar" "$tar.stamp"
  mkdir -p "$work"
  # mmdebstrap writes a tar when the target's name ends in .tar.
  mmdebstrap --mode=root --variant=minbase ${include:+--include="$include"} --quiet \
    "$suite" "$work/$1.partial.tar" "$mirror" || return 1
  mv "$work/$1.partial.tar" "$tar"
  echo "$stamp" >"$tar.stamp"
}

prepare() {
  rootfs_tar minbase-bullseye bullseye &&
    rootfs_tar minbase-trixie trixie &&
    rootfs_tar venv-trixie trixie python3-venv
}

if [[ ${1:-} == --prepare ]]; then
  prepare
  exit
fi

rows=()
passed=0
failed=0
row() { # NAME RESULT NOTE
  rows+=("$(printf '%-18s %-5s %s' "$1" "$2" "$3")")
  if [[ $2 == ok ]]; then ((passed++)); else ((failed++)); fi
}

# in_root ROOTFS USER COMMAND: sh -c COMMAND in ROOTFS as USER (root or nobody), with /dev,
# /proc, /sys and dist/ (read-only, at /dist) mounted in a private mount namespace.
in_root() {
  local rootfs=$1 user=$2 cmd=$3 spec=() path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  [[ $user == nobody ]] && spec=(--userspec=65534:65534) path=/usr/local/bin:/usr/bin:/bin
  mkdir -p "$rootfs/dist"
  unshare --mount --propagation private bash -c "mount --rbind /dev '$rootfs/dev' &&
    mount -t proc proc '$rootfs/proc' && mount --rbind /sys '$rootfs/sys' &&
    mount --bind -o ro '$dist' '$rootfs/dist' &&
    exec chroot ${spec[*]} '$rootfs' env -i PATH=$path HOME=/tmp/home \
      LANG=C.UTF-8 sh -c \"\$0\"" "$cmd"
}

# fresh NAME: a new tree from $work/NAME.tar, echoes its path.
fresh() {
  local dir=$work/try-$1
  rm -rf "$dir" && mkdir -p "$dir" && tar -xf "$work/$1.tar" -C "$dir" &&
    mkdir -p "$dir/tmp/home" && chown 65534:65534 "$dir/tmp/home" && echo "$dir"
}

# The tarball's cases, as one user's shell session; `fail WHY` ends it naming the step.
tarball_script='set -u
fail() { echo "FAIL: $*"; exit 1; }
cd "$HOME" && tar -xzf /dist/dtlaunch-@V@-linux-x86_64.tar.gz || fail "unpack"
d=$HOME/dtlaunch-@V@-linux-x86_64/bin/dtlaunch
out=$("$d" --version) || fail "--version exited $?: $out"
case $out in *@V@*) ;; *) fail "--version said: $out" ;; esac
out=$("$d" hostnames "n[1-3]" | tr "\n" " ") || fail "hostnames exited $?"
[ "$out" = "n1 n2 n3 " ] || fail "hostnames said: $out"
out=$(env SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=3 SLURM_LOCALID=1 SLURM_NODEID=1 \
  SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST="pn[1-2]" \
  SLURM_STEP_TASKS_PER_NODE="2(x2)" SLURM_NTASKS=4 SLURM_DISTRIBUTION=block \
  "$d" --dry-run true 2>&1) || fail "Slurm --dry-run exited $?: $out"
q=$(printf "\047")
for want in "RANK=${q}3${q}" "LOCAL_RANK=${q}1${q}" "WORLD_SIZE=${q}4${q}" "NODE_RANK=${q}1${q}" \
  "MASTER_ADDR=${q}pn1${q}" "MASTER_PORT=${q}[0-9]*${q}"; do
  echo "$out" | grep -qx "export $want" || fail "Slurm --dry-run has no export $want: $out"
done
out=$("$d" --nproc-per-node 2 sh -c "echo rank=\$RANK of \$WORLD_SIZE" 2>&1) ||
  fail "local mode exited $?: $out"
for want in "[rank 0] rank=0 of 2" "[rank 1] rank=1 of 2"; do
  echo "$out" | grep -qxF "$want" || fail "local mode printed no \"$want\": $out"
done
out=$("$d" --nproc-per-node 2 --cpu-bind numa --dry-run true 2>&1) ||
  fail "--cpu-bind numa --dry-run exited $?: $out"
echo "$out" | grep -q "^# cpus [0-9]" || fail "--cpu-bind numa --dry-run shows no CPUs: $out"
echo "PASS: $($d --version), hostnames, Slurm dry-run, local mode, --cpu-bind numa"'
tarball_script=${tarball_script//@V@/$version}

wheel_script='set -e
python3 -m venv "$HOME/venv"
"$HOME/venv/bin/pip" install --no-index --quiet /dist/dtlaunch-*.whl
out=$(PATH="$HOME/venv/bin:$PATH" dtlaunch hostlist n1 n2 n3)
[ "$out" = "n[1-3]" ] || { echo "FAIL: dtlaunch hostlist said: $out"; exit 1; }
echo "PASS: pip install --no-index; $(command -v "$HOME/venv/bin/dtlaunch") hostlist: $out"'

deb_script='out=$(/usr/bin/dtlaunch --version) || { echo "FAIL: /usr/bin/dtlaunch --version: $out"; exit 1; }
ls /usr/share/dtlaunch/sbatch/*.sbatch /usr/share/doc/dtlaunch/README.md >/dev/null || exit 1
echo "PASS: dpkg -i; $out"'

# chroot_case NAME ROOTFS ROOT_COMMAND USER_COMMAND: in a fresh tree of ROOTFS (a tar of
# rootfs_tar), ROOT_COMMAND as root when there is one, then USER_COMMAND as uid 65534. The last
# line it prints is the row's note; on failure, its first line that starts with FAIL.
chroot_case() {
  local name=$1 dir log=$work/$1.log
  dir=$(fresh "$2") || { row "$name" FAIL "could not unpack the root filesystem"; return; }
  if { [[ -z $3 ]] || in_root "$dir" root "$3"; } >"$log" 2>&1 &&
    in_root "$dir" nobody "$4" >>"$log" 2>&1; then
    row "$name" ok "$(tail -n 1 "$log" | cut -c1-100)"
  else
    row "$name" FAIL "$({ grep -m 1 '^FAIL' "$log" || tail -n 1 "$log"; } | cut -c1-200)"
    cat "$log"
  fi
  rm -rf "$dir"
}

golden_case() {
  local log=$work/golden.log tree
  tree=$(mktemp -d)
  tar -xzf "$dist/dtlaunch-$version-linux-x86_64.tar.gz" -C "$tree"
  if bash "$root/tests/golden/check.sh" "$tree/dtlaunch-$version-linux-x86_64/bin/dtlaunch" \
    >"$log" 2>&1; then
    row golden ok "the packaged binary prints every golden --dry-run output"
  else
    row golden FAIL "$(tail -n 1 "$log" | cut -c1-200)"
    cat "$log"
  fi
  rm -rf "$tree"
}

source_build_case() {
  local rootfs=$libtorch2/rootfs log=$work/source-build.log
  if [[ ! -f $rootfs/.dtlaunch-stamp ]]; then
    row source-build FAIL "no LibTorch 2.x root filesystem: run scripts/libtorch2-check.sh --prepare"
    return
  fi
  # The user's copy of the sources and of the release tarball, owned by the user.
  local home=$rootfs/tmp/home
  rm -rf "$home" && mkdir -p "$home/src"
  tar -C "$root" --exclude='./build*' --exclude=./dist --exclude=./.git -cf - . |
    tar -C "$home/src" -xf -
  cp "$dist/dtlaunch-$version-linux-x86_64.tar.gz" "$home/"
  chown -R 65534:65534 "$home"
  if in_root "$rootfs" nobody "sh /tmp/home/src/tests/package/source_build.sh '$version'" >"$log" 2>&1; then
    row source-build ok "$(tail -n 1 "$log" | cut -c7-130)"
  else
    row source-build FAIL "$(grep -m 1 FAIL "$log" | cut -c1-200)"
    tail -n 60 "$log"
  fi
  rm -rf "$home"
}

t0=$SECONDS
if ! prepare >"$work/prepare-check.log" 2>&1; then
  cat "$work/prepare-check.log"
  echo "FAILED: the minbase root filesystems could not be made"
  exit 1
fi
for f in "dtlaunch-$version-linux-x86_64.tar.gz" "dtlaunch_${version}_amd64.deb"; do
  [[ -f $dist/$f ]] || { echo "FAILED: no $dist/$f: run scripts/package.sh first"; exit 1; }
done
chroot_case tarball-bullseye minbase-bullseye "" "$tarball_script"
chroot_case tarball-trixie minbase-trixie "" "$tarball_script"
chroot_case wheel-trixie venv-trixie "" "$wheel_script"
chroot_case deb-trixie minbase-trixie "dpkg -i /dist/dtlaunch_${version}_amd64.deb" "$deb_script"
golden_case
[[ ${SKIP_SOURCE_BUILD:-0} == 1 ]] || source_build_case

echo
echo "dtlaunch's release files, installed as a user would ($((SECONDS - t0)) s; logs in $work)"
for r in "${rows[@]}"; do echo "$r"; done
echo "package: $passed passed, $failed failed"
((failed == 0))
