#!/usr/bin/env bash
# A Python environment with the tensorboard package (PyPI; Debian 12 has none) for the test that reads
# avtrain's event files back with TensorBoard's own reader: DIR/bin/python, on top of the system's
# Python and its Debian packages (numpy, protobuf). Made once; kept while its stamp names the version.
#   tests/e2e/make_tensorboard_venv.sh DIR
set -euo pipefail
dir=${1:?usage: make_tensorboard_venv.sh DIR}
version=2.21.0
if [[ -f $dir/avtrain-stamp && $(cat "$dir/avtrain-stamp") == "$version" ]]; then exit 0; fi
rm -rf "$dir"
/usr/bin/python3 -m venv --system-site-packages "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check "tensorboard==$version"
echo "$version" > "$dir/avtrain-stamp"
