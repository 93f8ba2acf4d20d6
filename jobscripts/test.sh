#!/usr/bin/env bash
# The README's test command: installs what is missing (what the tests use beyond the build: PyTorch,
# Slurm, OpenSSH, the ffmpeg program, the tools of the fresh-machine test...; espeak-ng and fonts, the
# media demo's test makes its media with them), builds the cpu preset and runs the whole CTest suite.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
"$here/install-deps.sh" --tests --demo
"$here/build.sh" cpu
cd "$root"
ctest --preset cpu "$@"
