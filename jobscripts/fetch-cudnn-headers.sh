#!/usr/bin/env bash
# The headers of cuDNN 9 and cudnn-frontend (header-only) that the cuda preset compiles its cuDNN
# attention engine against (cuda/cudnn_attention.cpp; docs/cuda.md). Only the include folders are
# kept, from NVIDIA's PyPI wheels (checked against their SHA-256), under AVTRAIN_DEPS (default
# /opt/avtrain-deps): cudnn-9.28.1.4/include and cudnn-frontend-1.32.0/include, which the build finds
# through the CMake cache variable AVTRAIN_CUDNN_DEPS. No library is kept: libcudnn is opened at run
# time where the node has it. Nothing to do when both are there already. The cpu preset needs none of it.
#   jobscripts/fetch-cudnn-headers.sh          (jobscripts/build.sh cuda runs it)
set -euo pipefail
deps=${AVTRAIN_DEPS:-/opt/avtrain-deps}
cudnn=nvidia-cudnn-cu13==9.28.1.4
frontend=nvidia-cudnn-frontend==1.32.0
declare -A sha256=(
  [nvidia_cudnn_cu13-9.28.1.4-py3-none-manylinux_2_27_x86_64.whl]=a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec
  [nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl]=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
)
cudnn_dir=$deps/cudnn-9.28.1.4 frontend_dir=$deps/cudnn-frontend-1.32.0
if [[ -f $cudnn_dir/include/cudnn_version.h && -f $frontend_dir/include/cudnn_frontend.h ]]; then exit 0; fi

say() { echo "fetch-cudnn-headers: $*" >&2; }
python=${AVTRAIN_PYTHON:-python3}
if ! "$python" -m pip --version > /dev/null 2>&1; then
  say "no pip for $python: install python3-pip (jobscripts/install-deps.sh) or set AVTRAIN_PYTHON"; exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Wheels for one fixed Python and platform, so that the files (and their checksums) are always the same.
say "downloading $cudnn and $frontend (headers only are kept) into $deps"
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --dest "$work" "$cudnn" "$frontend" ||
  { say "pip download failed (a proxy? PIP_INDEX_URL?)"; exit 1; }
for wheel in "${!sha256[@]}"; do
  [[ -f $work/$wheel ]] || { say "pip did not give $wheel"; exit 1; }
  echo "${sha256[$wheel]}  $work/$wheel" | sha256sum -c --quiet - || { say "$wheel: checksum mismatch"; exit 1; }
done
mkdir -p "$deps"
# Only the include folders: nvidia/cudnn/include/* of the cuDNN wheel, include/* of the frontend's.
"$python" - "$work" "$cudnn_dir" "$frontend_dir" <<'PY'
import os, shutil, sys, zipfile
work, cudnn_dir, frontend_dir = sys.argv[1:]
def extract(wheel, prefix, dest):
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(os.path.join(work, wheel)) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                path = os.path.join(tmp, "include", name[len(prefix):])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with z.open(name) as src, open(path, "wb") as out:
                    shutil.copyfileobj(src, out)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
names = os.listdir(work)
extract(next(n for n in names if n.startswith("nvidia_cudnn_cu13")), "nvidia/cudnn/include/", cudnn_dir)
extract(next(n for n in names if n.startswith("nvidia_cudnn_frontend")), "include/", frontend_dir)
PY
say "$cudnn_dir/include, $frontend_dir/include ($(du -sh "$deps" | cut -f1))"
