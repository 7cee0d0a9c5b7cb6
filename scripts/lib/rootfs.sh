# Sourced by scripts/package.sh and scripts/libtorch2-check.sh: a Debian root filesystem made
# with mmdebstrap once, and reused while what it was made of stays the same.

# ensure_rootfs DIR STAMP SUITE MIRROR MMDEBSTRAP_OPTIONS...: DIR holds SUITE made with those
# options, unless DIR/.dtlaunch-stamp already says STAMP. A half-made tree (an interrupted run)
# is never reused: it is built under DIR.partial and moved into place when complete.
ensure_rootfs() {
  local dir=$1 stamp=$2 suite=$3 mirror=$4
  shift 4
  if [[ -f $dir/.dtlaunch-stamp && $(cat "$dir/.dtlaunch-stamp") == "$stamp" ]]; then
    echo "reusing $dir ($suite)"
    return 0
  fi
  echo "making a $suite root filesystem in $dir (about 2 minutes)"
  rm -rf "$dir" "$dir.partial"
  mkdir -p "$(dirname "$dir")"
  mmdebstrap --mode=root --quiet "$@" "$suite" "$dir.partial" "$mirror" || return 1
  mv "$dir.partial" "$dir"
  echo "$stamp" >"$dir/.dtlaunch-stamp"
}
