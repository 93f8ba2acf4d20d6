#pragma once
// HDF5's registered zstd filter (id 32015, the HDF Group's H5Z-ZSTD plugin's format: each chunk one
// zstd frame, cd_values[0] the level), registered in this process with libzstd when the installed
// HDF5 has no plugin for it, so avtrain reads and writes zstd shards that h5py (hdf5plugin) and any
// HDF5 with that plugin read too.
#include <hdf5.h>

namespace avtrain::data {

constexpr H5Z_filter_t kZstdFilter = 32015;

// Makes filter 32015 available to HDF5 (once per process; a plugin already found is kept).
void register_zstd_filter();

}  // namespace avtrain::data
