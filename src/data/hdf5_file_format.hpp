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

// On a file creation (or dataset creation) property list: no access, change and modification times in
// the object's header. The 1.8 format's headers hold them when asked, HDF5's default, so that two files
// written from the same values at different times would differ in their bytes (the root group's).
inline bool record_no_times(hid_t creation_plist) { return H5Pset_obj_track_times(creation_plist, 0) >= 0; }

}  // namespace avtrain::data
