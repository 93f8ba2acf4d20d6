#include "data/raw_chunks.hpp"

#include <libdeflate.h>
#include <zstd.h>

#include <time.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "data/hdf5_id.hpp"
#include "data/row_runs.hpp"
#include "data/zstd_filter.hpp"

namespace avtrain::data {

namespace {

struct FilterInfo {
  H5Z_filter_t id = H5Z_FILTER_ERROR;
  std::vector<unsigned> values;  // cd_values
  std::string name;
};

std::vector<FilterInfo> filters_of(hid_t dataset) {
  const H5Id plist(H5Dget_create_plist(dataset), H5Pclose);
  std::vector<FilterInfo> filters;
  const int count = plist.valid() ? H5Pget_nfilters(plist.get()) : 0;
  for (int i = 0; i < count; ++i) {
    FilterInfo f;
    unsigned flags = 0, config = 0;
    std::size_t n = 8;
    f.values.resize(n);
    char name[64] = {};
    f.id = H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags, &n, f.values.data(), sizeof name, name, &config);
    f.values.resize(std::min<std::size_t>(n, 8));
    f.name = name;
    filters.push_back(std::move(f));
  }
  return filters;
}

// Undoes HDF5's shuffle filter (H5Zshuffle.c): byte b of element i was stored at b * elements + i; a
// remainder of bytes % size is stored as is, at the end. Nothing is shuffled for one-byte elements or
// fewer than two elements.
void unshuffle(const unsigned char* in, std::size_t bytes, std::size_t size, unsigned char* out) {
  const std::size_t elements = size > 0 ? bytes / size : 0;
  if (size <= 1 || elements <= 1) {
    std::memcpy(out, in, bytes);
    return;
  }
  if (size == 2) {
    const unsigned char* lo = in;
    const unsigned char* hi = in + elements;
    for (std::size_t i = 0; i < elements; ++i) {
      out[2 * i] = lo[i];
      out[2 * i + 1] = hi[i];
    }
  } else if (size == 4) {
    const unsigned char* b0 = in;
    const unsigned char* b1 = in + elements;
    const unsigned char* b2 = in + 2 * elements;
    const unsigned char* b3 = in + 3 * elements;
    for (std::size_t i = 0; i < elements; ++i) {
      out[4 * i] = b0[i];
      out[4 * i + 1] = b1[i];
      out[4 * i + 2] = b2[i];
      out[4 * i + 3] = b3[i];
    }
  } else {
    for (std::size_t b = 0; b < size; ++b)
      for (std::size_t i = 0; i < elements; ++i) out[i * size + b] = in[b * elements + i];
  }
  std::memcpy(out + elements * size, in + elements * size, bytes - elements * size);
}

// One decompressor of each kind per thread, kept for the thread's life.
libdeflate_decompressor* deflate_decompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  return d.get();
}

ZSTD_DCtx* zstd_context() {
  thread_local std::unique_ptr<ZSTD_DCtx, std::size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return d.get();
}

// HDF5's deflate filter writes a zlib stream; the decoded chunk is exactly `bytes` long.
bool inflate(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t bytes) {
  std::size_t got = 0;
  libdeflate_decompressor* d = deflate_decompressor();
  return d != nullptr && libdeflate_zlib_decompress(d, in, in_bytes, out, bytes, &got) == LIBDEFLATE_SUCCESS &&
         got == bytes;
}

bool unzstd(const unsigned char* in, std::size_t in_bytes, unsigned char* out, std::size_t bytes) {
  ZSTD_DCtx* d = zstd_context();
  if (d == nullptr) return false;
  const std::size_t got = ZSTD_decompressDCtx(d, out, bytes, in, in_bytes);
  return !ZSTD_isError(got) && got == bytes;
}

std::atomic<std::int64_t> lock_held_ns{0};

}  // namespace

namespace {

std::int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

TimedHdf5Lock::TimedHdf5Lock() {
  hdf5_mutex().lock();
  since_ns_ = thread_cpu_ns();
}

TimedHdf5Lock::~TimedHdf5Lock() {
  lock_held_ns += thread_cpu_ns() - since_ns_;
  hdf5_mutex().unlock();
}

double TimedHdf5Lock::held_seconds() { return 1e-9 * double(lock_held_ns.load()); }

void require_filters_available(hid_t dataset, const std::string& path, const char* name) {
  register_zstd_filter();
  const std::lock_guard lock(hdf5_mutex());
  for (const FilterInfo& f : filters_of(dataset)) {
    if (f.id >= 0 && H5Zfilter_avail(f.id) > 0) continue;
    throw Error(path + ": " + name + " is stored with HDF5 filter " + std::to_string(f.id) +
                (f.name.empty() ? "" : " (" + f.name + ")") +
                ", which this HDF5 cannot read: its plugin is missing (install it, e.g. Debian's hdf5-filter-plugin, "
                "and point HDF5_PLUGIN_PATH at its directory)");
  }
}

RawRowPlan plan_raw_rows(hid_t dataset, hid_t file_type, hid_t mem_type, const std::string& path, const char* name) {
  require_filters_available(dataset, path, name);
  const std::lock_guard lock(hdf5_mutex());
  RawRowPlan plan;
  const H5Id type(H5Dget_type(dataset), H5Tclose);
  const H5Id space(H5Dget_space(dataset), H5Sclose);
  const H5Id plist(H5Dget_create_plist(dataset), H5Pclose);
  if (!type.valid() || !space.valid() || !plist.valid()) return plan;
  if (H5Tequal(type.get(), file_type) <= 0 || H5Tget_size(mem_type) != H5Tget_size(file_type)) return plan;
  if (H5Pget_layout(plist.get()) != H5D_CHUNKED) return plan;
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 2) return plan;
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), chunk(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  if (H5Pget_chunk(plist.get(), rank, chunk.data()) != rank || chunk[0] != 1) return plan;
  std::size_t row_bytes = H5Tget_size(file_type);
  for (int d = 1; d < rank; ++d) {
    if (chunk[d] != dims[d]) return plan;  // a row split over chunks, or partial edge chunks
    row_bytes *= dims[d];
  }
  const std::vector<FilterInfo> filters = filters_of(dataset);
  for (std::size_t i = 0; i < filters.size(); ++i) {
    const FilterInfo& f = filters[i];
    const bool last = i + 1 == filters.size();
    if (f.id == H5Z_FILTER_SHUFFLE && !f.values.empty()) {
      plan.filters.push_back(ChunkFilter::shuffle);
      plan.element_bytes = f.values[0];
    } else if (f.id == H5Z_FILTER_DEFLATE && last) {  // a compressor last: every stage before it keeps the size
      plan.filters.push_back(ChunkFilter::deflate);
    } else if (f.id == kZstdFilter && last) {
      plan.filters.push_back(ChunkFilter::zstd);
    } else {
      plan.filters.clear();
      return plan;  // fletcher32, szip, nbit, scaleoffset, another plugin: HDF5 undoes them
    }
  }
  plan.row_bytes = row_bytes;
  plan.raw = true;
  return plan;
}

bool decode_chunk(const RawRowPlan& plan, std::uint32_t filter_mask, const unsigned char* stored,
                  std::size_t stored_bytes, unsigned char* out) {
  thread_local std::vector<unsigned char> scratch;
  const std::size_t bytes = plan.row_bytes;
  std::vector<std::size_t> stages;  // the filters to undo, last applied first
  for (std::size_t i = plan.filters.size(); i-- > 0;)
    if ((filter_mask & (1u << i)) == 0) stages.push_back(i);
  if (stages.empty()) {
    if (stored_bytes != bytes) return false;
    std::memcpy(out, stored, bytes);
    return true;
  }
  // Stages alternate between scratch and out so that the last one writes into out.
  if (stages.size() > 1) scratch.resize(bytes);
  const unsigned char* in = stored;
  std::size_t in_bytes = stored_bytes;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    unsigned char* to = (stages.size() - 1 - s) % 2 == 0 ? out : scratch.data();
    switch (plan.filters[stages[s]]) {
      case ChunkFilter::deflate:
        if (!inflate(in, in_bytes, to, bytes)) return false;
        break;
      case ChunkFilter::zstd:
        if (!unzstd(in, in_bytes, to, bytes)) return false;
        break;
      case ChunkFilter::shuffle:
        if (in_bytes != bytes) return false;
        if (in == to) {  // two shuffles in a row: undo in place through a copy
          std::vector<unsigned char> copy(in, in + in_bytes);
          unshuffle(copy.data(), bytes, plan.element_bytes, to);
        } else {
          unshuffle(in, bytes, plan.element_bytes, to);
        }
        break;
    }
    in = to;
    in_bytes = bytes;
  }
  return true;
}

void read_raw_rows(hid_t dataset, hid_t mem_type, const RawRowPlan& plan, const std::vector<std::int64_t>& rows,
                   void* out, const std::string& path, const char* name) {
  auto* to = static_cast<unsigned char*>(out);
  const auto unreadable = [&](std::int64_t row, const char* what) {
    return Error(path + ": " + name + "[" + std::to_string(row) + "] " + what + " (the file is truncated or corrupt)");
  };
  if (!plan.raw) {
    const TimedHdf5Lock lock;
    if (!read_row_runs(dataset, mem_type, row_runs(rows), out))
      throw Error(path + ": " + name + " cannot be read (the file is truncated or corrupt)");
    return;
  }
  struct Stored {
    std::vector<unsigned char> bytes;
    std::uint32_t mask = 0;
    bool unallocated = false;  // read through H5Dread (never written: the fill value)
  };
  std::vector<Stored> stored(rows.size());
  {
    const TimedHdf5Lock lock;
    const H5Id space(H5Dget_space(dataset), H5Sclose);
    const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : 0;
    std::vector<hsize_t> offset(static_cast<std::size_t>(std::max(rank, 1)), 0);
    for (std::size_t k = 0; k < rows.size(); ++k) {
      offset[0] = static_cast<hsize_t>(rows[k]);
      // A chunk never written (HDF5 1.10 fails the size query for it) is read through H5Dread, which
      // gives the fill value; so is one whose raw read fails, and H5Dread then says what is wrong.
      hsize_t size = 0;
      const bool allocated = H5Dget_chunk_storage_size(dataset, offset.data(), &size) >= 0 && size > 0;
      if (allocated) {
        stored[k].bytes.resize(size);
        if (H5Dread_chunk(dataset, H5P_DEFAULT, offset.data(), &stored[k].mask, stored[k].bytes.data()) >= 0) continue;
      }
      stored[k].unallocated = true;
      if (!read_row_runs(dataset, mem_type, {{offset[0], 1}}, to + k * plan.row_bytes))
        throw unreadable(rows[k], "cannot be read");
    }
  }
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (stored[k].unallocated) continue;
    if (!decode_chunk(plan, stored[k].mask, stored[k].bytes.data(), stored[k].bytes.size(), to + k * plan.row_bytes))
      throw unreadable(rows[k], "does not decompress");
  }
}

}  // namespace avtrain::data
