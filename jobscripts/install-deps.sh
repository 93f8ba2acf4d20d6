#!/usr/bin/env bash
# Installs the Debian 12 packages avtrain needs; skips what is already present.
#   jobscripts/install-deps.sh            build and run (the run command's plot included)
#   jobscripts/install-deps.sh --reference  also PyTorch (CPU) for the tests, the benchmark and reference checks
#   jobscripts/install-deps.sh --demo       also espeak-ng and fonts: the media of jobscripts/media-demo.sh
set -euo pipefail

# patchelf, xz-utils, binutils (objdump, strip): validation/gpu-bundle.sh; debootstrap with
# debian-archive-keyring (a recommendation, which --no-install-recommends skips), bubblewrap: its
# minimal-root test; python3-venv: a CMake 4 from PyPI beside Debian's for the bundle tests under
# both (validation/bundle/cmake4-venv.sh; the cuda preset's bundle test needs it too, and CI builds
# that preset with this base list alone). slurmctld, slurmd, slurm-client, munge: the test of the Slurm job script against
# a real one-node Slurm (tests/slurm/check_slurm_requeue.py starts and stops its daemons).
# openssh-server, openssh-client, iproute2 (ip netns, tc): the tests across namespace nodes
# (tests/nodes: an sshd per node, mpirun --hostfile over ssh; docs/nodes.md).
# python3-matplotlib: the run command's plot (validation/plot_traces.py).
# libxxhash-dev: the shards' value digests (docs/shard-format.md).
# libav*-dev: FFmpeg's libraries for `avtrain-shards pack`; ffmpeg (the command-line tool): its tests
# make their media with it. libdeflate-dev, libzstd-dev: the data reader's decompression outside the
# HDF5 lock, and the zstd filter (src/data/raw_chunks.cpp, zstd_filter.cpp).
# libprotobuf-dev, protobuf-compiler: TensorBoard's event files (src/io/tensorboard_event.proto).
# python3-pip: pip download of the cuDNN and cudnn-frontend wheels whose headers the cuda preset compiles
# against (jobscripts/fetch-cudnn-headers.sh).
packages=(cmake g++ make git pkg-config
          libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
          libboost-program-options-dev libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev
          libxxhash-dev libgtest-dev python3 python3-numpy python3-h5py python3-matplotlib
          patchelf xz-utils binutils debootstrap debian-archive-keyring bubblewrap python3-venv
          slurmctld slurmd slurm-client munge
          openssh-server openssh-client iproute2
          libavformat-dev libavcodec-dev libswresample-dev libswscale-dev libavutil-dev ffmpeg
          libdeflate-dev libzstd-dev python3-pip
          libprotobuf-dev protobuf-compiler)
for flag in "$@"; do
  case "$flag" in
    --reference) packages+=(python3-torch) ;;
    --demo) packages+=(espeak-ng fonts-dejavu-core fonts-dejavu-extra fonts-liberation2 fonts-freefont-ttf) ;;
    *) echo "install-deps.sh: unknown option $flag (--reference, --demo)" >&2; exit 1 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if (( ${#missing[@]} == 0 )); then
  exit 0
fi

echo "avtrain: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
