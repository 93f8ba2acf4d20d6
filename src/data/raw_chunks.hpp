#pragma once
// Reading rows of a dataset stored one row per chunk (the shards' /audio and /video) without holding
// the HDF5 lock for the decompression: each row's chunk is read raw (H5Dread_chunk) under
// hdf5_mutex(), and its filter pipeline (deflate, zstd, HDF5's byte shuffle) undone afterwards in the
// calling thread, so several reader threads inflate at once. A dataset the raw path does not know (a
// contiguous one, chunks of another shape, a filter other than those three, a type other than the one
// read) is read through H5Dread (read_row_runs) under the lock: the bytes are the same either way.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain::data {

// hdf5_mutex() held by the training reads (read_rows), timed in the holding thread's CPU time (not the
// wall clock, which would count the time a preempted holder waits for a core): the share of a reader's
// CPU time spent holding it is what no number of reader threads can overlap (read-bench reports it).
class TimedHdf5Lock {
 public:
  TimedHdf5Lock();
  ~TimedHdf5Lock();
  TimedHdf5Lock(const TimedHdf5Lock&) = delete;
  TimedHdf5Lock& operator=(const TimedHdf5Lock&) = delete;
  static double held_seconds();  // in total, since the process started

 private:
  std::int64_t since_ns_ = 0;
};

enum class ChunkFilter { shuffle, deflate, zstd };

struct RawRowPlan {
  bool raw = false;                  // false: read_raw_rows reads through H5Dread
  std::vector<ChunkFilter> filters;  // the pipeline in write order (undone in reverse)
  std::size_t element_bytes = 1;     // the shuffle's element size
  std::size_t row_bytes = 0;         // one row (one chunk) as read
};

// Every filter of the dataset's pipeline available to this HDF5, or an Error naming the file, the
// dataset and the filter (a plugin missing at read time). zstd is registered in-process first.
void require_filters_available(hid_t dataset, const std::string& path, const char* name);

// How rows of the dataset can be read into memory of mem_type, whose file type must equal file_type
// for the raw path (the bytes are copied as stored). Also require_filters_available.
RawRowPlan plan_raw_rows(hid_t dataset, hid_t file_type, hid_t mem_type, const std::string& path,
                         const char* name);

// Reads `rows` (sorted ascending, unique, in range) into out, densely, as read_row_runs would. Takes
// hdf5_mutex() itself around its HDF5 calls only. Throws Error naming the file, dataset and row.
void read_raw_rows(hid_t dataset, hid_t mem_type, const RawRowPlan& plan, const std::vector<std::int64_t>& rows,
                   void* out, const std::string& path, const char* name);

// The filter pipeline undone on one stored chunk into out (plan.row_bytes); filter_mask as
// H5Dread_chunk reports it (bit i set: filter i was skipped). false when the chunk does not decode.
bool decode_chunk(const RawRowPlan& plan, std::uint32_t filter_mask, const unsigned char* stored,
                  std::size_t stored_bytes, unsigned char* out);

}  // namespace avtrain::data
