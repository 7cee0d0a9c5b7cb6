#!/usr/bin/env bash
# The release files, from a clean checkout, into dist/ (docs/install.md):
#   dist/dtlaunch-VERSION-linux-x86_64.tar.gz   bin/dtlaunch, the sbatch templates, the docs, INSTALL
#   dist/dtlaunch-VERSION-py3-none-manylinux_2_28_x86_64.whl   the same dtlaunch on a venv's PATH
#   dist/dtlaunch_VERSION_amd64.deb              /usr/bin/dtlaunch, the templates, the docs
# The launcher is built in a Debian bullseye root filesystem (glibc 2.31, g++ 10): every glibc
# symbol it binds is then of version 2.28 or older (the one newer one, pow, is pinned: see
# lib/doctor/network.cpp), so that it starts on any Linux x86-64 with glibc 2.28 or newer: RHEL/
# Rocky/Alma 8+, Debian 10+, Ubuntu 20.04+, SLES 15. libstdc++ and libgcc are linked in; its
# only shared libraries are glibc's own. Each file is checked before it is packed: the libraries
# it needs, its newest GLIBC_ symbol version and its size; a file that fails is not packed.
#
# Usage: scripts/package.sh [--prepare | --build]
#   --prepare   only make (or reuse) the bullseye root filesystem (scripts/test.sh runs this in
#               the background while its own build compiles); --build: also build the launcher
#               into build-package/build; without a flag: build, check and pack into dist/.
# Environment: MIRROR (default http://deb.debian.org/debian), JOBS (default: all cores),
#   DTLAUNCH_PACKAGE_DIR (default build-package in the repository root), DIST (default dist).
# Needs root (mmdebstrap --mode=root, a private mount namespace, chroot), Debian's mirror and,
# on the host, CLI11's headers (libcli11-dev: bullseye has no package of them), python3,
# dpkg-deb, readelf and objdump.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stage=all
case ${1:-} in
  --prepare | --build)
    stage=${1#--}
    shift
    ;;
esac
if (($#)); then
  echo "package: unexpected argument '$1' (usage: scripts/package.sh [--prepare | --build])" >&2
  exit 2
fi
mirror=${MIRROR:-http://deb.debian.org/debian}
jobs=${JOBS:-$(nproc)}
work=${DTLAUNCH_PACKAGE_DIR:-$root/build-package}
dist=${DIST:-$root/dist}
rootfs=$work/rootfs-bullseye
build=$work/build
glibc_floor=2.28
size_limit=$((12 * 1024 * 1024))
# What bin/dtlaunch may need: glibc's own libraries, nothing else.
allowed_needed='^(libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|ld-linux-x86-64\.so\.2)$'

packages=(g++ cmake ninja-build make)
stamp="bullseye ${packages[*]}"
version=$(sed -n 's/^project(dtlaunch VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
[[ -n $version ]] || {
  echo "package: no 'project(dtlaunch VERSION x.y.z' line in CMakeLists.txt" >&2
  exit 1
}

if ((EUID != 0)); then
  echo "package: needs root (mmdebstrap, mount namespaces, chroot)" >&2
  exit 2
fi
for tool in mmdebstrap unshare chroot dpkg-deb readelf objdump python3; do
  command -v "$tool" >/dev/null || {
    echo "package: $tool is missing (scripts/setup.sh installs it)" >&2
    exit 2
  }
done

# in_chroot COMMAND: bash -c COMMAND in the bullseye root filesystem, the repository mounted at
# its own path, in a private mount namespace that ends with the command.
in_chroot() {
  mkdir -p "$rootfs$root"
  unshare --mount --propagation private bash -c "mount --rbind /dev '$rootfs/dev' &&
    mount -t proc proc '$rootfs/proc' && mount --bind '$root' '$rootfs$root' &&
    exec chroot '$rootfs' env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    TERM=dumb bash -c \"\$0\"" "$1"
}

# CLI11 is header-only and bullseye has no package of it: the host's headers and CMake files.
copy_cli11() {
  local files
  files=$(dpkg-query -L libcli11-dev 2>/dev/null | grep -E '^/usr/(include|share|lib)/' || true)
  if [[ -z $files ]]; then
    echo "package: CLI11's headers are not installed on this machine (libcli11-dev)" >&2
    return 1
  fi
  local f
  while IFS= read -r f; do
    [[ -f $f ]] || continue
    mkdir -p "$rootfs$(dirname "$f")"
    cp "$f" "$rootfs$f"
  done <<<"$files"
}

# shellcheck source=lib/rootfs.sh
source "$root/scripts/lib/rootfs.sh"

prepare() {
  local list
  list=$(IFS=,; echo "${packages[*]}")
  echo -n "package: "
  ensure_rootfs "$rootfs" "$stamp" bullseye "$mirror" --variant=apt --include="$list"
}

build_launcher() {
  copy_cli11
  # Release, warnings as errors, nothing but the launcher: no LibTorch, no tests.
  in_chroot "set -e; cmake -S '$root' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDTLAUNCH_BUILD_DDP=OFF -DDTLAUNCH_BUILD_TESTS=OFF -DDTLAUNCH_BUILD_BENCHMARKS=OFF \
    -DDTLAUNCH_WARNINGS_AS_ERRORS=ON >/dev/null
    cmake --build '$build' -j$jobs --target dtlaunch
    strip -o '$build/dtlaunch.stripped' '$build/apps/dtlaunch/dtlaunch'
    echo \"package: built with \$(g++ -dumpfullversion) against glibc \$(ldd --version | head -n 1 | grep -o '[0-9.]*\$')\""
}

# check_binary FILE: the libraries it needs, its newest glibc symbol version, its size.
check_binary() {
  local file=$1 bad=0 needed newest size
  needed=$(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  while IFS= read -r lib; do
    [[ -z $lib || $lib =~ $allowed_needed ]] && continue
    echo "package: $file needs $lib, which is not glibc's: it must be linked in" >&2
    bad=1
  done <<<"$needed"
  newest=$(objdump -T "$file" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
  if [[ $(printf '%s\n%s\n' "$newest" "$glibc_floor" | sort -V | tail -n 1) != "$glibc_floor" ]]; then
    echo "package: $file needs GLIBC_$newest, above the floor $glibc_floor:" \
      "$(objdump -T "$file" | grep -F "GLIBC_$newest" | awk '{print $NF}' | head -n 3 | xargs)" >&2
    bad=1
  fi
  size=$(stat -c %s "$file")
  if ((size > size_limit)); then
    echo "package: $file is $size bytes, over the 12 MiB limit" >&2
    bad=1
  fi
  echo "package: bin/dtlaunch needs $(echo $needed | tr ' ' ','), newest symbol GLIBC_$newest" \
    "(floor $glibc_floor), $((size / 1024)) KiB"
  return $bad
}

prepare
[[ $stage == prepare ]] && exit 0
build_launcher
[[ $stage == build ]] && exit 0

binary=$build/dtlaunch.stripped
check_binary "$binary"
built_version=$("$binary" --version)
[[ $built_version == *"$version"* ]] || {
  echo "package: '$binary --version' says '$built_version', not $version" >&2
  exit 1
}

stage_dir=$work/stage
rm -rf "$stage_dir" && mkdir -p "$stage_dir" "$dist"
name=dtlaunch-$version-linux-x86_64
tree=$stage_dir/$name
install -D -m 755 "$binary" "$tree/bin/dtlaunch"
install -d "$tree/share/dtlaunch/sbatch" "$tree/share/doc/dtlaunch"
install -m 644 "$root"/scripts/sbatch/*.sbatch "$tree/share/dtlaunch/sbatch/"
install -m 644 "$root"/docs/*.md "$root/README.md" "$tree/share/doc/dtlaunch/"
sed "s/@VERSION@/$version/g; s/@GLIBC_FLOOR@/$glibc_floor/g" "$root/scripts/package/INSTALL.in" \
  >"$tree/INSTALL"
# Reproducible: fixed owner, order and times (the commit's).
mtime=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -C "$stage_dir" \
  -czf "$dist/$name.tar.gz" "$name"
echo "package: $dist/$name.tar.gz"

python3 "$root/scripts/package/make_wheel.py" --version "$version" --glibc "$glibc_floor" \
  --binary "$binary" --readme "$root/README.md" --mtime "$mtime" --out "$dist"

deb=$stage_dir/deb
install -D -m 755 "$binary" "$deb/usr/bin/dtlaunch"
install -d "$deb/usr/share/dtlaunch/sbatch" "$deb/usr/share/doc/dtlaunch" "$deb/DEBIAN"
install -m 644 "$root"/scripts/sbatch/*.sbatch "$deb/usr/share/dtlaunch/sbatch/"
install -m 644 "$root"/docs/*.md "$root/README.md" "$deb/usr/share/doc/dtlaunch/"
sed "s/@VERSION@/$version/g; s/@GLIBC_FLOOR@/$glibc_floor/g;
  s/@SIZE_KB@/$(du -sk --exclude=DEBIAN "$deb" | cut -f1)/g" \
  "$root/scripts/package/deb-control.in" >"$deb/DEBIAN/control"
find "$deb" -exec touch -h -d "@$mtime" {} +
dpkg-deb --root-owner-group -Zxz --build "$deb" "$dist/dtlaunch_${version}_amd64.deb" >/dev/null
echo "package: $dist/dtlaunch_${version}_amd64.deb"
