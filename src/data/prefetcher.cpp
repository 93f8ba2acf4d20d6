#include "data/prefetcher.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace avtrain::data {

struct Prefetcher::Impl {
  struct Job {
    std::vector<std::int64_t> indices;
    Fields fields = Fields::all;
    std::promise<MicroBatch> result;
  };

  explicit Impl(ShardSet& shard_set) : set(shard_set), worker([this] { run(); }) {}

  ~Impl() {
    {
      const std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_one();
    worker.join();
  }

  // Runs every queued job, in order, until stopping is set and the queue is empty.
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
        job.result.set_value(set.read(job.indices, job.fields));
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
  std::thread worker;  // last member: starts after everything it uses exists
};

Prefetcher::Prefetcher(ShardSet& set) : impl_(std::make_unique<Impl>(set)) {}

Prefetcher::~Prefetcher() = default;

std::future<MicroBatch> Prefetcher::submit(std::vector<std::int64_t> global_indices, Fields fields) {
  Impl::Job job{std::move(global_indices), fields, {}};
  std::future<MicroBatch> result = job.result.get_future();
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->jobs.push_back(std::move(job));
  }
  impl_->wake.notify_one();
  return result;
}

}  // namespace avtrain::data
