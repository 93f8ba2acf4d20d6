#pragma once
// The Communicator of the CUDA backend: NCCL over the GPUs of one group, on a stream of its own.
//
// It is made over the MPI communicator of the same group ("host"), which bootstraps it (rank 0's
// ncclUniqueId goes out by host broadcast) and then carries what lives on the host: the double
// all-reduce of statistics, gather and barrier. The host is either owned (make_nccl_groups: the
// MPI group lives exactly as long as its NCCL twin) or borrowed (it must outlive this object).
//
// Buffers of all_reduce, all_to_all, broadcast, send and recv are device memory. Every operation
// is enqueued on stream(); a Request completes when its operation has completed on the GPU. To make an
// operation wait for the computation that produced its buffer, call after(compute) before it, or
// follow(compute) once: make_nccl_groups has every group follow the backend's compute stream, so a
// bucket's all-reduce or a stage transfer waits, on the GPU, for the work that wrote its buffer.
//
// Point-to-point: NCCL has no tags. Sends and receives between two ranks match in the order they
// are issued; the tag arguments are ignored. A send and a receive issued separately run one after
// the other on stream(), so when two ranks both send to each other first they deadlock: issue such
// pairs (and a rank's transfer to itself) between group_begin() and group_end(), which launch them
// together. Requests of a group can be tested or waited only after group_end().
//
// Failures (a call's error, or NCCL's asynchronous error, polled while a Request is tested or
// waited) throw Error naming the group and the rank; the caller turns that into MPI_Abort. A
// Request dropped while active waits for its operation, as MpiCommunicator's does. Requests must
// not outlive their communicator.
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "parallel/communicator.hpp"
#include "parallel/process_groups.hpp"

namespace avtrain::cuda {

class NcclCommunicator final : public parallel::Communicator {
 public:
  // Collective over host, on the current CUDA device (bind_device first). name is for messages.
  NcclCommunicator(parallel::Communicator& host, std::string name);
  NcclCommunicator(std::unique_ptr<parallel::Communicator> host, std::string name);
  // Finalizes (or, after an error, aborts) the NCCL communicator; never throws.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const { return name_; }
  cudaStream_t stream() const { return stream_.get(); }
  parallel::Communicator& host() const { return *host_; }

  // sum and max as NCCL computes them (fp16/bf16 in NCCL's own arithmetic, its NaN handling).
  void all_reduce(void* data, std::size_t count, DType type, parallel::ReduceOp op) override;
  parallel::Request all_reduce_async(void* data, std::size_t count, DType type, parallel::ReduceOp op) override;
  // Host doubles, through the host communicator.
  void all_reduce(double* data, std::size_t count, parallel::ReduceOp op) override;

  parallel::Request reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  parallel::Request all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  void gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type, int root) override;
  // Device buffers; blocking (returns once recv holds every chunk).
  void all_to_all(const void* send, void* recv, std::size_t bytes_each) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void send(const void* data, std::size_t bytes, int peer, int tag) override;
  void recv(void* data, std::size_t bytes, int peer, int tag) override;
  parallel::Request send_async(const void* data, std::size_t bytes, int peer, int tag) override;
  parallel::Request recv_async(void* data, std::size_t bytes, int peer, int tag) override;
  // Host data, through the host communicator. barrier() does not order GPU work.
  std::vector<std::string> gather(const std::string& mine, int root) override;
  void barrier() override;

  std::uint64_t bytes_sent() const override { return bytes_sent_; }

  // The next operations wait (on the GPU) for the work enqueued on compute so far.
  void after(cudaStream_t compute);
  // From now on every operation first waits for the work enqueued on compute when it is issued
  // (the backend's stream: a bucket's all-reduce then starts after the backward that wrote it).
  void follow(cudaStream_t compute);
  // An NCCL group (it spans every communicator of this thread); groups nest.
  void group_begin() override;
  void group_end() override;

 private:
  struct StreamDeleter {
    void operator()(cudaStream_t s) const noexcept { cudaStreamDestroy(s); }
  };
  struct EventDeleter {
    void operator()(cudaEvent_t e) const noexcept { cudaEventDestroy(e); }
  };
  using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
  using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
  using SharedEvent = std::shared_ptr<std::remove_pointer_t<cudaEvent_t>>;
  class Pending;  // the Request of one operation (or of one group)

  SharedEvent new_event();
  parallel::Request enqueued();  // the Request of the operation just enqueued
  parallel::Request each_part(void* data, const std::vector<std::size_t>& bounds, DType type,
                              const std::function<void(int owner, void* part, std::size_t count)>& call);
  bool complete(cudaEvent_t event);
  void wait(cudaEvent_t event);
  void poll_async_error();
  void order_after_compute();
  cudaStream_t follows_ = nullptr;
  void nccl_ok(ncclResult_t result, const char* call, int line);
  void cuda_ok(cudaError_t status, const char* call, int line);
  [[noreturn]] void fail(const char* library, const char* call, const std::string& message, int line);

  std::unique_ptr<parallel::Communicator> owned_host_;
  parallel::Communicator* host_;
  std::string name_;
  std::string where_;  // "NCCL communicator 'name' (rank r of n)"
  int rank_ = 0, size_ = 1;
  Stream stream_;
  Event ready_;              // recorded on a compute stream by after()
  SharedEvent group_event_;  // recorded at the outermost group_end() for the group's Requests
  int group_depth_ = 0;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
  std::uint64_t bytes_sent_ = 0;
};

// Borrows mpi_group, which must outlive the result.
std::unique_ptr<NcclCommunicator> make_nccl_communicator(parallel::Communicator& mpi_group,
                                                         std::string name = "nccl");

// Collective over the world: the data-parallel group becomes an NCCL communicator that owns the
// MPI one it was and follows `compute` (each bucket's all-reduce waits for the backward that wrote
// it); so does the context-parallel group (its all-to-alls wait for the work that filled them),
// at cp 1 too. With pp > 1 the pipeline group becomes two, one per direction (activations forward,
// gradients back), both following `compute`. world stays MPI: it carries only host data
// (found_inf, the norm's partial sums, the reports, barriers).
void make_nccl_groups(parallel::ProcessGroups& groups, cudaStream_t compute);

}  // namespace avtrain::cuda
