#!/usr/bin/env bash
# Installs everything the build and every test need on a fresh Debian bookworm machine.
# Idempotent: packages already present are skipped, so a second run costs about a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libcli11-dev catch2 libbenchmark-dev
  clang libclang-rt-14-dev            # libFuzzer and the sanitizer runtimes
  libtorch-dev libgloo-dev python3-torch
  slurm-wlm slurm-client munge        # slurmctld, slurmd, srun, sbatch, scontrol
  iproute2 util-linux procps psmisc   # ip netns, nsenter/unshare, ps/pgrep
  dataset-fashion-mnist zlib1g-dev   # the example reads the gzipped dataset
  hyperfine
  mmdebstrap                          # the LibTorch 2.x check's chroot (scripts/libtorch2-check.sh)
  chromium                            # renders `dtlaunch trace --html` in a test
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # Daemons must not start on install: the test cluster starts its own, in namespaces.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    created_policy=1
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  ((created_policy)) && $SUDO rm -f "$policy"
fi
echo "setup: all ${#packages[@]} packages present"
