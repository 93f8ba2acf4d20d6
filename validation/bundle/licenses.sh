#!/usr/bin/env bash
# The license texts of everything the GPU bundle redistributes (validation/gpu-bundle.sh runs this):
# share/licenses/NAME/ holds one source's texts, share/licenses/README names the licenses of each
# file or folder of the bundle (validation/bundle/check_licenses.py checks that nothing is left out).
#   validation/bundle/licenses.sh BUNDLE SOURCES BUILD
# SOURCES has a line per file or folder (ending in /) copied into BUNDLE: "PATH FROM", FROM being where
# it came from on this machine, or `avtrain` for the project's own. A file of a Debian package (dpkg -S)
# takes the package's /usr/share/doc/PKG/copyright; a file of the CUDA toolkit that BUILD was compiled
# with (the runtime, libcudart) takes NVIDIA's license of the toolkit. A file whose license cannot be
# found stops the bundle. The project's programs also carry the licenses of code compiled into them,
# found by the strings each leaves in them: googletest (the gpu tests), nlohmann-json, cudnn-frontend.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=${1:?usage: licenses.sh BUNDLE SOURCES BUILD}
sources=${2:?usage: licenses.sh BUNDLE SOURCES BUILD}
build=${3:?usage: licenses.sh BUNDLE SOURCES BUILD}
die() { echo "licenses: $*" >&2; exit 1; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
nvcc=$(cache CMAKE_CUDA_COMPILER)
cuda_root=$(readlink -f "$(dirname "$nvcc")/..")
cudnn_deps=$(cache AVTRAIN_CUDNN_DEPS)
licenses=$bundle/share/licenses
rm -rf "$licenses"
mkdir -p "$licenses"

ours() {
  mkdir -p "$licenses/avtrain"
  cp "$root/LICENSE" "$licenses/avtrain/LICENSE"
  echo avtrain
}

# A Debian package's copyright file (its doc folder may be a link to its source package's).
package() {
  local copyright=/usr/share/doc/$1/copyright
  [[ -s $copyright ]] || return 1
  mkdir -p "$licenses/$1"
  cp -L "$copyright" "$licenses/$1/copyright"
  echo "$1"
}

# NVIDIA's license of the toolkit: EULA.txt where NVIDIA's installer put it, else the license of the
# cuda-runtime wheel where the toolkit was assembled from NVIDIA's wheels (dist-info/).
cuda_runtime() {
  local eula
  for eula in "$cuda_root/EULA.txt" "$cuda_root"/dist-info/nvidia_cuda_runtime*/licenses/License.txt; do
    if [[ -s $eula ]]; then
      mkdir -p "$licenses/cuda-runtime"
      cp "$eula" "$licenses/cuda-runtime/${eula##*/}"
      echo cuda-runtime
      return 0
    fi
  done
  die "no NVIDIA license text in the CUDA toolkit at $cuda_root (EULA.txt, dist-info/nvidia_cuda_runtime*/licenses)"
}

# cudnn-frontend ships its license only as a line in each header (SPDX): that line, and the text it names.
cudnn_frontend() {
  local header=$cudnn_deps/cudnn-frontend-1.32.0/include/cudnn_frontend.h
  grep -q "SPDX-License-Identifier: Apache-2.0" "$header" || die "$header does not say its license (SPDX) as expected"
  mkdir -p "$licenses/cudnn-frontend"
  { echo "cudnn-frontend 1.32.0 (header-only, compiled into the CUDA backend's cuDNN engine), from $header:"
    grep -E "SPDX-File(CopyrightText|Contributor)|SPDX-License-Identifier" "$header" | sed 's/^ *\* */  /'
  } > "$licenses/cudnn-frontend/NOTICE"
  cp "$root/LICENSE" "$licenses/cudnn-frontend/LICENSE-Apache-2.0"
  echo cudnn-frontend
}

# The license of a file or folder of this machine: its Debian package's, else the CUDA toolkit's.
license_of() {
  local path=$1 file=$1 link p owner
  [[ -d $path ]] && file=$(find "$path" -type f -print -quit)  # a folder: its package is its files'
  # dpkg knows a file by the path its package installed: try the link as given and where it leads,
  # each with and without /usr (merged /usr: ldd may say /lib for a file installed under /usr/lib).
  for link in "$file" "$(readlink -f "$file")"; do
    for p in "$link" "/usr$link" "${link#/usr}"; do
      owner=$(dpkg-query -S "$p" 2> /dev/null | grep -v '^diversion' | sed -n '1s/[:,].*//p') || true
      [[ -n $owner ]] && package "$owner" && return 0
    done
  done
  [[ $(readlink -f "$file") == "$cuda_root"/* ]] && cuda_runtime && return 0
  die "$path: neither a Debian package's file with a copyright file nor the CUDA toolkit's: no license to ship"
}

# What a program of the project holds of others' code, by strings each leaves in it.
compiled_in() {
  if grep -qaF -- '--gtest_filter' "$1"; then package libgtest-dev || die "no copyright file of libgtest-dev"; fi
  if grep -qaF '[json.exception.' "$1"; then package nlohmann-json3-dev || die "no copyright file of nlohmann-json3-dev"; fi
  if [[ -n $cudnn_deps ]] && grep -qaF '[cudnn_frontend]' "$1"; then cudnn_frontend; fi  # its log's prefix
}

{
  echo "# The license texts of what this bundle redistributes, a folder for each source: a Debian"
  echo "# package's copyright file (PKG/copyright), NVIDIA's license of the CUDA runtime (cuda-runtime/),"
  echo "# avtrain's own (avtrain/), and those of code compiled into avtrain's programs (googletest,"
  echo "# nlohmann-json, cudnn-frontend). Each line below: a file or folder (ending in /) of the bundle,"
  echo "# then the folders here that hold its licenses."
  while read -r path from; do
    if [[ $from == avtrain ]]; then
      names=$(ours)
      if [[ -f $bundle/$path && $(LC_ALL=C head -c 4 "$bundle/$path") == $'\x7fELF' ]]; then
        names+=" $(compiled_in "$bundle/$path")" || exit 1
      fi
    else
      names=$(license_of "$from") || exit 1
    fi
    echo "$path" $names  # unquoted: the names, one line
  done < "$sources"
} > "$licenses/README.tmp"
mv "$licenses/README.tmp" "$licenses/README"
