#pragma once
// The copies between the memory a backend computes in ("device") and host memory that MPI can
// move, as StagedCommunicator makes them. On CUDA: page-locked host buffers and one stream of
// copies that follows the compute stream (cuda/pinned_staging.hpp). On the CPU: buffers from the
// heap and copies made late (make_late_host_staging), so that the staged path and its ordering run
// in CPU-only tests (--debug.stage_comm).
//
// The copies of one staging complete in the order they were enqueued, each after the computation
// enqueued before it: a copy's ticket is its place in that order (1, 2, ...), and done(t) means
// that copy and every one before it have completed.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace avtrain::parallel {

class DeviceStaging {
 public:
  using Ticket = std::uint64_t;  // 0: no copy (always done)
  virtual ~DeviceStaging() = default;

  // Host memory of `bytes` (> 0) that copies may read and write; freed with free_host.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void free_host(void* host) noexcept = 0;

  // Enqueue a copy of `bytes` (> 0), after the computation enqueued so far.
  virtual Ticket to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual Ticket to_device(void* device, const void* host, std::size_t bytes) = 0;

  // True once copy t and every one before it have completed; never blocks.
  virtual bool done(Ticket t) = 0;
  // Returns once copy t and every one before it have completed.
  virtual void wait(Ticket t) = 0;
  // The ticket of the copy enqueued last (0: none yet).
  virtual Ticket last() const = 0;
};

// Host memory on both sides (the CPU backend): a copy is made only when done() or wait() gets to it,
// done() making one on every 8th call, so every path that reads a host buffer too early, or
// polls once and then blocks, is caught.
std::unique_ptr<DeviceStaging> make_late_host_staging();

}  // namespace avtrain::parallel
