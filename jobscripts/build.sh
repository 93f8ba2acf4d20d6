#!/usr/bin/env bash
# Installs what is missing, then configures and builds a CMake preset (default: cpu), all of it
# or the targets named.
#   jobscripts/build.sh [PRESET [TARGET...]]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
preset=${1:-cpu}
shift || true
targets=()
if [[ $# -gt 0 ]]; then targets=(--target "$@"); fi
# The cuda presets need more (install-deps.sh --cuda: pip for cuDNN's headers, the bundle's tools and
# what the bundle's tests use), and compile cuDNN's attention engine against headers fetched once
# (without them it is compiled out, and CMake's configure says so).
if [[ $preset == cuda* ]]; then
  "$here/install-deps.sh" --cuda
  "$here/fetch-cudnn-headers.sh" || echo "build.sh: no cuDNN headers: the cuDNN attention engine is compiled out" >&2
else
  "$here/install-deps.sh"
fi
cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "${targets[@]}"
