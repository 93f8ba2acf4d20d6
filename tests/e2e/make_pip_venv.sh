#!/usr/bin/env bash
# A Python environment with packages from PyPI that Debian 12 lacks, for the tests that read avtrain's
# output with the field's own readers (TensorBoard's event reader, the safetensors package): DIR/bin/python,
# on top of the system's Python and its Debian packages (numpy, protobuf, torch). Made once; kept
# while its stamp names the same requirements.
#   tests/e2e/make_pip_venv.sh DIR REQUIREMENT...     e.g. make_pip_venv.sh build/cpu/tensorboard-venv tensorboard==2.21.0
set -euo pipefail
dir=${1:?usage: make_pip_venv.sh DIR REQUIREMENT...}
shift
(($# > 0)) || { echo "usage: make_pip_venv.sh DIR REQUIREMENT..." >&2; exit 2; }
stamp="$*"
if [[ -f $dir/avtrain-stamp && $(cat "$dir/avtrain-stamp") == "$stamp" ]]; then exit 0; fi
rm -rf "$dir"
/usr/bin/python3 -m venv --system-site-packages "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
echo "$stamp" > "$dir/avtrain-stamp"
