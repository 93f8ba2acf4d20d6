#!/usr/bin/env bash
# zlib's inflate (HDF5's deflate filter uses it) against libdeflate's on one stored chunk of a shard
# (docs/data-reader.md): the chunk is taken raw with h5py, inflated 40 times by each.
#   validation/inflate-bench.sh SHARD.h5 [DATASET]     (default /video; row 3)
set -euo pipefail
shard=$1 dataset=${2:-/video}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
bytes=$(/usr/bin/python3 - "$shard" "$dataset" "$tmp/chunk" <<'PY'
import sys, h5py, numpy as np
d = h5py.File(sys.argv[1], "r")[sys.argv[2]]
mask, raw = d.id.read_direct_chunk((3,) + (0,) * (d.ndim - 1))
open(sys.argv[3], "wb").write(raw)
print(int(np.prod(d.chunks)) * d.dtype.itemsize)
PY
)
cat > "$tmp/bench.cpp" <<'CPP'
#include <libdeflate.h>
#include <zlib.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
int main(int, char** argv) {
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<unsigned char> z((std::istreambuf_iterator<char>(in)), {});
  const size_t n = std::stoul(argv[2]);
  std::vector<unsigned char> out(n);
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  for (int which = 0; which < 2; ++which) {
    const auto t0 = std::chrono::steady_clock::now();
    const int reps = 40;
    for (int r = 0; r < reps; ++r) {
      if (which == 0) {
        uLongf len = n;
        if (uncompress(out.data(), &len, z.data(), z.size()) != Z_OK || len != n) return 1;
      } else {
        size_t got = 0;
        if (libdeflate_zlib_decompress(d, z.data(), z.size(), out.data(), n, &got) != LIBDEFLATE_SUCCESS || got != n) return 2;
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %.0f MB/s decoded\n", which == 0 ? "zlib uncompress" : "libdeflate", reps * double(n) / s / 1e6);
  }
}
CPP
g++ -O2 "$tmp/bench.cpp" -o "$tmp/bench" -lz -ldeflate
echo "$shard $dataset: one chunk, $(stat -c %s "$tmp/chunk") bytes stored, $bytes decoded"
"$tmp/bench" "$tmp/chunk" "$bytes"
