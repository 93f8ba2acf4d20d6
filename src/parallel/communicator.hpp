#pragma once
// The one interface every collective and point-to-point transfer of a run goes through. The MPI
// implementation (mpi_communicator.hpp) serves the CPU backend; an NCCL one serves CUDA. Buffers
// are host or device memory as the implementation expects; a caller keeps a buffer alive, and
// does not touch it, until the Request of a non-blocking call has completed.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace avtrain::parallel {

enum class ReduceOp { sum, max };

// A non-blocking operation in flight. An empty Request is complete.
class Request {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual bool test() = 0;  // progresses the operation; true once it has completed
    virtual void wait() = 0;
  };
  Request() = default;
  explicit Request(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // True once complete (then the Request is empty).
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return !impl_;
  }
  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  bool active() const { return bool(impl_); }

 private:
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over the group. fp16/bf16 values are reduced pairwise in fp32 and rounded back
  // (round-to-nearest-even) after each pairwise step.
  virtual void all_reduce(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual Request all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  // Small statistics (losses, counters) in double precision.
  virtual void all_reduce(double* data, std::size_t count, ReduceOp op) = 0;

  // A buffer cut into the members' parts (parallel.zero): member r owns elements [bounds[r],
  // bounds[r + 1]) (bounds: size() + 1 ascending offsets, from 0 to the buffer's count).
  // reduce_scatter: the buffer is summed over the group, and each member gets the sums of its own
  // part, in place (the rest of its buffer is left undefined). all_gather: each member's own part
  // goes to every member, in place. Each counts half its buffer in bytes_sent (an all-reduce is a
  // reduce-scatter followed by an all-gather). gather: member r's part (`mine`) to `root`, which
  // receives every part at its place in `all` (bounds.back() elements; ignored elsewhere).
  virtual Request reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) = 0;
  virtual Request all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) = 0;
  virtual void gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type, int root) = 0;

  // Every member's `send` holds size() chunks of `bytes_each` bytes: chunk r goes to member r, which
  // puts it at chunk `this member's rank` of its `recv` (context parallelism's head exchange). The
  // chunk for this member itself is copied. Counts (size() - 1) x bytes_each in bytes_sent.
  virtual void all_to_all(const void* send, void* recv, std::size_t bytes_each) = 0;

  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void send(const void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual void recv(void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual Request send_async(const void* data, std::size_t bytes, int peer, int tag) = 0;
  virtual Request recv_async(void* data, std::size_t bytes, int peer, int tag) = 0;
  // Sends and receives issued between group_begin() and group_end() start together (NCCL's group
  // calls, which pair them so that a send and a receive do not wait on each other); their Requests
  // are tested or waited after group_end(). Where every send and receive is non-blocking anyway
  // (MPI), the group changes nothing.
  virtual void group_begin() {}
  virtual void group_end() {}
  // Every member's string, in rank order, at root; an empty vector elsewhere.
  virtual std::vector<std::string> gather(const std::string& mine, int root) = 0;
  virtual void barrier() = 0;

  // Payload bytes this member has handed to all-reduces and sends so far (count x type size per
  // all-reduce): what gradient compression halves.
  virtual std::uint64_t bytes_sent() const = 0;

  // Ends every process of the job now with `code`: the last word of a rank that cannot go on and
  // cannot tell the others (a watchdog). Default: this process alone, which an MPI launcher takes
  // as the end of the job.
  [[noreturn]] virtual void abort_job(int code) {
    std::fflush(nullptr);
    std::_Exit(code);
  }
};

// Throws Error unless `bounds` cuts a buffer into `size` parts as the ZeRO calls take it.
inline void require_parts(const std::vector<std::size_t>& bounds, int size, const std::string& where) {
  bool ascending = bounds.size() == std::size_t(size) + 1 && bounds.front() == 0;
  for (std::size_t i = 1; ascending && i < bounds.size(); ++i) ascending = bounds[i - 1] <= bounds[i];
  require(ascending, "internal: the parts of a buffer on the " + where + " are not " + std::to_string(size) +
                         " ascending ranges from 0");
}

// Throws Error unless 0 <= rank < size: `role` `rank` (e.g. "send peer 3") is not a member of
// `where` (the communicator and this member, as its messages name them).
inline void require_member(int rank, int size, const std::string& where, const char* role) {
  require(rank >= 0 && rank < size, std::string(role) + " " + std::to_string(rank) + " is not a member of the " + where +
                                        ": ranks are 0.." + std::to_string(size - 1));
}

}  // namespace avtrain::parallel
