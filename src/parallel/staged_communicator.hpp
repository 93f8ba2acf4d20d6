#pragma once
// A Communicator over device memory that MPI cannot read: every buffer is copied to host memory
// (DeviceStaging), moved by a host Communicator (MPI), and copied back. It is --comm mpi on the
// CUDA backend: several ranks may then share one GPU, and a node whose NCCL is missing or broken
// still trains. Sums of fp16/bf16 are the host communicator's (the CPU's user ops).
//
// Overlap: a non-blocking call only enqueues the copy to the host and returns; the MPI part starts
// once that copy has completed (checked whenever any Request of this communicator is tested or
// waited), and the copy back is enqueued once MPI has completed. The Request completes when the
// copy back has. A gradient bucket's copy therefore runs beside the backward of the next bucket,
// and its reduction beside the copies of the others, as on NCCL.
//
// Order: the MPI parts of collectives and sends start in the order the calls were made (a queue),
// so every member starts its collectives in the same order whichever copy finishes first; receives
// are posted at once (into host memory; nothing to copy first).
//
// Progress: an MPI part can start only when this rank polls. While a request is waited, the queued
// operations of every StagedCommunicator of the process keep starting as their copies complete (a
// peer may need one of them before it can send what the wait is for); a blocking call that goes to
// the host communicator (gather, broadcast, barrier, the double all-reduce) first starts everything
// queued in every one of them.
//
// Host buffers come from a pool that keeps what it allocated: after the first step a run allocates
// no more. Requests must not outlive the communicator; one dropped while active waits for its
// operation, as MpiCommunicator's do.
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/device_staging.hpp"
#include "parallel/process_groups.hpp"

namespace avtrain::parallel {

class StagedCommunicator final : public Communicator {
 public:
  // name is for messages ("data-parallel", "pipeline").
  StagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceStaging> staging, std::string name);
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void all_reduce(void* data, std::size_t count, DType type, ReduceOp op) override;
  Request all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op) override;  // host doubles
  Request reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  Request all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  void gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type, int root) override;
  void all_to_all(const void* send, void* recv, std::size_t bytes_each) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void send(const void* data, std::size_t bytes, int peer, int tag) override;
  void recv(void* data, std::size_t bytes, int peer, int tag) override;
  Request send_async(const void* data, std::size_t bytes, int peer, int tag) override;
  Request recv_async(void* data, std::size_t bytes, int peer, int tag) override;
  std::vector<std::string> gather(const std::string& mine, int root) override;  // host strings
  void barrier() override;
  std::uint64_t bytes_sent() const override { return host_->bytes_sent(); }
  [[noreturn]] void abort_job(int code) override;  // the host communicator's

  // Bytes of host memory the pool holds (for the log and the tests).
  std::size_t host_bytes() const;

 private:
  struct Operation;
  class Pending;
  class HostPool;

  // An operation whose copy to the host is `copied` (0: none), which `start` then hands to MPI and
  // `finish` (may be empty) copies back; its `host` buffer goes back to the pool when it completes.
  Request queue(DeviceStaging::Ticket copied, std::function<Request()> start,
                std::function<DeviceStaging::Ticket()> finish, void* host);
  // The newest copy queued so far (up to and including `upto`, when given).
  DeviceStaging::Ticket last_queued_copy(const Operation* upto = nullptr) const;
  void start_ready();  // starts, in order, the queued operations whose copy has completed
  static void start_ready_everywhere();  // start_ready() of every StagedCommunicator of the process
  static void start_all();  // every StagedCommunicator's queued copies waited for, their MPI parts started
  bool progress(Operation& op, bool block);
  void* take(std::size_t bytes);

  std::unique_ptr<Communicator> host_;
  std::unique_ptr<DeviceStaging> staging_;
  std::unique_ptr<HostPool> pool_;
  std::string where_;
  std::deque<std::shared_ptr<Operation>> waiting_;  // collectives and sends not yet handed to MPI
};

// Makes one DeviceStaging per group, named by it.
using StagingMaker = std::function<std::unique_ptr<DeviceStaging>(const std::string& group)>;

// The data-parallel, context-parallel and pipeline groups become StagedCommunicators over the MPI
// ones they were; the world stays as it is (it carries host data only).
void stage_through_host(ProcessGroups& groups, const StagingMaker& make);

}  // namespace avtrain::parallel
