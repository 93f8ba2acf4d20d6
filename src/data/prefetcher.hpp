#pragma once
// Reader threads in front of a ShardSet: the trainer submits the sample indices of coming
// micro-batches and collects them later, so HDF5 reads and decompression overlap computation.
#include <functional>
#include <future>
#include <vector>

#include "data/shard_set.hpp"

namespace avtrain::data {

class Prefetcher {
 public:
  // threads >= 1 (data.reader_threads): each takes the next queued micro-batch and reads it whole;
  // HDF5 calls are serialised (hdf5_mutex), the decompression runs in the threads at once.
  explicit Prefetcher(ShardSet& set, int threads = 1);
  ~Prefetcher();  // finishes the queued reads, joins the threads
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  // Reads start in submission order; each future holds its own micro-batch, whose content depends on
  // its indices only (not on the thread count or the timing). An error is rethrown by its future::get().
  // then: applied to the micro-batch on the reader thread after the read (augmentation: a pure function
  // of the micro-batch, so the content still depends on the indices only).
  using Transform = std::function<void(MicroBatch&)>;
  std::future<MicroBatch> submit(std::vector<std::int64_t> global_indices, Fields fields = Fields::all,
                                 Transform then = {});
  int threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain::data
