#include "data/prefetcher.hpp"

#include <malloc.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.hpp"

namespace avtrain::data {

namespace {

// glibc's malloc (per-thread arenas, a dynamic mmap threshold) gives the micro-batches' memory back to
// the kernel and faults it in again: measured at the large shape, uncompressed, 22 page faults a sample
// with one reader thread and 134 with two (2-4x fewer samples per CPU-second), at the VGGSound-like
// shape ~900 a sample (every page of every sample). A fixed mmap threshold of 32 MiB and a trim
// threshold of 256 MiB keep it for reuse (3-8x fewer faults). Process-wide, once; no result changes.
void keep_batch_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

}  // namespace

struct Prefetcher::Impl {
  struct Job {
    std::vector<std::int64_t> indices;
    Fields fields = Fields::all;
    std::promise<MicroBatch> result;
    Transform then;
  };

  Impl(ShardSet& shard_set, int threads) : set(shard_set) {
    require(threads >= 1, "data.reader_threads = " + std::to_string(threads) + ": must be >= 1");
    keep_batch_memory();
    for (int t = 0; t < threads; ++t) workers.emplace_back([this] { run(); });
  }

  ~Impl() {
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread& w : workers) w.join();
  }

  // Takes queued jobs, oldest first, until stopping is set and the queue is empty.
  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex);
        wake.wait(lock, [this] { return stopping || !jobs.empty(); });
        if (jobs.empty()) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      try {
        MicroBatch batch = set.read(job.indices, job.fields);
        if (job.then) job.then(batch);
        job.result.set_value(std::move(batch));
      } catch (...) {
        job.result.set_exception(std::current_exception());
      }
    }
  }

  ShardSet& set;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job> jobs;
  bool stopping = false;
  std::vector<std::thread> workers;  // last member: they start after everything they use exists
};

Prefetcher::Prefetcher(ShardSet& set, int threads) : impl_(std::make_unique<Impl>(set, threads)) {}

Prefetcher::~Prefetcher() = default;

int Prefetcher::threads() const { return static_cast<int>(impl_->workers.size()); }

std::future<MicroBatch> Prefetcher::submit(std::vector<std::int64_t> global_indices, Fields fields, Transform then) {
  Impl::Job job{std::move(global_indices), fields, {}, std::move(then)};
  std::future<MicroBatch> result = job.result.get_future();
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->jobs.push_back(std::move(job));
  }
  impl_->wake.notify_one();
  return result;
}

}  // namespace avtrain::data
