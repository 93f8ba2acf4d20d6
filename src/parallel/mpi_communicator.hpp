#pragma once
// The Communicator of the CPU backend, over one MPI communicator. Every MPI call is checked: a
// failure throws Error naming the call, the group ("world", "data-parallel", "context-parallel", "pipeline") and the
// rank. Transfers larger than an MPI int count go in chunks of at most max_chunk elements.
//
// A Request from this class that is dropped while still active waits for its operation in the
// destructor, so no MPI request is left dangling over a buffer that is about to be freed.
#include <mpi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"

namespace avtrain::parallel {

class MpiCommunicator final : public Communicator {
 public:
  static constexpr std::size_t max_chunk = std::size_t(1) << 30;

  // After MPI_Init_thread. When owned, comm is freed in the destructor (never MPI_COMM_WORLD or
  // MPI_COMM_SELF). Sets MPI_ERRORS_RETURN on comm. A chunk below max_chunk is for tests of the
  // chunked paths.
  MpiCommunicator(MPI_Comm comm, bool owned, std::string name, std::size_t chunk = max_chunk);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const { return name_; }
  MPI_Comm native() const { return comm_; }

  // fp32 max is MPI_MAX, whose treatment of NaN is the MPI library's choice: to agree on "found a
  // non-finite value", reduce a 0/1 flag rather than the values. fp16/bf16 max propagates NaN.
  void all_reduce(void* data, std::size_t count, DType type, ReduceOp op) override;
  Request all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op) override;

  Request reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  Request all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) override;
  void gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type, int root) override;
  // MPI_Alltoall of bytes; chunks of over max_chunk bytes go in pieces.
  void all_to_all(const void* send, void* recv, std::size_t bytes_each) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void send(const void* data, std::size_t bytes, int peer, int tag) override;
  void recv(void* data, std::size_t bytes, int peer, int tag) override;
  Request send_async(const void* data, std::size_t bytes, int peer, int tag) override;
  Request recv_async(void* data, std::size_t bytes, int peer, int tag) override;
  std::vector<std::string> gather(const std::string& mine, int root) override;
  void barrier() override;
  // MPI_Abort on MPI_COMM_WORLD (from any thread: it is the one call a stuck job still needs).
  [[noreturn]] void abort_job(int code) override;

  std::uint64_t bytes_sent() const override { return bytes_sent_; }

  // Collective over this communicator: the members passing the same color, ranked by key.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;
  // Collective over this communicator: the members on this node (sharing memory).
  std::unique_ptr<MpiCommunicator> split_shared_memory(std::string name) const;

 private:
  void check(int rc, const char* call) const;
  MPI_Op op_of(DType type, ReduceOp op) const;
  void release() noexcept;
  template <class Start>
  Request each_piece(void* data, const std::vector<std::size_t>& bounds, DType type, Start start);

  MPI_Comm comm_;
  bool owned_;
  std::string name_;
  std::size_t chunk_;
  int rank_ = 0, size_ = 1;
  std::string where_;  // "communicator 'name' (rank r of n, world rank w)", for error messages
  std::array<MPI_Op, 4> half_ops_{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // {sum, max} x {fp16, bf16}
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace avtrain::parallel
