#!/usr/bin/env bash
# Installs what is missing, then configures and builds a CMake preset (default: cpu).
#   jobscripts/build.sh [PRESET]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
preset=${1:-cpu}
"$here/install-deps.sh"
cd "$root"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
