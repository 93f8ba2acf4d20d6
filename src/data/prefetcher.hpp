#pragma once
// Reader threads in front of a ShardSet: the trainer submits the sample indices of coming
// micro-batches and collects them later, so HDF5 reads and decompression overlap computation.
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
  std::future<MicroBatch> submit(std::vector<std::int64_t> global_indices, Fields fields = Fields::all);
  int threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain::data
