#!/usr/bin/env bash
# Installs the Debian 12 packages avtrain needs, by what needs them; skips what is already present.
#   jobscripts/install-deps.sh              build and run the CPU build, the run command's plot included
#                                           (jobscripts/quickstart.sh, build.sh cpu)
#   jobscripts/install-deps.sh --cuda       also the cuda preset, the GPU bundle and its tests (build.sh cuda)
#   jobscripts/install-deps.sh --tests      also what the CTest suite needs beyond the build (jobscripts/test.sh)
#   jobscripts/install-deps.sh --reference  also PyTorch (CPU) alone: the reference checks and the benchmark
#   jobscripts/install-deps.sh --demo       also the media of jobscripts/media-demo.sh
#   jobscripts/install-deps.sh --fuzz       also the fuzz preset: clang's libFuzzer (validation/fuzz-campaign.sh)
#   jobscripts/install-deps.sh --list [FLAGS]  prints the packages those flags name, one a line; installs nothing
set -euo pipefail

# Build and run: the compilers and libraries of the cpu preset (which compiles the tests too, hence
# libgtest-dev), and the python the run command's reconcile and plot use.
# libxxhash-dev: the shards' value digests (docs/shard-format.md). libav*-dev: FFmpeg's libraries for
# `avtrain-shards pack`. libdeflate-dev, libzstd-dev: the data reader's decompression outside the
# HDF5 lock, and the zstd filter (src/data/raw_chunks.cpp, zstd_filter.cpp). python3-matplotlib: the
# run command's plot (validation/plot_traces.py); python3-h5py, hdf5-tools (h5dump, h5ls): a look into
# checkpoints and shards (docs/checkpoint.md).
# libprotobuf-dev, protobuf-compiler: TensorBoard's event files (src/io/tensorboard_event.proto).
base=(cmake g++ make git pkg-config
      libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
      libboost-program-options-dev libopenblas-openmp-dev libdnnl-dev nlohmann-json3-dev
      libxxhash-dev libgtest-dev
      libavformat-dev libavcodec-dev libswresample-dev libswscale-dev libavutil-dev
      libdeflate-dev libzstd-dev libprotobuf-dev protobuf-compiler
      python3 python3-numpy python3-h5py python3-matplotlib)

# The cuda preset and the GPU bundle (validation/gpu-bundle.sh). python3-pip: pip download of the
# cuDNN and cudnn-frontend wheels whose headers the cuda preset compiles against
# (jobscripts/fetch-cudnn-headers.sh). patchelf, xz-utils, binutils (objdump, strip): the bundle.
# CI runs the bundle's tests (label bundle) right after this build, so theirs too: debootstrap with
# debian-archive-keyring (a recommendation, which --no-install-recommends skips) and bubblewrap, the
# minimal roots (validation/bundle/minimal-root-test.sh, build-root.sh); python3-venv, a CMake 4 from
# PyPI beside Debian's (validation/bundle/cmake4-venv.sh); openssh-server, openssh-client, iproute2:
# the bundle across namespace nodes (tests/nodes, bundle_pp2_dp2_on_two_nodes).
cuda=(python3-pip patchelf xz-utils binutils debootstrap debian-archive-keyring bubblewrap python3-venv
      openssh-server openssh-client iproute2)

# The fuzz preset (tests/fuzz, validation/fuzz-campaign.sh, docs/fuzzing.md): clang; libclang-rt-dev,
# compiler-rt's libFuzzer and the sanitizers' runtimes for clang; libomp-dev, OpenMP for clang (the
# project's libraries ask for it).
fuzz=(clang libclang-rt-dev libomp-dev)

# PyTorch (CPU): the tests and checks against the reference model, the benchmark (validation/benchmark.sh).
reference=(python3-torch)

# The CTest suite beyond the build: PyTorch (label reference); slurmctld, slurmd, slurm-client, munge:
# the Slurm job script against a real one-node Slurm (tests/slurm/check_slurm_requeue.py starts and
# stops its daemons); openssh-server, openssh-client, iproute2 (ip netns, tc): the tests across
# namespace nodes (tests/nodes: an sshd per node, mpirun --hostfile over ssh; docs/nodes.md); ffmpeg
# and ffprobe (the programs): the packer's tests and the README recipe's make and measure their media
# with them (tests/pack, tests/e2e/check_readme_recipes.py); debootstrap, debian-archive-keyring,
# bubblewrap: the README's commands in a fresh Debian root (validation/fresh-machine-test.sh, label
# fresh); python3-venv: virtual environments for what PyPI gives, the CMake 4 the bundle's test file is
# checked under (validation/bundle/cmake4-venv.sh), TensorBoard's reader and the safetensors package
# (tests/e2e/make_pip_venv.sh). The fuzz preset's packages: the suite's short fuzzing run builds it
# (fuzz_targets_short_campaign_finds_nothing_in_avtrain). python3-hypothesis: the reconcile tool fuzzed on
# generated trace directories (validation/fuzz_reconcile.py).
tests=("${reference[@]}" "${fuzz[@]}" python3-sklearn slurmctld slurmd slurm-client munge openssh-server openssh-client iproute2 ffmpeg
       debootstrap debian-archive-keyring bubblewrap python3-venv python3-hypothesis)

# The media demo (jobscripts/media-demo.sh and its test): words spoken by espeak-ng, drawn by the
# ffmpeg program in these fonts.
demo=(ffmpeg espeak-ng fonts-dejavu-core fonts-dejavu-extra fonts-liberation2 fonts-freefont-ttf)

packages=("${base[@]}")
list=
for flag in "$@"; do
  case "$flag" in
    --cuda) packages+=("${cuda[@]}") ;;
    --tests) packages+=("${tests[@]}") ;;
    --reference) packages+=("${reference[@]}") ;;
    --demo) packages+=("${demo[@]}") ;;
    --fuzz) packages+=("${fuzz[@]}") ;;
    --list) list=1 ;;
    *) echo "install-deps.sh: unknown option $flag (--cuda, --tests, --reference, --demo, --fuzz, --list)" >&2; exit 1 ;;
  esac
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | awk '!seen[$0]++')
if [[ -n $list ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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
