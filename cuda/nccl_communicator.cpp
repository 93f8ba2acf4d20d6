#include "nccl_communicator.hpp"

#include <functional>

#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "cuda_check.hpp"

#define NCCL_OK(call) nccl_ok((call), #call, __LINE__)
#define CUDA_OK(call) cuda_ok((call), #call, __LINE__)

namespace avtrain::cuda {
namespace {

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::e4m3:
    case DType::e5m2: break;  // no collective carries fp8 codes: their scales differ per replica
  }
  throw Error("NCCL: unknown DType");
}

ncclRedOp_t nccl_op(parallel::ReduceOp op) { return op == parallel::ReduceOp::sum ? ncclSum : ncclMax; }

parallel::Communicator& non_null(const std::unique_ptr<parallel::Communicator>& host) {
  require(host != nullptr, "NcclCommunicator: no host communicator to bootstrap from");
  return *host;
}

}  // namespace

class NcclCommunicator::Pending final : public parallel::Request::Impl {
 public:
  Pending(NcclCommunicator& comm, SharedEvent event) : comm_(comm), event_(std::move(event)) {}
  // Waits rather than leave the GPU writing into a buffer its owner may free next; not while an
  // error unwinds (a peer that has stopped never completes it, and the world is being aborted).
  ~Pending() override {
    if (done_ || comm_.failed_ || std::uncaught_exceptions() > 0) return;
    try {
      comm_.wait(event_.get());
    } catch (...) {
    }
  }
  bool test() override { return done_ = comm_.complete(event_.get()); }
  void wait() override {
    comm_.wait(event_.get());
    done_ = true;
  }

 private:
  NcclCommunicator& comm_;
  SharedEvent event_;
  bool done_ = false;
};

NcclCommunicator::NcclCommunicator(parallel::Communicator& host, std::string name)
    : host_(&host), name_(std::move(name)), rank_(host.rank()), size_(host.size()) {
  where_ = "NCCL communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));  // not ordered with the legacy default stream
  stream_.reset(stream);
  cudaEvent_t ready = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  ready_.reset(ready);

  ncclUniqueId id{};
  if (rank_ == 0) NCCL_OK(ncclGetUniqueId(&id));
  host.broadcast(&id, sizeof id, 0);
  NCCL_OK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<parallel::Communicator> host, std::string name)
    : NcclCommunicator(non_null(host), std::move(name)) {
  owned_host_ = std::move(host);
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_) return;
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm_, &async);
  // Finalize synchronises with the peers; after an error, or while unwinding from one, they may never come.
  const bool broken = failed_ || async != ncclSuccess || std::uncaught_exceptions() > 0;
  if (!broken && ncclCommFinalize(comm_) == ncclSuccess)
    ncclCommDestroy(comm_);
  else
    ncclCommAbort(comm_);
}

void NcclCommunicator::fail(const char* library, const char* call, const std::string& message, int line) {
  failed_ = true;
  cuda::fail(library, call, message + " on the " + where_, __FILE__, line);
}

void NcclCommunicator::nccl_ok(ncclResult_t result, const char* call, int line) {
  if (result == ncclSuccess) return;
  std::string message = ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(comm_); last && *last) message += std::string(" (") + last + ")";
  fail("NCCL", call, message, line);
}

void NcclCommunicator::cuda_ok(cudaError_t status, const char* call, int line) {
  if (status == cudaSuccess) return;
  fail("CUDA", call, std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status), line);
}

void NcclCommunicator::poll_async_error() {
  ncclResult_t async = ncclSuccess;
  NCCL_OK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress)
    nccl_ok(async, "ncclCommGetAsyncError (asynchronous error)", __LINE__);
}

NcclCommunicator::SharedEvent NcclCommunicator::new_event() {
  cudaEvent_t event = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return SharedEvent(event, EventDeleter{});
}

parallel::Request NcclCommunicator::enqueued() {
  // Inside a group nothing is launched before group_end(), which records the group's one event.
  if (group_depth_ > 0) {
    if (!group_event_) group_event_ = new_event();
    return parallel::Request(std::make_unique<Pending>(*this, group_event_));
  }
  SharedEvent event = new_event();
  CUDA_OK(cudaEventRecord(event.get(), stream_.get()));
  return parallel::Request(std::make_unique<Pending>(*this, std::move(event)));
}

bool NcclCommunicator::complete(cudaEvent_t event) {
  require(group_depth_ == 0,
          "a Request of the " + where_ + " was tested inside an NCCL group: test it after group_end()");
  poll_async_error();
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) return false;
  CUDA_OK(status);
  return true;
}

void NcclCommunicator::wait(cudaEvent_t event) {
  // Polled, not cudaEventSynchronize: that would never return when a peer has failed.
  while (!complete(event)) std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void NcclCommunicator::all_reduce(void* data, std::size_t count, DType type, parallel::ReduceOp op) {
  all_reduce_async(data, count, type, op).wait();
}

parallel::Request NcclCommunicator::all_reduce_async(void* data, std::size_t count, DType type, parallel::ReduceOp op) {
  order_after_compute();
  NCCL_OK(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op), comm_, stream_.get()));
  bytes_sent_ += count * dtype_size(type);
  return enqueued();
}

void NcclCommunicator::all_reduce(double* data, std::size_t count, parallel::ReduceOp op) {
  host_->all_reduce(data, count, op);
  bytes_sent_ += count * sizeof(double);
}

// A part per member: one ncclReduce (in place at its owner) or ncclBroadcast (from its owner) per
// non-empty part, in one group.
parallel::Request NcclCommunicator::each_part(void* data, const std::vector<std::size_t>& bounds, DType type,
                                              const std::function<void(int owner, void* part, std::size_t count)>& call) {
  parallel::require_parts(bounds, size_, where_);
  const std::size_t element = dtype_size(type);
  group_begin();
  order_after_compute();
  for (int r = 0; r < size_; ++r) {
    const std::size_t n = bounds[std::size_t(r) + 1] - bounds[std::size_t(r)];
    if (n > 0) call(r, static_cast<char*>(data) + bounds[std::size_t(r)] * element, n);
  }
  group_end();
  bytes_sent_ += bounds.back() * element / 2;
  return enqueued();
}

parallel::Request NcclCommunicator::reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds,
                                                        DType type) {
  return each_part(data, bounds, type, [&](int owner, void* part, std::size_t n) {
    NCCL_OK(ncclReduce(part, part, n, nccl_type(type), nccl_op(parallel::ReduceOp::sum), owner, comm_, stream_.get()));
  });
}

parallel::Request NcclCommunicator::all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) {
  return each_part(data, bounds, type, [&](int owner, void* part, std::size_t n) {
    NCCL_OK(ncclBroadcast(part, part, n, nccl_type(type), owner, comm_, stream_.get()));
  });
}

void NcclCommunicator::gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type,
                              int root) {
  parallel::require_parts(bounds, size_, where_);
  parallel::require_member(root, size_, where_, "gather root");
  const std::size_t element = dtype_size(type);
  const auto count = [&](int r) { return bounds[std::size_t(r) + 1] - bounds[std::size_t(r)]; };
  group_begin();
  order_after_compute();
  if (rank_ == root) {
    if (count(root) > 0)
      CUDA_OK(cudaMemcpyAsync(static_cast<char*>(all) + bounds[std::size_t(root)] * element, mine, count(root) * element,
                              cudaMemcpyDeviceToDevice, stream_.get()));
    for (int r = 0; r < size_; ++r)
      if (r != root && count(r) > 0)
        NCCL_OK(ncclRecv(static_cast<char*>(all) + bounds[std::size_t(r)] * element, count(r), nccl_type(type), r, comm_,
                         stream_.get()));
  } else if (count(rank_) > 0) {
    NCCL_OK(ncclSend(mine, count(rank_), nccl_type(type), root, comm_, stream_.get()));
    bytes_sent_ += count(rank_) * element;
  }
  group_end();
  enqueued().wait();
}

// A send and a receive per peer in one group; the own chunk by a device copy on stream(). Blocking,
// as gather and broadcast: the caller reads recv next.
void NcclCommunicator::all_to_all(const void* send, void* recv, std::size_t bytes_each) {
  if (bytes_each == 0) return;
  const auto* from = static_cast<const char*>(send);
  auto* to = static_cast<char*>(recv);
  const auto chunk = [&](int r) { return std::size_t(r) * bytes_each; };
  group_begin();
  order_after_compute();
  CUDA_OK(cudaMemcpyAsync(to + chunk(rank_), from + chunk(rank_), bytes_each, cudaMemcpyDeviceToDevice, stream_.get()));
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    NCCL_OK(ncclSend(from + chunk(r), bytes_each, ncclUint8, r, comm_, stream_.get()));
    NCCL_OK(ncclRecv(to + chunk(r), bytes_each, ncclUint8, r, comm_, stream_.get()));
  }
  group_end();
  bytes_sent_ += std::uint64_t(size_ - 1) * bytes_each;
  enqueued().wait();
}

void NcclCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  parallel::require_member(root, size_, where_, "broadcast root");
  order_after_compute();
  NCCL_OK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_.get()));
  enqueued().wait();
}

void NcclCommunicator::send(const void* data, std::size_t bytes, int peer, int tag) {
  send_async(data, bytes, peer, tag).wait();
}

void NcclCommunicator::recv(void* data, std::size_t bytes, int peer, int tag) {
  recv_async(data, bytes, peer, tag).wait();
}

parallel::Request NcclCommunicator::send_async(const void* data, std::size_t bytes, int peer, int /*tag*/) {
  parallel::require_member(peer, size_, where_, "send peer");
  group_begin();
  order_after_compute();
  NCCL_OK(ncclSend(data, bytes, ncclUint8, peer, comm_, stream_.get()));
  group_end();
  bytes_sent_ += bytes;
  return enqueued();
}

parallel::Request NcclCommunicator::recv_async(void* data, std::size_t bytes, int peer, int /*tag*/) {
  parallel::require_member(peer, size_, where_, "recv peer");
  group_begin();
  order_after_compute();
  NCCL_OK(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream_.get()));
  group_end();
  return enqueued();
}

std::vector<std::string> NcclCommunicator::gather(const std::string& mine, int root) {
  return host_->gather(mine, root);
}

void NcclCommunicator::barrier() { host_->barrier(); }

void NcclCommunicator::after(cudaStream_t compute) {
  CUDA_OK(cudaEventRecord(ready_.get(), compute));
  CUDA_OK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
}

void NcclCommunicator::follow(cudaStream_t compute) { follows_ = compute; }

void NcclCommunicator::order_after_compute() {
  if (follows_) after(follows_);
}

void NcclCommunicator::group_begin() {
  NCCL_OK(ncclGroupStart());
  ++group_depth_;
}

void NcclCommunicator::group_end() {
  require(group_depth_ > 0, "group_end() without group_begin() on the " + where_);
  --group_depth_;
  NCCL_OK(ncclGroupEnd());
  if (group_depth_ == 0 && group_event_) {
    CUDA_OK(cudaEventRecord(group_event_.get(), stream_.get()));
    group_event_.reset();
  }
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(parallel::Communicator& mpi_group, std::string name) {
  return std::make_unique<NcclCommunicator>(mpi_group, std::move(name));
}

void make_nccl_groups(parallel::ProcessGroups& groups, cudaStream_t compute) {
  auto data = std::make_unique<NcclCommunicator>(std::move(groups.data), "data-parallel");
  data->follow(compute);
  groups.data = std::move(data);
  // The exchange of token parts around attention (parallel.cp): made at cp 1 too (size 1), so that
  // the group a layer is handed always moves device memory.
  auto context = std::make_unique<NcclCommunicator>(std::move(groups.context), "context-parallel");
  context->follow(compute);
  groups.context = std::move(context);
  if (groups.topology.pp == 1) return;  // no stage transfers
  // One communicator per direction: NCCL has no tags, and one stream per direction keeps each a
  // FIFO in schedule order, so a send to the next stage never waits behind a receive from it.
  auto activations = std::make_unique<NcclCommunicator>(std::move(groups.pipeline), "pipeline (activations)");
  auto gradients = std::make_unique<NcclCommunicator>(activations->host(), "pipeline (gradients)");
  activations->follow(compute);
  gradients->follow(compute);
  groups.pipeline = std::move(activations);
  groups.pipeline_gradients = std::move(gradients);  // declared after pipeline: destroyed first, as it borrows its host
}

}  // namespace avtrain::cuda
