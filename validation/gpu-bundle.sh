#!/usr/bin/env bash
# Makes the relocatable GPU bundle: avtrain for a GPU node that has the NVIDIA driver, CUDA's cuBLAS
# and NCCL, and none of our Debian packages (no OpenMPI, HDF5, Boost, OpenBLAS, oneDNN...).
#   bash validation/gpu-bundle.sh      -> build/avtrain-bundle/ and build/avtrain-bundle.tar.xz
# Run on Debian 12 (it builds the cuda preset first, installing what is missing). The bundle holds
# the programs, the gpu tests (a relocatable CTestTestfile), OpenMPI's mpirun/orted with their
# plugins and help files, PMIx's, every shared library they need that is not glibc (measured with
# ldd over the programs and the plugins), the decks and scripts under share/avtrain, and a launcher
# (bin/NAME -> libexec/launch) that points OpenMPI at the bundle and finds cuBLAS and NCCL on the
# node. cuBLAS, cuBLASLt and NCCL stay the node's (813 MB here: they cannot travel in 64 MiB);
# cudart travels (0.7 MB, the build's own). The license texts of all it carries travel too, under
# share/licenses (validation/bundle/licenses.sh). docs/cuda.md: layout, sizes, how to use it.
#
#   bash validation/gpu-bundle.sh --base bullseye
#                                      -> build/bundle-bullseye/avtrain-bundle{,.tar.xz}, the same bundle
# built in a Debian 11 root (validation/bundle/build-root.sh) so that it needs glibc 2.30, not 2.36:
# for RHEL/Rocky 9, Ubuntu 20.04 and 22.04 (docs/cuda.md). The cuda preset in build/cuda-bullseye,
# without the packer (AVTRAIN_MEDIA=OFF), only the targets the bundle carries.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
base=
if [[ ${1:-} == --base ]]; then base=${2:-}; fi
if [[ -z $base ]]; then
  bash jobscripts/build.sh cuda > /dev/null
  build=$root/build/cuda
  out=$root/build/avtrain-bundle
  tarball=$root/build/avtrain-bundle.tar.xz
elif [[ $base != bullseye ]]; then
  echo "gpu-bundle: --base $base: only bullseye (Debian 11) is known" >&2; exit 1
elif [[ ${AVTRAIN_IN_BUILD_ROOT:-} != "$base" ]]; then
  # cuDNN's headers, fetched here; the root sees them read-only (without them the engine is compiled out).
  bash jobscripts/fetch-cudnn-headers.sh || echo "gpu-bundle: no cuDNN headers: the cuDNN attention engine is compiled out" >&2
  exec bash validation/bundle/build-root.sh -- env AVTRAIN_IN_BUILD_ROOT="$base" bash validation/gpu-bundle.sh --base "$base"
else
  build=$root/build/cuda-$base
  out=$root/build/bundle-$base/avtrain-bundle
  tarball=$root/build/bundle-$base/avtrain-bundle.tar.xz
  mkdir -p "$(dirname "$out")"
  cmake --preset cuda -B "$build" -DAVTRAIN_MEDIA=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
        -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache > "$build.configure.log" 2>&1 ||
    { tail -20 "$build.configure.log"; echo "gpu-bundle: configure failed (log: $build.configure.log)" >&2; exit 1; }
  # The programs the bundle carries, then the gpu tests' own (everything under tests/gpu; their
  # other tests start the programs above). The copy below fails on any program not built.
  { nice cmake --build "$build" -j "${AVTRAIN_BUILD_JOBS:-2}" --target avtrain avtrain-shards avtrain-export avtrain-gemm-peak avtrain-bench &&
    nice cmake --build "$build/tests/gpu" -j "${AVTRAIN_BUILD_JOBS:-2}"; } > "$build.build.log" 2>&1 ||
    { grep -E "error|Error" "$build.build.log" | head -30; echo "gpu-bundle: build failed (log: $build.build.log)" >&2; exit 1; }
fi

# What the node provides: glibc's libraries (and the loader), and NVIDIA's big libraries.
system_libs=(linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1
             libresolv.so.2 libutil.so.1 libanl.so.1 libmvec.so.1 libBrokenLocale.so.1 libthread_db.so.1
             libnss_files.so.2 libnss_dns.so.2 libc_malloc_debug.so.0 libcuda.so.1)
node_lib_pattern='^lib(cublas|cublasLt|nccl)\.so\.[0-9]+$'

rm -rf "$out"
mkdir -p "$out"/{bin,libexec,lib/openmpi,lib/pmix,lib/hwloc,share/openmpi,share/pmix,share/avtrain,etc/openmpi,etc/pmix,tests}
# Where each file or folder of the bundle came from (a path here, or avtrain: the project's own), for
# its license text (validation/bundle/licenses.sh).
sources=$(mktemp)
trap 'rm -f "$sources"' EXIT
came_from() { echo "$1 $2" >> "$sources"; }

# The gpu tests, relocated; they name the build programs they start.
ctest --test-dir "$build" -L gpu --show-only=json-v1 > "$out/tests/gpu-tests.json"
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt")
mapfile -t test_programs < <(python3 validation/bundle/ctest_file.py "$out/tests/gpu-tests.json" "$build" "$root" \
                               "$mpiexec" "$out/tests/CTestTestfile.cmake")
rm "$out/tests/gpu-tests.json"
programs=(avtrain avtrain-shards avtrain-export avtrain-gemm-peak avtrain-bench "${test_programs[@]}")
came_from tests/ avtrain
for p in $(printf '%s\n' "${programs[@]}" | sort -u); do
  cp "$build/bin/$p" "$out/libexec/$p"
  strip --strip-unneeded "$out/libexec/$p"
  came_from "libexec/$p" avtrain
done

# OpenMPI and PMIx: where this machine's builds keep their parts (asked, not assumed).
ompi_bindir=$(ompi_info --path bindir | sed 's/.*: *//')
ompi_pkglibdir=$(ompi_info --path pkglibdir | sed 's/.*: *//')
ompi_pkgdatadir=$(ompi_info --path pkgdatadir | sed 's/.*: *//')
ompi_sysconfdir=$(ompi_info --path sysconfdir | sed 's/.*: *//')
pmix_lib=$(ldd "$ompi_pkglibdir/mca_pmix_ext3x.so" | awk '$1 == "libpmix.so.2" {print $3}')
pmix_prefix=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")")
cp "$ompi_bindir/orterun" "$out/libexec/mpirun"
cp "$ompi_bindir/orted" "$ompi_bindir/ompi_info" "$out/libexec/"
cp "$ompi_pkglibdir"/*.so "$out/lib/openmpi/"
cp -r "$ompi_pkgdatadir"/. "$out/share/openmpi/"
cp "$ompi_sysconfdir"/openmpi-mca-params.conf "$ompi_sysconfdir"/openmpi-default-hostfile "$out/etc/openmpi/"
came_from libexec/mpirun "$ompi_bindir/orterun"
for f in orted ompi_info; do came_from "libexec/$f" "$ompi_bindir/$f"; done
for f in "$ompi_pkglibdir"/*.so; do came_from "lib/openmpi/${f##*/}" "$f"; done
came_from share/openmpi/ "$ompi_pkgdatadir"
for f in openmpi-mca-params.conf openmpi-default-hostfile; do came_from "etc/openmpi/$f" "$ompi_sysconfdir/$f"; done
echo >> "$out/etc/openmpi/openmpi-mca-params.conf"  # Debian's file ends without a newline
cat >> "$out/etc/openmpi/openmpi-mca-params.conf" <<'EOF'
# avtrain bundle: GPU node images often have no ssh, and OpenMPI's launcher refuses to start even a
# one-node job when it finds no rsh agent; 'false' lets it start (a launch on other nodes without
# Slurm or ssh then fails, as it must).
plm_rsh_agent = ssh : rsh : false
EOF
cp "$pmix_prefix"/lib/pmix/*.so "$out/lib/pmix/"
cp -r "$pmix_prefix"/share/pmix/. "$out/share/pmix/"
cp "$pmix_prefix"/share/pmix-mca-params.conf "$out/etc/pmix/"
for f in "$pmix_prefix"/lib/pmix/*.so; do came_from "lib/pmix/${f##*/}" "$f"; done
came_from share/pmix/ "$pmix_prefix/share/pmix"
came_from etc/pmix/pmix-mca-params.conf "$pmix_prefix/share/pmix-mca-params.conf"
# Debian's PMIx parameters name its plugin folder, which is not on the node: PMIx 3 (Debian 11) then
# fails to start (PMIx 4 goes on); without the line it takes the launcher's PMIX_PKGLIBDIR.
sed -i 's|^\( *mca_base_component_path *=.*\)|# avtrain bundle: the launcher points PMIx at lib/pmix (PMIX_PKGLIBDIR)\n# \1|' "$out/etc/pmix/pmix-mca-params.conf"

# Every library the programs and plugins need (ldd gives the whole closure), but glibc's and the node's.
printf '%s\n' "${system_libs[@]}" > "$out/etc/system-libs"
: > "$out/etc/node-libs"
declare -A is_system=()
for s in "${system_libs[@]}"; do is_system[$s]=1; done
for f in "$out"/libexec/* "$out"/lib/openmpi/*.so "$out"/lib/pmix/*.so; do
  node=()
  while read -r soname path; do
    [[ -n ${is_system[$soname]:-} ]] && continue
    if [[ $path == "not" ]]; then echo "gpu-bundle: ${f#$out/} needs $soname, which is not installed here" >&2; exit 1; fi
    if [[ $soname =~ $node_lib_pattern ]]; then node+=("$soname"); continue; fi
    [[ -e $out/lib/$soname ]] || { cp -L "$path" "$out/lib/$soname"; came_from "lib/$soname" "$path"; }
  done < <(ldd "$f" | awk '$2 == "=>" {print $1, $3}')
  if [[ $f == "$out"/libexec/* && ${#node[@]} -gt 0 ]]; then
    echo "${f##*/}: ${node[*]}" >> "$out/etc/node-libs"
  fi
done

# Relocation: programs look in ../lib, libraries beside themselves, plugins one up. DT_RPATH (not
# RUNPATH) so that it also serves the libraries' own dependencies and dlopen.
for f in "$out"/libexec/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$out"/lib/*.so*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$f"; done
for f in "$out"/lib/openmpi/*.so "$out"/lib/pmix/*.so; do patchelf --force-rpath --set-rpath '$ORIGIN/..' "$f"; done

cp validation/bundle/launch "$out/libexec/launch"
chmod +x "$out/libexec/launch"
came_from libexec/launch avtrain
for f in "$out"/libexec/*; do
  [[ ${f##*/} == launch ]] || ln -s ../libexec/launch "$out/bin/${f##*/}"
done
ln -s ../libexec/launch "$out/bin/avtrain-bundle-check"

# The decks and scripts the tests, the GPU check and a user need, beside the programs.
for d in inputs validation jobscripts tests/gpu tests/mpi tests/e2e; do
  mkdir -p "$out/share/avtrain/$d"
  git ls-files -z "$d" | grep -zv '/CMakeLists.txt$' | xargs -0 -I{} cp --parents {} "$out/share/avtrain/"
done
cp README.md "$out/share/avtrain/"
came_from share/avtrain/ avtrain

# What was built, from what, and what it needs of the node.
glibc_needed=$(for f in "$out"/libexec/* "$out"/lib/*.so* "$out"/lib/*/*.so; do objdump -T "$f" 2> /dev/null || true; done |
               grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -uV | tail -1)
header_version() { sed -n "s/^#define $2 \([0-9]*\).*/\1/p" "$1"; }
cuda_inc=$(sed -n 's/^CUDAToolkit_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
cuda_inc=${cuda_inc:-/usr/local/cuda/include}
{
  echo "commit $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- src cuda tests || echo '+changes'), made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "CUDA $("$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') (runtime travels), sm_$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" | sed 's/;/, sm_/g')"
  echo "built against cuBLAS $(header_version "$cuda_inc/cublas_api.h" CUBLAS_VER_MAJOR).$(header_version "$cuda_inc/cublas_api.h" CUBLAS_VER_MINOR).$(header_version "$cuda_inc/cublas_api.h" CUBLAS_VER_PATCH) and NCCL $(header_version "$cuda_inc/nccl.h" NCCL_MAJOR).$(header_version "$cuda_inc/nccl.h" NCCL_MINOR).$(header_version "$cuda_inc/nccl.h" NCCL_PATCH) (the node's are used)"
  echo "$(ompi_info --version | head -1), needs glibc >= ${glibc_needed#GLIBC_} and an NVIDIA driver for CUDA 13"
} > "$out/etc/bundle-info"
for f in system-libs node-libs bundle-info; do came_from "etc/$f" avtrain; done

# The license texts of all the above, with share/licenses/README naming each file's.
bash validation/bundle/licenses.sh "$out" "$sources" "$build"

rm -f "$tarball.tmp"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T0 -6 > "$tarball.tmp"
mv "$tarball.tmp" "$tarball"
echo "gpu-bundle: $tarball: $(du -m "$tarball" | cut -f1) MiB ($(du -sm "$out" | cut -f1) MiB unpacked:" \
     "$(ls "$out/libexec" | grep -cvx launch) programs, $(ls "$out"/lib/*.so* | wc -l) libraries, $(ls "$out"/lib/openmpi | wc -l) OpenMPI plugins," \
     "$(ls "$out/share/licenses" | grep -cvx README) license folders)"
cat "$out/etc/bundle-info"
