#pragma once
// The HDF5 file format of the files avtrain writes and reads back (shards, checkpoints): that of
// HDF5 1.8, whose superblock, object headers, B-trees and heaps of links and attributes carry Jenkins
// checksums that the library verifies before it decodes them. HDF5's default, the 1.6 format, has
// none: a changed byte in its metadata is decoded as it is, and HDF5 1.10.8 (Debian 12) reads some
// such bytes out of freed or unowned memory (docs/fuzzing.md, "Findings in HDF5"). A file in the
// 1.8 format reads with HDF5 1.8 and later (h5py, h5dump) as before.
#include <hdf5.h>

namespace avtrain::data {

// On a file access property list before H5Fcreate; false when HDF5 refuses it.
inline bool use_checksummed_metadata(hid_t fapl) {
  return H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) >= 0;
}

}  // namespace avtrain::data
