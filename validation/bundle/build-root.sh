#!/usr/bin/env bash
# A Debian 11 (bullseye, glibc 2.31) build root for the GPU bundle, so that the bundle needs no glibc
# newer than 2.31 and starts on RHEL/Rocky 8 and 9, Ubuntu 20.04 and 22.04, Debian 11 and 12...
# (docs/cuda.md). Made once (debootstrap minbase, then bullseye's compiler and libraries with apt,
# CMake from PyPI: bullseye's 3.18 is older than the presets' 3.25 and its backports have left
# deb.debian.org); remade when the package list below changes. It lives outside the source tree, in
# AVTRAIN_ROOT_CACHE (default /var/cache/avtrain where that is writable, else the tree's build/), so
# that every clone on a machine (CI's clean clones) shares the root and its ccache: the cuda build in
# it then recompiles only what changed. What is built and checked is the same either way.
#   validation/bundle/build-root.sh                 make the root if needed, print its path
#   validation/bundle/build-root.sh -- COMMAND...   then run COMMAND inside it
# Inside (bubblewrap: private mount and PID namespaces, nothing outlives it): the source tree at
# its own path (read-write: the build goes to its build/), the CUDA toolkit of this machine read-only
# at /usr/local/cuda (CUDA 13 takes gcc 6 to 15 as host compiler; bullseye's is gcc 10), cuDNN's headers
# read-only at /opt/avtrain-deps where this machine has them, ccache's
# cache inside the root (/root/.ccache; CCACHE_BASEDIR the tree, so that clones at other paths hit
# it), the root's own network (apt, pip).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
release=bullseye
cache=${AVTRAIN_ROOT_CACHE:-}
if [[ -z $cache ]]; then
  if mkdir -p /var/cache/avtrain 2> /dev/null && [[ -w /var/cache/avtrain ]]; then cache=/var/cache/avtrain; else cache=$root/build; fi
fi
mkdir -p "$cache"
sysroot=$cache/bundle-root-$release
say() { echo "build-root: $*" >&2; }
die() { echo "build-root: FAILED: $*" >&2; exit 1; }
# What the cuda preset needs to build without FFmpeg (AVTRAIN_MEDIA=OFF: bullseye's FFmpeg 4.3 lacks the
# 5.1 API the packer uses, and the bundle does not carry the packer), and what gpu-bundle.sh uses.
# libgmock-dev: bullseye's GTest CMake package names gmock's files, which are in it.
packages=(g++ make git pkg-config ccache libopenmpi-dev openmpi-bin libhdf5-openmpi-dev
          libboost-program-options-dev libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev libgtest-dev libgmock-dev
          libdeflate-dev libzstd-dev libxxhash-dev libprotobuf-dev protobuf-compiler
          python3 python3-venv patchelf xz-utils binutils ca-certificates)
cmake_pip='cmake>=3.25,<4'
stamp="$release ${packages[*]} $cmake_pip"
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, apt inside the root)"
for tool in debootstrap bwrap; do command -v "$tool" > /dev/null || die "$tool is missing (jobscripts/install-deps.sh)"; done
cuda=$(readlink -f /usr/local/cuda)
[[ -x $cuda/bin/nvcc ]] || die "no CUDA toolkit at /usr/local/cuda"

exec 9> "$sysroot.lock"  # one maker at a time (clones building at once wait here)
flock 9
if [[ ! -f $sysroot/.made || $(cat "$sysroot/.made") != "$stamp" ]]; then
  mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2> /dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$sysroot" "$sysroot.tmp"
  mkdir -p "$root/build"
  log=$root/build/bundle-root-$release.log
  say "making a Debian 11 ($release) build root from $mirror (log: ${log#$root/})"
  debootstrap --variant=minbase "$release" "$sysroot.tmp" "$mirror" > "$log" 2>&1 || die "debootstrap (log: $log)"
  cat > "$sysroot.tmp/etc/apt/sources.list" <<EOF
deb $mirror $release main
deb $mirror $release-updates main
deb ${mirror%/debian}/debian-security $release-security main
EOF
  cp /etc/resolv.conf "$sysroot.tmp/etc/"
  # The network's trust as this machine has it (a TLS-inspecting proxy's authority): pip needs it.
  if [[ -d /usr/local/share/ca-certificates ]]; then
    mkdir -p "$sysroot.tmp/usr/local/share/ca-certificates"
    cp -r /usr/local/share/ca-certificates/. "$sysroot.tmp/usr/local/share/ca-certificates/"
  fi
  [[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$sysroot.tmp/etc/pip.conf"
  printf '#!/bin/sh\nexit 101\n' > "$sysroot.tmp/usr/sbin/policy-rc.d"  # packages start no service in here
  chmod +x "$sysroot.tmp/usr/sbin/policy-rc.d"
  bwrap --bind "$sysroot.tmp" / --proc /proc --dev /dev --perms 1777 --tmpfs /tmp --unshare-pid --die-with-parent --cap-add ALL \
        --clearenv --setenv PATH /usr/sbin:/usr/bin:/sbin:/bin --setenv HOME /root --setenv DEBIAN_FRONTEND noninteractive \
        bash -c "apt-get update -q && apt-get install -y -q --no-install-recommends ${packages[*]} &&
                 update-ca-certificates && python3 -m venv /opt/cmake && /opt/cmake/bin/pip install -q '$cmake_pip' &&
                 ln -s /opt/cmake/bin/cmake /opt/cmake/bin/ctest /usr/local/bin/ && apt-get clean" >> "$log" 2>&1 ||
    die "installing the build packages in the root (log: $log)"
  echo "$stamp" > "$sysroot.tmp/.made"
  mv "$sysroot.tmp" "$sysroot"
  say "root ready: $(bwrap --ro-bind "$sysroot" / --proc /proc --dev /dev ldd --version | head -1), $(bwrap --ro-bind "$sysroot" / --proc /proc --dev /dev g++ --version | head -1), $(bwrap --ro-bind "$sysroot" / --proc /proc --dev /dev cmake --version | head -1)"
fi

flock -u 9
if [[ ${1:-} != -- ]]; then echo "$sysroot"; exit 0; fi
shift
# A worktree's git data lives in the main checkout's .git: bound too, for the commit the build records.
extra_binds=()
git_common=$(git -C "$root" rev-parse --path-format=absolute --git-common-dir 2> /dev/null || true)
[[ -n $git_common && $git_common != "$root"/* ]] && extra_binds=(--bind "$git_common" "$git_common")
# cuDNN's and cudnn-frontend's headers (jobscripts/fetch-cudnn-headers.sh), where this machine has them.
deps=${AVTRAIN_DEPS:-/opt/avtrain-deps}
[[ -d $deps ]] && extra_binds+=(--ro-bind "$deps" /opt/avtrain-deps)
exec bwrap --bind "$sysroot" / --proc /proc --dev /dev --ro-bind /sys /sys --perms 1777 --tmpfs /tmp --perms 1777 --tmpfs /dev/shm \
     --bind "$root" "$root" "${extra_binds[@]}" --ro-bind "$cuda" /usr/local/cuda --unshare-pid --unshare-ipc --die-with-parent \
     --chdir "$root" --clearenv --setenv PATH /usr/local/cuda/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
     --setenv HOME /root --setenv LANG C.UTF-8 --setenv CCACHE_BASEDIR "$root" "$@"
