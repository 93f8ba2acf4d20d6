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
"$here/install-deps.sh"
cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" "${targets[@]}"
