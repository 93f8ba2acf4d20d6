#include "parallel/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain::parallel {
namespace {

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(text, std::size_t(length));
}

void check_mpi(int rc, const char* call, const std::string& where) {
  if (rc != MPI_SUCCESS) throw Error(std::string(call) + " failed on " + where + ": " + mpi_error_string(rc));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void check_received(const MPI_Status& status, int expected, const std::string& where) {
  int got = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &got), "MPI_Get_count", where);
  require(got == expected, "a receive on " + where + " from rank " + std::to_string(status.MPI_SOURCE) + " (tag " +
                               std::to_string(status.MPI_TAG) + ") got " + std::to_string(got) + " bytes where " +
                               std::to_string(expected) + " were expected: sender and receiver disagree on the size");
}

// Calls fn(offset, n) for consecutive pieces of count elements, each small enough for an MPI int.
template <class Fn>
void for_each_chunk(std::size_t count, std::size_t chunk, Fn&& fn) {
  for (std::size_t offset = 0; offset < count; offset += chunk) fn(offset, int(std::min(chunk, count - offset)));
}

// The pairwise fp16/bf16 reductions: in fp32, a block at a time, rounded back to nearest even.
// NaN results are made canonical so that the op is commutative bit for bit: every member of an
// all-reduce then gets the same bits whichever order the MPI library combines them in.
constexpr float canonical_nan = std::numeric_limits<float>::quiet_NaN();

struct Add {
  float operator()(float a, float b) const {
    const float s = a + b;
    return std::isnan(s) ? canonical_nan : s;
  }
};

struct Max {
  float operator()(float a, float b) const {
    if (std::isnan(a) || std::isnan(b)) return canonical_nan;
    if (a == b) return std::signbit(a) ? b : a;  // +0 over -0 in either order
    return a > b ? a : b;
  }
};

using ToFloats = void (*)(const std::uint16_t*, float*, std::size_t);
using FromFloats = void (*)(const float*, std::uint16_t*, std::size_t);

template <ToFloats to_floats, FromFloats from_floats, class Combine>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  constexpr std::size_t block = 1024;
  float a[block], b[block];
  const auto* x = static_cast<const std::uint16_t*>(in);
  auto* y = static_cast<std::uint16_t*>(inout);
  const std::size_t n = std::size_t(*len);
  for (std::size_t offset = 0; offset < n; offset += block) {
    const std::size_t m = std::min(block, n - offset);
    to_floats(x + offset, a, m);
    to_floats(y + offset, b, m);
    for (std::size_t i = 0; i < m; ++i) b[i] = Combine{}(a[i], b[i]);
    from_floats(b, y + offset, m);
  }
}

// Index into half_ops_: {sum, max} x {fp16, bf16}.
std::size_t half_op_index(DType type, ReduceOp op) {
  return (type == DType::bf16 ? 2 : 0) + (op == ReduceOp::max ? 1 : 0);
}

constexpr std::array<MPI_User_function*, 4> half_op_functions = {
    &reduce_16bit<half_to_floats, floats_to_half, Add>, &reduce_16bit<half_to_floats, floats_to_half, Max>,
    &reduce_16bit<bf16_to_floats, floats_to_bf16, Add>, &reduce_16bit<bf16_to_floats, floats_to_bf16, Max>};

MPI_Datatype datatype_of(DType type) { return type == DType::f32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Op builtin_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

// The MPI requests of one non-blocking call (one per chunk).
class MpiRequest final : public Request::Impl {
 public:
  explicit MpiRequest(std::string where) : where_(std::move(where)) {}
  // Waits rather than leave an MPI request running over a buffer its owner may free next.
  ~MpiRequest() override {
    if (!mpi_finalized()) MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  // expected_bytes >= 0: a receive that must deliver exactly that many bytes.
  void add(MPI_Request request, int expected_bytes = -1) {
    requests_.push_back(request);
    expected_bytes_.push_back(expected_bytes);
  }
  // Arrays a non-blocking collective reads until it completes.
  const int* keep(std::vector<int> array) { return kept_.emplace_back(std::move(array)).data(); }
  // Run once, in order, when every request has completed.
  void then(std::function<void()> fn) { then_.push_back(std::move(fn)); }

  bool test() override {
    int done = 0;
    statuses_.resize(requests_.size());
    check_all(MPI_Testall(int(requests_.size()), requests_.data(), &done, statuses_.data()), "MPI_Testall");
    if (done) completed();
    return done != 0;
  }

  void wait() override {
    statuses_.resize(requests_.size());
    check_all(MPI_Waitall(int(requests_.size()), requests_.data(), statuses_.data()), "MPI_Waitall");
    completed();
  }

 private:
  void check_all(int rc, const char* call) const {
    if (rc == MPI_ERR_IN_STATUS)
      for (const MPI_Status& s : statuses_)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) {
          rc = s.MPI_ERROR;
          break;
        }
    check_mpi(rc, call, where_);
  }

  void completed() {
    for (std::size_t i = 0; i < statuses_.size(); ++i)
      if (expected_bytes_[i] >= 0) check_received(statuses_[i], expected_bytes_[i], where_);
    for (auto& fn : then_) fn();
    then_.clear();
  }

  std::string where_;
  std::vector<MPI_Request> requests_;
  std::vector<int> expected_bytes_;
  std::vector<MPI_Status> statuses_;
  std::deque<std::vector<int>> kept_;  // a deque: what keep() returned stays where it is
  std::vector<std::function<void()>> then_;
};

// The members' shares of the piece [offset, offset + n) of a buffer cut at `bounds`: their counts
// and where each starts in the piece.
struct Shares {
  std::vector<int> counts, displs;
};
Shares shares_in(const std::vector<std::size_t>& bounds, std::size_t offset, std::size_t n) {
  Shares s;
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    const std::size_t lo = std::clamp(bounds[r], offset, offset + n), hi = std::clamp(bounds[r + 1], offset, offset + n);
    s.counts.push_back(int(hi - lo));
    s.displs.push_back(int(lo - offset));
  }
  return s;
}

}  // namespace

// A ZeRO collective over `data` cut at `bounds`, started by `start(request, piece, shares)` on each
// piece small enough for MPI's int counts; counts half the buffer in bytes_sent.
template <class Start>
Request MpiCommunicator::each_piece(void* data, const std::vector<std::size_t>& bounds, DType type, Start start) {
  require_parts(bounds, size_, where_);
  auto request = std::make_unique<MpiRequest>(where_);
  auto* bytes = static_cast<std::byte*>(data);
  const std::size_t element = dtype_size(type);
  for_each_chunk(bounds.back(), chunk_, [&](std::size_t offset, int n) {
    start(*request, bytes + offset * element, shares_in(bounds, offset, std::size_t(n)));
  });
  bytes_sent_ += bounds.back() * element / 2;
  return Request(std::move(request));
}

namespace {

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned, std::string name, std::size_t chunk)
    : comm_(comm),
      owned_(owned && comm != MPI_COMM_WORLD && comm != MPI_COMM_SELF),
      name_(std::move(name)),
      chunk_(std::clamp<std::size_t>(chunk, 1, max_chunk)),
      where_("communicator '" + name_ + "'") {
  int initialized = 0;
  MPI_Initialized(&initialized);
  require(initialized && !mpi_finalized(),
          "the " + where_ + " was created outside MPI_Init_thread .. MPI_Finalize: create it after MPI starts");
  require(comm != MPI_COMM_NULL, "the " + where_ + " was given MPI_COMM_NULL: this rank is not a member");
  try {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    int world_rank = 0;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
    where_ += " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", world rank " +
              std::to_string(world_rank) + ")";
    for (std::size_t i = 0; i < half_ops_.size(); ++i)
      check(MPI_Op_create(half_op_functions[i], /*commute=*/1, &half_ops_[i]), "MPI_Op_create");
  } catch (...) {
    release();
    throw;
  }
}

MpiCommunicator::~MpiCommunicator() { release(); }

void MpiCommunicator::release() noexcept {
  if (mpi_finalized()) return;  // MPI_Finalize has already released everything
  for (MPI_Op& op : half_ops_)
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int rc, const char* call) const { check_mpi(rc, call, where_); }

MPI_Op MpiCommunicator::op_of(DType type, ReduceOp op) const {
  return type == DType::f32 ? builtin_op(op) : half_ops_[half_op_index(type, op)];
}

void MpiCommunicator::all_reduce(void* data, std::size_t count, DType type, ReduceOp op) {
  auto* bytes = static_cast<std::byte*>(data);
  const std::size_t element = dtype_size(type);
  for_each_chunk(count, chunk_, [&](std::size_t offset, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, bytes + offset * element, n, datatype_of(type), op_of(type, op), comm_),
          "MPI_Allreduce");
  });
  bytes_sent_ += count * element;
}

Request MpiCommunicator::all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) {
  auto request = std::make_unique<MpiRequest>(where_);
  auto* bytes = static_cast<std::byte*>(data);
  const std::size_t element = dtype_size(type);
  for_each_chunk(count, chunk_, [&](std::size_t offset, int n) {
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, bytes + offset * element, n, datatype_of(type), op_of(type, op), comm_, &r),
          "MPI_Iallreduce");
    request->add(r);
  });
  bytes_sent_ += count * element;
  return Request(std::move(request));
}

void MpiCommunicator::all_reduce(double* data, std::size_t count, ReduceOp op) {
  for_each_chunk(count, chunk_, [&](std::size_t offset, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, data + offset, n, MPI_DOUBLE, builtin_op(op), comm_), "MPI_Allreduce");
  });
  bytes_sent_ += count * sizeof(double);
}

Request MpiCommunicator::reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) {
  return each_piece(data, bounds, type, [&](MpiRequest& request, std::byte* piece, const Shares& share) {
    MPI_Request r;
    check(MPI_Ireduce_scatter(MPI_IN_PLACE, piece, request.keep(share.counts), datatype_of(type),
                              op_of(type, ReduceOp::sum), comm_, &r),
          "MPI_Ireduce_scatter");
    request.add(r);
    // In place, MPI leaves this member's sums at the start of the piece: moved to their place.
    const std::size_t element = dtype_size(type), mine = std::size_t(share.counts[std::size_t(rank_)]);
    const std::size_t at = std::size_t(share.displs[std::size_t(rank_)]);
    if (mine > 0 && at > 0)
      request.then([piece, mine, at, element] { std::memmove(piece + at * element, piece, mine * element); });
  });
}

Request MpiCommunicator::all_gather_async(void* data, const std::vector<std::size_t>& bounds, DType type) {
  return each_piece(data, bounds, type, [&](MpiRequest& request, std::byte* piece, const Shares& share) {
    MPI_Request r;
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, piece, request.keep(share.counts),
                          request.keep(share.displs), datatype_of(type), comm_, &r),
          "MPI_Iallgatherv");
    request.add(r);
  });
}

void MpiCommunicator::gather(const void* mine, void* all, const std::vector<std::size_t>& bounds, DType type, int root) {
  require_parts(bounds, size_, where_);
  require_member(root, size_, where_, "gather root");
  const std::size_t element = dtype_size(type), own = bounds[std::size_t(rank_)];
  const auto* from = static_cast<const std::byte*>(mine);
  auto* to = static_cast<std::byte*>(all);
  if (rank_ == root && bounds[std::size_t(rank_) + 1] > own)
    std::memcpy(to + own * element, from, (bounds[std::size_t(rank_) + 1] - own) * element);
  for_each_chunk(bounds.back(), chunk_, [&](std::size_t offset, int n) {
    const Shares share = shares_in(bounds, offset, std::size_t(n));
    const int count = share.counts[std::size_t(rank_)];
    const std::size_t at = offset + std::size_t(share.displs[std::size_t(rank_)]);  // where it starts in the buffer
    const std::byte* send = count > 0 ? from + (at - own) * element : from;
    if (rank_ == root)
      check(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, to + offset * element, share.counts.data(),
                        share.displs.data(), datatype_of(type), root, comm_),
            "MPI_Gatherv");
    else
      check(MPI_Gatherv(send, count, datatype_of(type), nullptr, nullptr, nullptr, datatype_of(type), root, comm_),
            "MPI_Gatherv");
  });
  if (rank_ != root) bytes_sent_ += (bounds[std::size_t(rank_) + 1] - own) * element;
}

void MpiCommunicator::all_to_all(const void* send, void* recv, std::size_t bytes_each) {
  const auto* from = static_cast<const std::byte*>(send);
  auto* to = static_cast<std::byte*>(recv);
  if (size_ == 1) {
    if (bytes_each) std::memcpy(to, from, bytes_each);
    return;
  }
  // A piece of every chunk goes as one MPI_Alltoallv: at most chunk_ bytes, and at most INT_MAX / size_,
  // so that the displacements (the pieces' offsets in bytes) stay within an int.
  std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
  std::vector<std::byte> piece_in, piece_out;
  const std::size_t piece = std::min(chunk_, std::size_t(INT_MAX) / std::size_t(size_));
  for_each_chunk(bytes_each, piece, [&](std::size_t offset, int n) {
    const bool whole = offset == 0 && std::size_t(n) == bytes_each &&
                       bytes_each * std::size_t(size_) <= std::size_t(INT_MAX);
    if (whole) {
      for (int r = 0; r < size_; ++r) counts[std::size_t(r)] = n, displs[std::size_t(r)] = r * n;
      check(MPI_Alltoallv(from, counts.data(), displs.data(), MPI_BYTE, to, counts.data(), displs.data(), MPI_BYTE,
                          comm_),
            "MPI_Alltoallv");
      return;
    }
    // A piece of every chunk, packed together (their offsets in the whole buffer exceed an int).
    piece_in.resize(std::size_t(n) * size_);
    piece_out.resize(std::size_t(n) * size_);
    for (int r = 0; r < size_; ++r) {
      std::memcpy(piece_in.data() + std::size_t(r) * n, from + std::size_t(r) * bytes_each + offset, std::size_t(n));
      counts[std::size_t(r)] = n;
      displs[std::size_t(r)] = r * n;
    }
    check(MPI_Alltoallv(piece_in.data(), counts.data(), displs.data(), MPI_BYTE, piece_out.data(), counts.data(),
                        displs.data(), MPI_BYTE, comm_),
          "MPI_Alltoallv");
    for (int r = 0; r < size_; ++r)
      std::memcpy(to + std::size_t(r) * bytes_each + offset, piece_out.data() + std::size_t(r) * n, std::size_t(n));
  });
  bytes_sent_ += std::uint64_t(size_ - 1) * bytes_each;
}

void MpiCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  require_member(root, size_, where_, "broadcast root");
  auto* p = static_cast<std::byte*>(data);
  for_each_chunk(bytes, chunk_, [&](std::size_t offset, int n) {
    check(MPI_Bcast(p + offset, n, MPI_BYTE, root, comm_), "MPI_Bcast");
  });
}

void MpiCommunicator::send(const void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size_, where_, "send peer");
  const auto* p = static_cast<const std::byte*>(data);
  for_each_chunk(bytes, chunk_, [&](std::size_t offset, int n) {
    check(MPI_Send(p + offset, n, MPI_BYTE, peer, tag, comm_), "MPI_Send");
  });
  bytes_sent_ += bytes;
}

void MpiCommunicator::recv(void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size_, where_, "recv peer");
  auto* p = static_cast<std::byte*>(data);
  for_each_chunk(bytes, chunk_, [&](std::size_t offset, int n) {
    MPI_Status status;
    check(MPI_Recv(p + offset, n, MPI_BYTE, peer, tag, comm_, &status), "MPI_Recv");
    check_received(status, n, where_);
  });
}

Request MpiCommunicator::send_async(const void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size_, where_, "send peer");
  auto request = std::make_unique<MpiRequest>(where_);
  const auto* p = static_cast<const std::byte*>(data);
  for_each_chunk(bytes, chunk_, [&](std::size_t offset, int n) {
    MPI_Request r;
    check(MPI_Isend(p + offset, n, MPI_BYTE, peer, tag, comm_, &r), "MPI_Isend");
    request->add(r);
  });
  bytes_sent_ += bytes;
  return Request(std::move(request));
}

Request MpiCommunicator::recv_async(void* data, std::size_t bytes, int peer, int tag) {
  require_member(peer, size_, where_, "recv peer");
  auto request = std::make_unique<MpiRequest>(where_);
  auto* p = static_cast<std::byte*>(data);
  for_each_chunk(bytes, chunk_, [&](std::size_t offset, int n) {
    MPI_Request r;
    check(MPI_Irecv(p + offset, n, MPI_BYTE, peer, tag, comm_, &r), "MPI_Irecv");
    request->add(r, n);
  });
  return Request(std::move(request));
}

std::vector<std::string> MpiCommunicator::gather(const std::string& mine, int root) {
  require_member(root, size_, where_, "gather root");
  require(mine.size() <= std::size_t(INT_MAX), "gather on the " + where_ + ": a string of " +
                                                   std::to_string(mine.size()) + " bytes is over the 2 GiB limit");
  const int length = int(mine.size());
  const bool at_root = rank_ == root;
  std::vector<int> lengths(at_root ? size_ : 0), offsets(at_root ? size_ : 0);
  check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_), "MPI_Gather");
  std::string all;
  if (at_root) {
    long long total = 0;
    for (int i = 0; i < size_; ++i) {
      require(total + lengths[i] <= INT_MAX, "gather on the " + where_ + ": the strings add up to over 2 GiB");
      offsets[i] = int(total);
      total += lengths[i];
    }
    all.resize(std::size_t(total));
  }
  check(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, root, comm_),
        "MPI_Gatherv");
  std::vector<std::string> strings;
  for (std::size_t i = 0; i < lengths.size(); ++i) strings.push_back(all.substr(offsets[i], lengths[i]));
  return strings;
}

void MpiCommunicator::barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

void MpiCommunicator::abort_job(int code) {
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it did, this process ends anyway
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key, std::string name) const {
  MPI_Comm part = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  return std::make_unique<MpiCommunicator>(part, true, std::move(name), chunk_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split_shared_memory(std::string name) const {
  MPI_Comm part = MPI_COMM_NULL;
  check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &part), "MPI_Comm_split_type");
  return std::make_unique<MpiCommunicator>(part, true, std::move(name), chunk_);
}

}  // namespace avtrain::parallel
