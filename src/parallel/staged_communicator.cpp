#include "parallel/staged_communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstddef>
#include <deque>
#include <exception>
#include <thread>
#include <utility>

#include "core/error.hpp"

namespace avtrain::parallel {

using Ticket = DeviceStaging::Ticket;

namespace {
// Every StagedCommunicator of the process (the groups of one rank; made and used on its main thread).
std::vector<StagedCommunicator*>& live() {
  static std::vector<StagedCommunicator*> all;
  return all;
}
}  // namespace

// Host buffers kept for reuse: a request takes the smallest free block that holds it and is not
// more than twice its size (plus 64 KiB), else a new block.
class StagedCommunicator::HostPool {
 public:
  explicit HostPool(DeviceStaging& staging) : staging_(staging) {}
  ~HostPool() {
    for (const Block& b : blocks_) staging_.free_host(b.host);
  }
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  void* take(std::size_t bytes) {
    if (bytes == 0) return nullptr;
    constexpr std::size_t page = 4096, slack = 64 * 1024;
    const std::size_t size = (bytes + page - 1) / page * page;
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (!b.used && b.bytes >= size && b.bytes <= 2 * size + slack && (!best || b.bytes < best->bytes)) best = &b;
    if (!best) best = &blocks_.emplace_back(Block{staging_.allocate_host(size), size, false});
    best->used = true;
    return best->host;
  }
  void give_back(void* host) noexcept {
    for (Block& b : blocks_)
      if (b.host == host) b.used = false;
  }
  // A buffer taken for the length of a blocking call.
  struct Held {
    HostPool& pool;
    void* host;
    ~Held() { pool.give_back(host); }
  };
  std::size_t bytes() const {
    std::size_t total = 0;
    for (const Block& b : blocks_) total += b.bytes;
    return total;
  }

 private:
  struct Block {
    void* host;
    std::size_t bytes;
    bool used;
  };
  DeviceStaging& staging_;
  std::deque<Block> blocks_;  // a deque: taking a new block leaves the others where they are
};

struct StagedCommunicator::Operation {
  enum class Stage { queued, moving, copying_back, done };
  Stage stage = Stage::queued;
  Ticket copied = 0;                       // the copy to the host the MPI part waits for
  std::function<Request()> start;          // the MPI part, on host buffers
  std::function<Ticket()> finish;          // the copy back (empty: none)
  void* host = nullptr;                    // its host buffer, back to the pool when done
  Request moving;                          // the MPI part in flight
  Ticket copied_back = 0;
};

class StagedCommunicator::Pending final : public Request::Impl {
 public:
  Pending(StagedCommunicator& comm, std::shared_ptr<Operation> op) : comm_(comm), op_(std::move(op)) {}
  // Waits rather than leave a copy or a transfer running over a buffer its owner may free next;
  // not while an error unwinds (a peer that has stopped never completes it).
  ~Pending() override {
    if (op_->stage == Operation::Stage::done || std::uncaught_exceptions() > 0) return;
    try {
      comm_.progress(*op_, true);
    } catch (...) {
    }
  }
  bool test() override { return comm_.progress(*op_, false); }
  void wait() override { comm_.progress(*op_, true); }

 private:
  StagedCommunicator& comm_;
  std::shared_ptr<Operation> op_;
};

StagedCommunicator::StagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceStaging> staging,
                                       std::string name)
    : host_(std::move(host)), staging_(std::move(staging)) {
  require(host_ && staging_, "internal: a staged communicator needs a host communicator and a staging");
  pool_ = std::make_unique<HostPool>(*staging_);
  where_ = "communicator '" + name + "' (rank " + std::to_string(host_->rank()) + " of " +
           std::to_string(host_->size()) + ", staged through host memory)";
  live().push_back(this);
}

StagedCommunicator::~StagedCommunicator() {
  std::erase(live(), this);
  // No copy may still write into a host buffer the pool is about to free.
  if (std::uncaught_exceptions() > 0) return;
  try {
    staging_->wait(staging_->last());
  } catch (...) {
  }
}

std::size_t StagedCommunicator::host_bytes() const { return pool_->bytes(); }

void* StagedCommunicator::take(std::size_t bytes) { return pool_->take(bytes); }

Request StagedCommunicator::queue(Ticket copied, std::function<Request()> start, std::function<Ticket()> finish,
                                  void* host) {
  auto op = std::make_shared<Operation>();
  op->copied = copied;
  op->start = std::move(start);
  op->finish = std::move(finish);
  op->host = host;
  waiting_.push_back(op);
  start_ready();
  return Request(std::make_unique<Pending>(*this, std::move(op)));
}

void StagedCommunicator::start_ready() {
  while (!waiting_.empty()) {
    Operation& op = *waiting_.front();
    if (!staging_->done(op.copied)) return;
    op.moving = op.start();
    op.start = nullptr;
    op.stage = Operation::Stage::moving;
    waiting_.pop_front();
  }
}

Ticket StagedCommunicator::last_queued_copy(const Operation* upto) const {
  Ticket last = 0;
  for (const auto& op : waiting_) {
    last = std::max(last, op->copied);
    if (op.get() == upto) break;
  }
  return last;
}

void StagedCommunicator::start_all() {
  for (StagedCommunicator* group : live()) {
    group->staging_->wait(group->last_queued_copy());
    group->start_ready();
  }
}

void StagedCommunicator::start_ready_everywhere() {
  for (StagedCommunicator* group : live()) group->start_ready();
}

bool StagedCommunicator::progress(Operation& op, bool block) {
  using Stage = Operation::Stage;
  // Blocking: this one's copy and those of every one queued before it; then all of them start, in order.
  if (op.stage == Stage::queued && block) staging_->wait(last_queued_copy(&op));
  start_ready();
  if (op.stage == Stage::queued) {
    require(!block, "internal: an operation of the " + where_ + " did not start after its copy completed");
    return false;
  }
  if (op.stage == Stage::moving) {
    if (block) {
      // Not MPI's blocking wait: meanwhile the queued operations of every staged group of this rank
      // start as their copies complete, for a peer may wait on one of them before it sends what
      // this waits for (a stage's activation queued behind its copy while it waits for a gradient).
      while (!op.moving.test()) {
        start_ready_everywhere();
        std::this_thread::yield();
      }
    } else if (!op.moving.test()) {
      return false;
    }
    op.copied_back = op.finish ? op.finish() : 0;
    op.stage = Stage::copying_back;
  }
  if (op.stage == Stage::copying_back) {
    if (block)
      staging_->wait(op.copied_back);
    else if (!staging_->done(op.copied_back))
      return false;
    pool_->give_back(op.host);
    op.stage = Stage::done;
  }
  return true;
}

namespace {

std::byte* at(void* p, std::size_t offset) { return static_cast<std::byte*>(p) + offset; }

}  // namespace

void StagedCommunicator::all_reduce(void* data, std::size_t count, DType type, ReduceOp op) {
  all_reduce_async(data, count, type, op).wait();
}

Request StagedCommunicator::all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(type);
  void* host = take(bytes);
  const Ticket copied = bytes ? staging_->to_host(host, data, bytes) : 0;
  return queue(
      copied, [this, host, count, type, op] { return host_->all_reduce_async(host, count, type, op); },
      [this, data, host, bytes] { return bytes ? staging_->to_device(data, host, bytes) : 0; }, host);
}

void StagedCommunicator::all_reduce(double* data, std::size_t count, ReduceOp op) {
  start_all();
  host_->all_reduce(data, count, op);
}

Request StagedCommunicator::reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) {
  require_parts(bounds, size(), where_);
  const std::size_t element = dtype_size(type), bytes = bounds.back() * element;
  const std::size_t own = bounds[std::size_t(rank())] * element, own_bytes = bounds[std::size_t(rank()) + 1] * element - own;
  void* host = take(bytes);
  const Ticket copied = bytes ? staging_->to_host(host, data, bytes) : 0;
  return queue(
      copied, [this, host, bounds, type] { return host_->reduce_scatter_async(host, bounds, type); },
      [this, data, host, own, own_bytes] {
        return own_bytes ? staging_->to_device(at(data, own), at(host, own), own_bytes) : 0;
      },
      host);
}

Request StagedCommunicator::all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) {
  require_parts(bounds, size(), where_);
  const std::size_t element = dtype_size(type), bytes = bounds.back() * element;
  const std::size_t own = bounds[std::size_t(rank())] * element, own_bytes = bounds[std::size_t(rank()) + 1] * element - own;
  void* host = take(bytes);
  const Ticket copied = own_bytes ? staging_->to_host(at(host, own), at(data, own), own_bytes) : 0;
  return queue(
      copied, [this, host, bounds, type] { return host_->all_gather_async(host, bounds, type); },
      [this, data, host, bytes] { return bytes ? staging_->to_device(data, host, bytes) : 0; }, host);
}

void StagedCommunicator::gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type,
                                int root) {
  require_parts(bounds, size(), where_);
  require_member(root, size(), where_, "gather root");
  const std::size_t element = dtype_size(type), total = bounds.back() * element;
  const std::size_t mine_bytes = (bounds[std::size_t(rank()) + 1] - bounds[std::size_t(rank())]) * element;
  const HostPool::Held host_mine{*pool_, take(mine_bytes)};
  const HostPool::Held host_all{*pool_, rank() == root ? take(total) : nullptr};
  if (mine_bytes) staging_->wait(staging_->to_host(host_mine.host, mine, mine_bytes));
  start_all();
  host_->gather(host_mine.host, host_all.host, bounds, type, root);
  if (rank() == root && total) staging_->wait(staging_->to_device(all, host_all.host, total));
}

void StagedCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  require_member(root, size(), where_, "broadcast root");
  const HostPool::Held host{*pool_, take(bytes)};
  if (rank() == root && bytes) staging_->wait(staging_->to_host(host.host, data, bytes));
  start_all();
  host_->broadcast(host.host, bytes, root);
  if (rank() != root && bytes) staging_->wait(staging_->to_device(data, host.host, bytes));
}

// Blocking, as the host's: both buffers through the host, everything queued before started first.
void StagedCommunicator::all_to_all(const void* send, void* recv, std::size_t bytes_each) {
  const std::size_t bytes = bytes_each * std::size_t(size());
  const HostPool::Held out{*pool_, take(bytes)};
  const HostPool::Held in{*pool_, take(bytes)};
  if (bytes) staging_->wait(staging_->to_host(out.host, send, bytes));
  start_all();
  host_->all_to_all(out.host, in.host, bytes_each);
  if (bytes) staging_->wait(staging_->to_device(recv, in.host, bytes));
}

void StagedCommunicator::send(const void* data, std::size_t bytes, int peer, int tag) {
  send_async(data, bytes, peer, tag).wait();
}

void StagedCommunicator::recv(void* data, std::size_t bytes, int peer, int tag) {
  recv_async(data, bytes, peer, tag).wait();
}

Request StagedCommunicator::send_async(const void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size(), where_, "send peer");
  void* host = take(bytes);
  const Ticket copied = bytes ? staging_->to_host(host, data, bytes) : 0;
  return queue(
      copied, [this, host, bytes, peer, tag] { return host_->send_async(host, bytes, peer, tag); }, nullptr, host);
}

Request StagedCommunicator::recv_async(void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size(), where_, "recv peer");
  void* host = take(bytes);
  // Posted at once: a receive has nothing to copy first, and an early receive never holds up a sender.
  auto op = std::make_shared<Operation>();
  op->moving = host_->recv_async(host, bytes, peer, tag);
  op->stage = Operation::Stage::moving;
  op->finish = [this, data, host, bytes] { return bytes ? staging_->to_device(data, host, bytes) : 0; };
  op->host = host;
  return Request(std::make_unique<Pending>(*this, std::move(op)));
}

std::vector<std::string> StagedCommunicator::gather(const std::string& mine, int root) {
  start_all();
  return host_->gather(mine, root);
}

void StagedCommunicator::barrier() {
  start_all();
  host_->barrier();
}

void StagedCommunicator::abort_job(int code) {
  host_->abort_job(code);
  std::_Exit(code);  // not reached: the host's abort_job does not return
}

void stage_through_host(ProcessGroups& groups, const StagingMaker& make) {
  groups.data = std::make_unique<StagedCommunicator>(std::move(groups.data), make("data-parallel"), "data-parallel");
  if (groups.context)
    groups.context =
        std::make_unique<StagedCommunicator>(std::move(groups.context), make("context-parallel"), "context-parallel");
  if (groups.pipeline)
    groups.pipeline = std::make_unique<StagedCommunicator>(std::move(groups.pipeline), make("pipeline"), "pipeline");
}

}  // namespace avtrain::parallel
