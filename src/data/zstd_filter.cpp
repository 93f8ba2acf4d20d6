#include "data/zstd_filter.hpp"

#include <zstd.h>

#include <cstdlib>
#include <mutex>

#include "data/hdf5_id.hpp"

namespace avtrain::data {

namespace {

// HDF5's filter callback: compresses (or, with H5Z_FLAG_REVERSE, decompresses) *buf of nbytes into a
// new malloc'd buffer that replaces it; returns the new size, 0 on failure.
size_t zstd_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                   size_t* buf_size, void** buf) {
  void* out = nullptr;
  size_t size = 0;
  if ((flags & H5Z_FLAG_REVERSE) != 0) {
    const unsigned long long content = ZSTD_getFrameContentSize(*buf, nbytes);
    if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN) return 0;
    out = std::malloc(content > 0 ? content : 1);
    if (out == nullptr) return 0;
    size = ZSTD_decompress(out, content, *buf, nbytes);
  } else {
    const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : ZSTD_CLEVEL_DEFAULT;
    const size_t bound = ZSTD_compressBound(nbytes);
    out = std::malloc(bound);
    if (out == nullptr) return 0;
    size = ZSTD_compress(out, bound, *buf, nbytes, level);
  }
  if (ZSTD_isError(size)) {
    std::free(out);
    return 0;
  }
  std::free(*buf);
  *buf = out;
  *buf_size = size;
  return size;
}

}  // namespace

void register_zstd_filter() {
  static std::once_flag once;
  std::call_once(once, [] {
    silence_hdf5_error_printing();  // looking for a plugin that is not there pushes an error
    const std::lock_guard lock(hdf5_mutex());
    if (H5Zfilter_avail(kZstdFilter) > 0) return;
    static const H5Z_class2_t zstd_class = {H5Z_CLASS_T_VERS, kZstdFilter, 1, 1, "zstd", nullptr, nullptr, zstd_filter};
    H5Zregister(&zstd_class);
  });
}

}  // namespace avtrain::data
