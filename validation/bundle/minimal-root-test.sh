#!/usr/bin/env bash
# The GPU bundle on a machine with none of our packages, without a GPU: a Debian 12 minbase root
# (debootstrap) holding only what a GPU node image has besides CUDA - python3 with numpy (not at
# /usr/bin/python3, as on such images) and CMake's ctest - and none of the project's packages.
# The node's CUDA libraries are this machine's toolkit folder, bound in read-only; there is no
# driver and no GPU. Inside the root (bubblewrap: a private mount namespace, so nothing stays
# mounted when it ends; chroot works here too, but leaves mounts to undo):
#   1. without the CUDA libraries and with numpy hidden, gpu-check.sh must stop in seconds (exit 2)
#      with a list that names libcublas.so.13, libnccl.so.2 and numpy;
#   2. cuBLAS and NCCL present only as NVIDIA's python wheels: the launcher finds them, avtrain trains;
#   3. ldd of the bundle's avtrain, and avtrain-bundle-check: every library resolves inside the
#      bundle, glibc or the node's CUDA folder;
#   4. gpu-check.sh from the bundle: avtrain-shards synth, the quickstart deck on the CPU on 1 rank
#      and on 2 ranks through the bundle's mpirun, reconciled by avtrain-reconcile with the root's
#      numpy (PASS), the gpu tests skipped, avtrain's "no GPU" message, exit 3.
#   bash validation/bundle/minimal-root-test.sh     (makes the bundle with validation/gpu-bundle.sh)
#   bash validation/bundle/minimal-root-test.sh --release bullseye
#       the same in a Debian 11 root (glibc 2.31, python 3.9, ctest 3.18) with the bundle built on
#       Debian 11 (validation/gpu-bundle.sh --base bullseye), under build/minimal-root-bullseye.
# First of all (0.), objdump -T over every ELF file of the bundle: nothing newer than the root's glibc
# (validation/bundle/glibc-floor.sh).
# The root is made once under build/minimal-root (~45 s, from the Debian mirror this machine's apt uses).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
release=bookworm
if [[ ${1:-} == --release ]]; then release=${2:?--release RELEASE: bookworm or bullseye}; fi
case $release in
  bookworm) suffix= ;;
  bullseye) suffix=-bullseye ;;
  *) echo "minimal-root-test: --release $release: bookworm or bullseye" >&2; exit 2 ;;
esac
sysroot=$root/build/minimal-root$suffix
work=$root/build/minimal-root$suffix-work
node_packages=python3-numpy,cmake
say() { echo "minimal-root-test: $*"; }
die() { echo "minimal-root-test: FAILED: $*" >&2; exit 1; }

if [[ $release == bookworm ]]; then
  bash "$root/validation/gpu-bundle.sh" | tail -1
  tarball=$root/build/avtrain-bundle.tar.xz
else
  bash "$root/validation/gpu-bundle.sh" --base "$release" | tail -1
  tarball=$root/build/bundle-$release/avtrain-bundle.tar.xz
fi

if [[ ! -f $sysroot/.made || $(cat "$sysroot/.made") != "$node_packages" ]]; then
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2> /dev/null | head -1)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2> /dev/null)
  [[ -n $mirror ]] || die "no Debian mirror in this machine's apt sources"
  rm -rf "$sysroot" "$sysroot.tmp"
  say "making a Debian $release minbase root with $node_packages from $mirror"
  debootstrap --variant=minbase --include="$node_packages" "$release" "$sysroot.tmp" "$mirror" > "$root/build/minimal-root$suffix.log" 2>&1 ||
    die "debootstrap (log: build/minimal-root$suffix.log)"
  # python3 where a GPU node image keeps it: a hard-coded /usr/bin/python3 must fail in here.
  mkdir -p "$sysroot.tmp/opt/node-python/bin"
  ln -s "/usr/bin/$(readlink "$sysroot.tmp/usr/bin/python3")" "$sysroot.tmp/opt/node-python/bin/python3"
  rm "$sysroot.tmp/usr/bin/python3"
  echo "$node_packages" > "$sysroot.tmp/.made"
  mv "$sysroot.tmp" "$sysroot"
fi
# None of the project's packages (jobscripts/install-deps.sh, every group) but those the node image
# has (and the archive keyring, which every Debian root holds).
ours=$(bash "$root/jobscripts/install-deps.sh" --list --cuda --tests --demo |
       grep -vxE 'python3|python3-numpy|cmake|debian-archive-keyring' || true)
[[ -n $ours ]] || die "read no package list from jobscripts/install-deps.sh"
for p in $ours; do
  if chroot "$sysroot" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then
    die "the root holds $p, one of the project's packages"
  fi
done
say "the root holds none of: $(echo $ours | tr '\n' ' ')"

rm -rf "$work"
mkdir -p "$work"
cp "$tarball" "$work/"

# 0. What glibc the bundle needs, against the root's.
root_glibc=$(bwrap --ro-bind "$sysroot" / --proc /proc --dev /dev /usr/bin/ldd --version | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
[[ -n $root_glibc ]] || die "could not read the root's glibc version"
tar -C "$work" -xJf "$tarball"
bash "$root/validation/bundle/glibc-floor.sh" "$work/avtrain-bundle" "$root_glibc" | tail -n 12 ||
  die "the bundle needs a glibc newer than Debian $release's $root_glibc"
rm -rf "$work/avtrain-bundle"
say "0. objdump -T over the bundle: nothing newer than the root's glibc $root_glibc"
cuda_libs=$(dirname "$(readlink -f "$(/sbin/ldconfig -p | awk '$1 == "libcublas.so.13" {print $NF; exit}')")" 2> /dev/null || true)
[[ -d $cuda_libs ]] || cuda_libs=$(readlink -f /usr/local/cuda/lib64)
[[ -e $cuda_libs/libcublas.so.13 && -e $cuda_libs/libnccl.so.2 ]] || die "no cuBLAS and NCCL here to stand for the node's"

in_root() {  # in_root [bwrap options...] -- bash script from stdin
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  bwrap --bind "$sysroot" / --proc /proc --dev /dev --ro-bind /sys /sys --tmpfs /tmp --bind "$work" /work --chdir /work \
        --unshare-pid --die-with-parent --clearenv --setenv PATH /opt/node-python/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        --setenv HOME /root "${opts[@]}" bash -s
}
unpack='python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(\".\")" avtrain-bundle.tar.xz'

# 1. Missing things are listed at once.
set +e
in_root --tmpfs /usr/lib/python3/dist-packages -- > "$work/missing.log" 2>&1 <<EOF
$unpack
time_start=\$(date +%s)
bash avtrain-bundle/share/avtrain/validation/gpu-check.sh < /dev/null
rc=\$?
echo "exit \$rc after \$(( \$(date +%s) - time_start )) s"
EOF
set -e
cat "$work/missing.log"
grep -q "^exit 2 after" "$work/missing.log" || die "gpu-check without cuBLAS, NCCL and numpy did not exit 2"
for item in libcublas.so.13 libnccl.so.2 numpy; do
  grep -q "^  - .*$item" "$work/missing.log" || die "gpu-check's list of what is missing does not name $item"
done
seconds=$(sed -n 's/^exit 2 after \([0-9]*\) s/\1/p' "$work/missing.log")
(( seconds <= 30 )) || die "gpu-check took $seconds s to say what is missing"
say "1. with cuBLAS, NCCL and numpy missing, gpu-check stopped after $seconds s (exit 2) and named them"

# cuBLAS and NCCL only as NVIDIA's wheels under the node's python3 (no toolkit folder): found there.
wheels=/usr/local/lib/$(readlink "$sysroot/opt/node-python/bin/python3" | xargs basename)/dist-packages/nvidia/cu13/lib
rm -rf "$work/avtrain-bundle"
set +e
in_root --ro-bind "$cuda_libs" "$wheels" -- > "$work/wheels.log" 2>&1 <<EOF
$unpack
avtrain-bundle/bin/avtrain-bundle-check
avtrain-bundle/bin/avtrain-shards synth --out shards --shards 1 --samples 64 --seed 1 < /dev/null &&
  avtrain-bundle/bin/avtrain avtrain-bundle/share/avtrain/inputs/ci.ini --data shards --steps 2 --out wheel-run < /dev/null
echo "avtrain exit \$?"
EOF
set -e
cat "$work/wheels.log"
grep -q "node's libcublas.so.13: $wheels/libcublas.so.13" "$work/wheels.log" || die "cuBLAS from the node's python wheels was not found"
grep -q "^avtrain exit 0" "$work/wheels.log" || die "avtrain with cuBLAS and NCCL from the wheels"
say "2. with cuBLAS and NCCL only as python wheels ($wheels), the launcher finds them and avtrain runs"

# 3 and 4. With the node's CUDA folder: ldd, the bundle check, then the GPU check up to "no GPU".
rm -rf "$work/avtrain-bundle"
set +e
in_root --ro-bind "$cuda_libs" /usr/local/cuda/lib64 -- > "$work/run.log" 2>&1 <<EOF
$unpack
echo "python3: \$(command -v python3); /usr/bin/python3: \$(ls /usr/bin/python3 2>&1)"
echo "ldd avtrain-bundle/libexec/avtrain (the launcher adds the node's CUDA folder):"
LD_LIBRARY_PATH=/usr/local/cuda/lib64 ldd avtrain-bundle/libexec/avtrain
avtrain-bundle/bin/avtrain-bundle-check || echo "bundle-check failed"
bash avtrain-bundle/share/avtrain/validation/gpu-check.sh < /dev/null
echo "gpu-check exit \$?"
EOF
set -e
cat "$work/run.log"
system=" $(tr '\n' ' ' < "$work/avtrain-bundle/etc/system-libs") "
while read -r soname path; do
  [[ $system == *" $soname "* || $path == /work/avtrain-bundle/* || $path == /usr/local/cuda/lib64/* ]] ||
    die "avtrain takes $soname from $path: neither the bundle, glibc nor the node's CUDA"
done < <(sed -n '/^ldd avtrain-bundle/,/^avtrain bundle at/p' "$work/run.log" | awk '$2 == "=>" {print $1, $3}')
grep -q "every program and library resolves inside the bundle" "$work/run.log" || die "avtrain-bundle-check"
expect() { grep -qE "$1" "$work/run.log" || die "gpu-check did not report: $1"; }
expect "gpu-check: needs: all present"
expect "^cuBLAS 13\.[0-9]+\.[0-9]+ \(built against 13\.[0-9]+\.[0-9]+\)$"
expect "^NCCL 2\.[0-9]+\.[0-9]+ \(built against 2\.[0-9]+\.[0-9]+\)$"
expect "gpu-check: no GPU visible"
expect "gpu-check: avtrain-shards synth: ok"
expect "gpu-check: CPU, 1 rank against 2 ranks through mpirun, reconciled: verdict: PASS"
expect "gpu-check: ctest -L gpu: 100% tests passed, 0 tests failed out of [0-9]+, [0-9]+ skipped"
expect "gpu-check: avtrain --device cuda without a GPU \(exit [1-9][0-9]*\): .*(CUDA|GPU)"
expect "^gpu-check exit 3$"
say "3. ldd and avtrain-bundle-check: nothing outside the bundle, glibc and the node's CUDA folder"
say "4. gpu-check in the root: synth, CPU on 1 and 2 ranks, reconcile PASS, gpu tests skipped, no-GPU message, exit 3"
