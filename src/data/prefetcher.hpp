#pragma once
// A reader thread in front of a ShardSet: the trainer submits the sample indices of coming
// micro-batches and collects them later, so HDF5 reads overlap computation.
#include <future>
#include <vector>

#include "data/shard_set.hpp"

namespace avtrain::data {

class Prefetcher {
 public:
  explicit Prefetcher(ShardSet& set);
  ~Prefetcher();  // finishes the queued reads, joins the thread
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  // Reads happen in submission order on the reader thread; an error is rethrown by future::get().
  std::future<MicroBatch> submit(std::vector<std::int64_t> global_indices, Fields fields = Fields::all);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace avtrain::data
