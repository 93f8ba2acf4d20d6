#!/usr/bin/env bash
# A CMake 4 from PyPI in a virtual environment of its own (Debian's CMake 3.25 stays as it is), for
# the test that the bundle's test file works under both: GPU nodes and clusters increasingly ship
# CMake 4 (PyPI's `cmake` wheel is 4.x). Kept between runs; made again when missing or not 4.x.
#   validation/bundle/cmake4-venv.sh DIR      -> DIR/bin/ctest
set -euo pipefail
dir=${1:?usage: cmake4-venv.sh DIR}
if [[ -x $dir/bin/ctest ]] && "$dir/bin/ctest" --version | grep -q "^ctest version 4\."; then
  "$dir/bin/ctest" --version | head -1
  exit 0
fi
rm -rf "$dir"
/usr/bin/python3 -m venv "$dir" || { echo "cmake4-venv.sh: python3 -m venv failed (python3-venv: jobscripts/install-deps.sh)" >&2; exit 1; }
"$dir/bin/pip" install --quiet --disable-pip-version-check "cmake>=4,<5" ||
  { echo "cmake4-venv.sh: pip could not install cmake 4 from PyPI into $dir (no network?)" >&2; exit 1; }
"$dir/bin/ctest" --version | head -1
