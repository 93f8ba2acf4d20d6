#!/usr/bin/env bash
# The README's test command: installs what is missing (PyTorch included, the tests compare
# against it), builds the cpu preset and runs the whole CTest suite.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
"$here/install-deps.sh" --reference
"$here/build.sh" cpu
cd "$root"
ctest --preset cpu "$@"
