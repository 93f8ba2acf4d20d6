// MpiCommunicator and the process groups, run under mpiexec with 2 and 4 ranks. Every rank runs
// every test (the collectives need all of them); values differ per rank and the expected result
// is computed locally on each. Only rank 0 prints gtest's report; other ranks print their
// failures, and the exit code says whether any rank failed.
//
// With --staged every communicator under test is a StagedCommunicator over the MpiCommunicator,
// with the CPU's late copies (device_staging.hpp): the same tests then check the staging that
// --comm mpi uses on a GPU, and the tests of its own below (order, reuse, dropped requests) run.
// Built with AVTRAIN_PINNED_STAGING (tests/gpu), it is always staged, through the CUDA backend's
// pinned buffers and copy stream, every rank on the node's first GPU (exit 77 without one).
#include <gtest/gtest.h>

#include "mpi_gtest_runner.hpp"
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/process_groups.hpp"
#include "parallel/staged_communicator.hpp"
#include "parallel/topology.hpp"
#ifdef AVTRAIN_PINNED_STAGING
#include <cuda_runtime.h>

#include "device_gate.hpp"
#include "pinned_staging.hpp"
#endif

namespace avtrain::parallel {
namespace {

constexpr float inf = std::numeric_limits<float>::infinity();
constexpr float nan = std::numeric_limits<float>::quiet_NaN();

bool staged = false;  // --staged

std::unique_ptr<Communicator> world_dup(std::size_t chunk = MpiCommunicator::max_chunk) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  auto mpi = std::make_unique<MpiCommunicator>(comm, true, "world", chunk);
  if (!staged) return mpi;
#ifdef AVTRAIN_PINNED_STAGING
  std::unique_ptr<DeviceStaging> staging = cuda::make_pinned_staging(nullptr, "world");
#else
  std::unique_ptr<DeviceStaging> staging = make_late_host_staging();
#endif
  return std::make_unique<StagedCommunicator>(std::move(mpi), std::move(staging), "world");
}

// Values of a type, held as bytes; from and to fp32.
std::vector<std::byte> encode(const std::vector<float>& values, DType type) {
  std::vector<std::byte> bytes(values.size() * dtype_size(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t h = type == DType::f16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
    if (type == DType::f32)
      std::memcpy(&bytes[4 * i], &values[i], 4);
    else
      std::memcpy(&bytes[2 * i], &h, 2);
  }
  return bytes;
}

std::vector<float> decode(const std::vector<std::byte>& bytes, DType type) {
  std::vector<float> values(bytes.size() / dtype_size(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint16_t h;
    if (type == DType::f32) {
      std::memcpy(&values[i], &bytes[4 * i], 4);
      continue;
    }
    std::memcpy(&h, &bytes[2 * i], 2);
    values[i] = type == DType::f16 ? half_to_float(h) : bf16_to_float(h);
  }
  return values;
}

// The value as the type stores it.
float rounded(float x, DType type) {
  return type == DType::f32 ? x : type == DType::f16 ? half_to_float(float_to_half(x)) : bf16_to_float(float_to_bf16(x));
}

// One unit in the last place of the type at magnitude x.
double ulp(double x, DType type) {
  const int mantissa_bits = type == DType::f32 ? 23 : type == DType::f16 ? 10 : 7;
  const int min_exponent = type == DType::f16 ? -14 : -126;
  const int e = x > 0 ? std::max(std::ilogb(x), min_exponent) : min_exponent;
  return std::ldexp(1.0, e - mantissa_bits);
}

struct Case {
  DType type;
  bool async;
  std::size_t chunk;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.type)) + (info.param.async ? "_async" : "_blocking") +
         (info.param.chunk < MpiCommunicator::max_chunk ? "_chunked" : "");
}

class AllReduce : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    comm_ = world_dup(GetParam().chunk);
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  // Every rank contributes value(rank, i); returns the reduced values and checks bytes_sent.
  template <class Value>
  std::vector<float> reduce(std::size_t n, ReduceOp op, Value value) {
    const DType type = GetParam().type;
    std::vector<float> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = value(rank_, i);
    std::vector<std::byte> data = encode(mine, type);
    const std::uint64_t before = comm_->bytes_sent();
    if (GetParam().async) {
      Request request = comm_->all_reduce_async(data.data(), n, type, op);
      while (!request.test()) {
      }
      EXPECT_FALSE(request.active());
    } else {
      comm_->all_reduce(data.data(), n, type, op);
    }
    EXPECT_EQ(comm_->bytes_sent() - before, n * dtype_size(type));
    return decode(data, type);
  }

  std::unique_ptr<Communicator> comm_;
  int rank_ = 0, size_ = 1;
};

float wavy(int rank, std::size_t i) { return float(std::sin(0.37 * double(i) + 1.3 * rank) * (rank + 1) * 3.0); }

TEST_P(AllReduce, SumIsTheExactSumWithinAFewUlps) {
  const DType type = GetParam().type;
  const std::size_t n = 3001;  // several 1024-value blocks of the 16-bit op, and a remainder
  const std::vector<float> got = reduce(n, ReduceOp::sum, [&](int r, std::size_t i) { return rounded(wavy(r, i), type); });
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < size_; ++r) {
      exact += rounded(wavy(r, i), type);
      magnitude += std::fabs(rounded(wavy(r, i), type));
    }
    // Each of the size-1 pairwise roundings is at most half an ulp of a partial sum <= magnitude.
    ASSERT_NEAR(got[i], exact, size_ * ulp(magnitude, type)) << "element " << i;
  }
}

TEST_P(AllReduce, SumOfSmallIntegersIsExactBitForBit) {
  const DType type = GetParam().type;
  const std::size_t n = 2050;
  auto value = [](int r, std::size_t i) { return float((r + 1) * int(i % 9) - 2 * r - int(i % 5)); };
  const std::vector<float> got = reduce(n, ReduceOp::sum, value);
  std::vector<float> expected(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < size_; ++r) expected[i] += value(r, i);
  std::vector<std::byte> got_bits = encode(got, type), expected_bits = encode(expected, type);
  EXPECT_EQ(got_bits, expected_bits);
  EXPECT_NE(expected, std::vector<float>(n, 0.0f));
}

TEST_P(AllReduce, MaxIsTheLargestValueBitForBit) {
  const DType type = GetParam().type;
  const std::size_t n = 3001;
  const std::vector<float> got = reduce(n, ReduceOp::max, [&](int r, std::size_t i) { return rounded(wavy(r, i), type); });
  for (std::size_t i = 0; i < n; ++i) {
    float expected = -inf;
    for (int r = 0; r < size_; ++r) expected = std::max(expected, rounded(wavy(r, i), type));
    ASSERT_EQ(got[i], expected) << "element " << i;
  }
}

TEST_P(AllReduce, MaxOfAFlagSetOnOneRankIsSetEverywhere) {
  const std::vector<float> got =
      reduce(5, ReduceOp::max, [&](int r, std::size_t i) { return r == size_ - 1 && i == 3 ? 1.0f : 0.0f; });
  EXPECT_EQ(got, (std::vector<float>{0, 0, 0, 1, 0}));
}

TEST_P(AllReduce, InfinitiesAndNaNPropagate) {
  const DType type = GetParam().type;
  const int last = size_ - 1;
  auto value = [&](int r, std::size_t i) -> float {
    switch (i) {
      case 0: return r == 0 ? inf : 1.0f;            // sum and max: +inf
      case 1: return -inf;                           // sum and max: -inf
      case 2: return r == 0 ? -inf : float(r);       // max: the finite largest
      case 3: return r == 0 ? inf : r == 1 ? -inf : 0.0f;  // sum: NaN
      case 4: return r == last ? nan : 2.0f;         // NaN on the last rank
      case 5: return r == 0 ? nan : -2.0f;           // NaN on rank 0
      default: return 60000.0f;                      // fp16 sum overflows to +inf
    }
  };
  const std::vector<float> sum = reduce(7, ReduceOp::sum, value);
  EXPECT_EQ(sum[0], inf);
  EXPECT_EQ(sum[1], -inf);
  EXPECT_TRUE(std::isnan(sum[3]));
  EXPECT_TRUE(std::isnan(sum[4]));
  EXPECT_TRUE(std::isnan(sum[5]));
  if (type == DType::f16) {
    EXPECT_EQ(sum[6], inf);
  }

  const std::vector<float> max = reduce(7, ReduceOp::max, value);
  EXPECT_EQ(max[0], inf);
  EXPECT_EQ(max[1], -inf);
  EXPECT_EQ(max[2], float(last));
  EXPECT_EQ(max[3], inf);
  if (type != DType::f32) {  // MPI_MAX on fp32 NaN is the library's choice (see mpi_communicator.hpp)
    EXPECT_TRUE(std::isnan(max[4]));
    EXPECT_TRUE(std::isnan(max[5]));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, AllReduce,
                         ::testing::Values(Case{DType::f32, false, MpiCommunicator::max_chunk},
                                           Case{DType::f16, false, MpiCommunicator::max_chunk},
                                           Case{DType::bf16, false, MpiCommunicator::max_chunk},
                                           Case{DType::f32, true, MpiCommunicator::max_chunk},
                                           Case{DType::f16, true, MpiCommunicator::max_chunk},
                                           Case{DType::bf16, true, MpiCommunicator::max_chunk},
                                           Case{DType::f16, false, 700}, Case{DType::bf16, true, 700},
                                           Case{DType::f32, true, 700}),
                         case_name);

// ZeRO's collectives over uneven parts (one of them empty), in every type, whole and cut into chunks
// smaller than a part: the reduce-scatter leaves each member the sums of its part in place (small
// integers: exact in every type, bit for bit); the all-gather gives every member every part; the
// gather collects them at a non-zero root.
class Parts : public ::testing::TestWithParam<Case> {};

std::vector<std::size_t> uneven_parts(int size) {
  std::vector<std::size_t> bounds = {0};
  for (int r = 0; r < size; ++r) bounds.push_back(bounds.back() + (r == 1 ? 0 : std::size_t(300 + 77 * r)));
  return bounds;
}

TEST_P(Parts, ReduceScatterAllGatherAndGather) {
  const DType type = GetParam().type;
  auto comm = world_dup(GetParam().chunk);
  const int rank = comm->rank(), size = comm->size();
  const std::vector<std::size_t> bounds = uneven_parts(size);
  const std::size_t n = bounds.back();
  const auto value = [](int r, std::size_t i) { return float(int((i * 7 + std::size_t(r) * 3) % 19) - 9); };
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
  std::vector<std::byte> data = encode(mine, type);
  std::uint64_t before = comm->bytes_sent();
  Request scattered = comm->reduce_scatter_async(data.data(), bounds, type);
  scattered.wait();
  EXPECT_EQ(comm->bytes_sent() - before, n * dtype_size(type) / 2);
  const std::vector<float> got = decode(data, type);
  for (std::size_t i = bounds[std::size_t(rank)]; i < bounds[std::size_t(rank) + 1]; ++i) {
    float sum = 0;
    for (int r = 0; r < size; ++r) sum += value(r, i);
    ASSERT_EQ(got[i], sum) << "rank " << rank << ", element " << i;
  }
  // Every member's part, marked with its rank, to every member.
  std::vector<float> parts(n, -1.0f);
  for (std::size_t i = bounds[std::size_t(rank)]; i < bounds[std::size_t(rank) + 1]; ++i) parts[i] = float(rank * 1000 + int(i % 500));
  std::vector<std::byte> gathered = encode(parts, type);
  before = comm->bytes_sent();
  comm->all_gather_async(gathered.data(), bounds, type).wait();
  EXPECT_EQ(comm->bytes_sent() - before, n * dtype_size(type) / 2);
  const std::vector<float> all = decode(gathered, type);
  for (int r = 0; r < size; ++r)
    for (std::size_t i = bounds[std::size_t(r)]; i < bounds[std::size_t(r) + 1]; ++i)
      ASSERT_EQ(all[i], rounded(float(r * 1000 + int(i % 500)), type)) << "rank " << rank << ", element " << i;
  // The same parts gathered at the last rank from separate buffers.
  const int root = size - 1;
  const std::size_t own = bounds[std::size_t(rank) + 1] - bounds[std::size_t(rank)];
  const std::vector<std::byte> part(gathered.begin() + std::ptrdiff_t(bounds[std::size_t(rank)] * dtype_size(type)),
                                    gathered.begin() + std::ptrdiff_t((bounds[std::size_t(rank)] + own) * dtype_size(type)));
  std::vector<std::byte> at_root(rank == root ? gathered.size() : 0, std::byte{0xff});
  comm->gather(part.data(), rank == root ? at_root.data() : nullptr, bounds, type, root);
  if (rank == root) {
    EXPECT_TRUE(at_root == gathered);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Parts,
                         ::testing::Values(Case{DType::f32, true, MpiCommunicator::max_chunk},
                                           Case{DType::f16, true, MpiCommunicator::max_chunk},
                                           Case{DType::bf16, true, MpiCommunicator::max_chunk},
                                           Case{DType::f32, true, 200}, Case{DType::bf16, true, 200}),
                         case_name);

TEST(MpiCommunicator, Fp16AllReduceSendsHalfTheBytesOfFp32) {
  auto comm = world_dup();
  const std::size_t n = 1000;
  std::vector<float> f32(n, 1.0f);
  std::vector<std::uint16_t> f16(n, float_to_half(1.0f));
  std::uint64_t before = comm->bytes_sent();
  comm->all_reduce(f16.data(), n, DType::f16, ReduceOp::sum);
  EXPECT_EQ(comm->bytes_sent() - before, 2 * n);
  before = comm->bytes_sent();
  comm->all_reduce(f32.data(), n, DType::f32, ReduceOp::sum);
  EXPECT_EQ(comm->bytes_sent() - before, 4 * n);
  EXPECT_EQ(half_to_float(f16[7]), float(comm->size()));
  EXPECT_EQ(f32[7], float(comm->size()));
}

TEST(MpiCommunicator, DoubleAllReduce) {
  auto comm = world_dup(3);
  const int rank = comm->rank(), size = comm->size();
  std::vector<double> sum(10), max(10);
  for (int i = 0; i < 10; ++i) sum[i] = max[i] = 1e9 + rank * 0.25 + i - (rank == 1 ? 7 * i : 0);
  const std::uint64_t before = comm->bytes_sent();
  comm->all_reduce(sum.data(), sum.size(), ReduceOp::sum);
  comm->all_reduce(max.data(), max.size(), ReduceOp::max);
  EXPECT_EQ(comm->bytes_sent() - before, 2 * 10 * sizeof(double));
  for (int i = 0; i < 10; ++i) {
    double expected_sum = 0, expected_max = -INFINITY;
    for (int r = 0; r < size; ++r) {
      const double v = 1e9 + r * 0.25 + i - (r == 1 ? 7 * i : 0);
      expected_sum += v;
      expected_max = std::max(expected_max, v);
    }
    EXPECT_EQ(sum[i], expected_sum) << i;
    EXPECT_EQ(max[i], expected_max) << i;
  }
}

std::vector<unsigned char> pattern(std::size_t n, int seed) {
  std::vector<unsigned char> p(n);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(i * 7 + seed * 31 + (i >> 8));
  return p;
}

TEST(MpiCommunicator, BroadcastFromANonZeroRoot) {
  for (std::size_t chunk : {MpiCommunicator::max_chunk, std::size_t(100)}) {
    auto comm = world_dup(chunk);
    for (int root : {comm->size() - 1, 1}) {
      SCOPED_TRACE("root " + std::to_string(root) + ", chunk " + std::to_string(chunk));
      const std::vector<unsigned char> expected = pattern(1001, root);
      std::vector<unsigned char> data = expected;
      if (comm->rank() != root)
        for (auto& b : data) b = static_cast<unsigned char>(~b);  // every byte differs from the root's
      comm->broadcast(data.data(), data.size(), root);
      EXPECT_EQ(data, expected);
    }
  }
}

TEST(MpiCommunicator, SendAndRecvAroundARing) {
  for (std::size_t chunk : {MpiCommunicator::max_chunk, std::size_t(100)}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    auto comm = world_dup(chunk);
    const int rank = comm->rank(), size = comm->size();
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    const std::vector<unsigned char> mine = pattern(4000, rank);
    std::vector<unsigned char> got(mine.size(), 0);
    const std::uint64_t before = comm->bytes_sent();
    if (rank % 2 == 0) {  // even then odd: never every rank in a blocking send at once
      comm->send(mine.data(), mine.size(), right, 11);
      comm->recv(got.data(), got.size(), left, 11);
    } else {
      comm->recv(got.data(), got.size(), left, 11);
      comm->send(mine.data(), mine.size(), right, 11);
    }
    EXPECT_EQ(got, pattern(4000, left));
    EXPECT_EQ(comm->bytes_sent() - before, mine.size());
  }
}

TEST(MpiCommunicator, SendAndRecvAroundARingNonBlocking) {
  for (std::size_t chunk : {MpiCommunicator::max_chunk, std::size_t(100000)}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    auto comm = world_dup(chunk);
    const int rank = comm->rank(), size = comm->size();
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    const std::size_t n = std::size_t(1) << 20;  // past the eager limit: a rendezvous transfer
    const std::vector<unsigned char> mine = pattern(n, rank);
    std::vector<unsigned char> got(n, 0);
    Request received = comm->recv_async(got.data(), n, left, 12);
    Request sent = comm->send_async(mine.data(), n, right, 12);
    EXPECT_TRUE(received.active());
    while (!(received.test() & sent.test())) {  // & rather than &&: progress both every time
    }
    EXPECT_EQ(got, pattern(n, left));

    // Dropped while active, the requests wait in their destructors.
    std::vector<unsigned char> again(n, 0);
    {
      Request r = comm->recv_async(again.data(), n, left, 13);
      Request s = comm->send_async(mine.data(), n, right, 13);
    }
    EXPECT_EQ(again, pattern(n, left));
  }
}

// The random bytes that member `from` sends member `to`.
std::vector<unsigned char> chunk_bytes(std::size_t n, int from, int to) {
  std::mt19937 rng(std::uint32_t(1000 * from + to + 17));
  std::vector<unsigned char> bytes(n);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng() >> 24);
  return bytes;
}

// Context parallelism's head exchange: chunk r of every member's send lands at chunk `sender` of
// member r's recv; whole, and with chunk 100 in pieces (a 1001-byte chunk: ten and a remainder).
// Every byte of recv starts different from what it should get; bytes_sent counts the other members'.
TEST(MpiCommunicator, AllToAllSendsChunkRToMemberR) {
  for (std::size_t chunk : {MpiCommunicator::max_chunk, std::size_t(100)}) {
    auto comm = world_dup(chunk);
    const int rank = comm->rank(), size = comm->size();
    for (std::size_t each : {std::size_t(1001), std::size_t(64), std::size_t(0)}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + ", " + std::to_string(each) + " bytes each");
      std::vector<unsigned char> send(each * std::size_t(size)), recv(send.size());
      for (int r = 0; r < size; ++r) {
        const std::vector<unsigned char> out = chunk_bytes(each, rank, r), in = chunk_bytes(each, r, rank);
        for (std::size_t i = 0; i < each; ++i) {
          send[std::size_t(r) * each + i] = out[i];
          recv[std::size_t(r) * each + i] = static_cast<unsigned char>(~in[i]);
        }
      }
      const std::vector<unsigned char> sent = send;
      const std::uint64_t before = comm->bytes_sent();
      comm->all_to_all(send.data(), recv.data(), each);
      EXPECT_EQ(comm->bytes_sent() - before, std::uint64_t(size - 1) * each);
      EXPECT_EQ(send, sent);
      for (int r = 0; r < size; ++r) {
        const std::vector<unsigned char> got(recv.begin() + std::ptrdiff_t(std::size_t(r) * each),
                                             recv.begin() + std::ptrdiff_t(std::size_t(r + 1) * each));
        EXPECT_EQ(got, chunk_bytes(each, r, rank)) << "the chunk from rank " << r;
      }
    }
  }
}

// A message longer than its receive throws from the blocking MPI_Recv. Staged, every receive is an
// MPI_Irecv, and OpenMPI 4.1 can hang for good in MPI_Waitall on a truncated MPI_Irecv over a
// duplicated communicator (a 30-line C program shows it, 3 runs in 8): the staged run checks the
// shorter message only, which throws from the count check.
TEST(MpiCommunicator, MismatchedMessageSizesThrow) {
  auto comm = world_dup();
  const std::vector<unsigned char> sixteen(16, 1);
  std::vector<unsigned char> buffer(16);
  if (comm->rank() == 0) {
    if (!staged) comm->send(sixteen.data(), 16, 1, 21);
    comm->send(sixteen.data(), 8, 1, 22);
  } else if (comm->rank() == 1) {
    if (!staged) try {
        comm->recv(buffer.data(), 8, 0, 21);
        ADD_FAILURE() << "a 16-byte message into an 8-byte receive did not throw";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("MPI_Recv"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'world' (rank 1 of"), std::string::npos) << e.what();
      }
    try {
      comm->recv(buffer.data(), 16, 0, 22);
      ADD_FAILURE() << "an 8-byte message into a 16-byte receive did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("got 8 bytes where 16 were expected"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'world' (rank 1 of"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(comm->send(sixteen.data(), 16, comm->size(), 0), Error);
  EXPECT_THROW(comm->broadcast(buffer.data(), 16, -1), Error);
  comm->barrier();
}

TEST(MpiCommunicator, GatherStringsOfDifferentLengths) {
  auto comm = world_dup();
  const int size = comm->size();
  auto text = [](int r) { return r == 0 ? std::string() : "rank " + std::to_string(r) + std::string(37 * r, 'x'); };
  for (int root : {0, size - 1}) {
    SCOPED_TRACE("root " + std::to_string(root));
    const std::vector<std::string> got = comm->gather(text(comm->rank()), root);
    if (comm->rank() != root) {
      EXPECT_TRUE(got.empty());
      continue;
    }
    EXPECT_EQ(got.size(), std::size_t(size));  // not ASSERT: the other ranks go on to the next gather
    for (int r = 0; r < size && r < int(got.size()); ++r) EXPECT_EQ(got[r], text(r));
  }
}

TEST(MpiCommunicator, OverTheWorldItselfLeavesTheWorldUsable) {
  { MpiCommunicator world(MPI_COMM_WORLD, /*owned=*/true, "world"); }
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
}

// What the staging adds (plain MPI passes these too): requests complete whichever is waited first,
// the host buffers are reused from the second round on, a blocking call first starts what is queued
// (else the members would start their collectives in different orders), and sends to one peer with
// one tag arrive in the order they were made although each waits for its copy.
TEST(StagedCommunicator, RequestsWaitedInAnyOrderAndTheHostPoolStopsGrowing) {
  auto comm = world_dup();
  const int rank = comm->rank(), size = comm->size();
  std::size_t pool_after_first_round = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<std::vector<float>> buckets(5);
    std::vector<Request> requests;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      buckets[b].assign(1000 + 333 * b, float(rank) + float(b) + float(round));
      requests.push_back(comm->all_reduce_async(buckets[b].data(), buckets[b].size(), DType::f32, ReduceOp::sum));
    }
    requests.back().wait();
    for (Request& r : requests) r.test();
    for (Request& r : requests) r.wait();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const float expected = float(size * (size - 1) / 2) + float(size) * (float(b) + float(round));
      EXPECT_EQ(buckets[b], std::vector<float>(buckets[b].size(), expected)) << "round " << round << ", bucket " << b;
    }
    if (!staged) continue;
    const std::size_t pool = static_cast<StagedCommunicator&>(*comm).host_bytes();
    if (round == 0) {
      pool_after_first_round = pool;
      EXPECT_GE(pool, (5 * 1000 + 333 * 10) * sizeof(float));
    } else {
      EXPECT_EQ(pool, pool_after_first_round) << "round " << round;
    }
  }
}

TEST(StagedCommunicator, ABlockingCallStartsWhatIsQueuedFirst) {
  auto comm = world_dup();
  const int size = comm->size();
  std::vector<float> x(5000, 1.0f);
  Request pending = comm->all_reduce_async(x.data(), x.size(), DType::f32, ReduceOp::sum);
  // Rank 0 waits for every rank's part before the double all-reduce; the others reach it with theirs
  // still queued (staged), so unless the blocking call starts it first, both sides wait for good.
  if (comm->rank() == 0) pending.wait();
  double d = 1;
  comm->all_reduce(&d, 1, ReduceOp::sum);
  EXPECT_EQ(d, double(size));
  pending.wait();
  EXPECT_EQ(x, std::vector<float>(x.size(), float(size)));
  // The same before an all-to-all.
  pending = comm->all_reduce_async(x.data(), x.size(), DType::f32, ReduceOp::sum);
  if (comm->rank() == 0) pending.wait();
  std::vector<int> ranks(std::size_t(size), comm->rank()), from(std::size_t(size), -1);
  comm->all_to_all(ranks.data(), from.data(), sizeof(int));
  for (int r = 0; r < size; ++r) EXPECT_EQ(from[std::size_t(r)], r);
  pending.wait();
  EXPECT_EQ(x, std::vector<float>(x.size(), float(size * size)));
  comm->barrier();
}

TEST(StagedCommunicator, SendsToOnePeerArriveInOrder) {
  auto comm = world_dup();
  const int rank = comm->rank(), size = comm->size();
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const std::size_t n = std::size_t(1) << 18;
  std::vector<std::vector<unsigned char>> out = {pattern(n, 10 * rank), pattern(n, 10 * rank + 1), pattern(64, 10 * rank + 2)};
  std::vector<std::vector<unsigned char>> in = {std::vector<unsigned char>(n), std::vector<unsigned char>(n),
                                                std::vector<unsigned char>(64)};
  std::vector<Request> received, sent;
  for (std::size_t k = 0; k < 3; ++k) received.push_back(comm->recv_async(in[k].data(), in[k].size(), left, 31));
  for (std::size_t k = 0; k < 3; ++k) sent.push_back(comm->send_async(out[k].data(), out[k].size(), right, 31));
  received.back().wait();  // the last, small one first: the two before it are on their way
  for (Request& r : sent) r.wait();
  for (Request& r : received) r.wait();
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(in[k], pattern(in[k].size(), 10 * left + int(k))) << "message " << k;
}

int world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

double sum_of_world_ranks(Communicator& group) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  double x = world_rank;
  group.all_reduce(&x, 1, ReduceOp::sum);
  return x;
}

void expect_groups_match_topology(const ProcessGroups& g) {
  const Topology& t = g.topology;
  EXPECT_EQ(g.world->size(), t.world);
  EXPECT_EQ(g.world->rank(), t.rank);
  EXPECT_EQ(g.data->size(), t.dp * t.cp);
  EXPECT_EQ(g.data->rank(), t.stage_rank());
  EXPECT_EQ(g.context->size(), t.cp);
  EXPECT_EQ(g.context->rank(), t.cp_rank);
  EXPECT_EQ(g.pipeline->size(), t.pp);
  EXPECT_EQ(g.pipeline->rank(), t.pp_rank);
  EXPECT_GE(t.local_rank, 0);
  EXPECT_LT(t.local_rank, t.local_size);
  EXPECT_LE(t.local_size, t.world);
  // Each group holds the ranks the topology names: the sums of their world ranks, and the world
  // rank of the member at each group rank (a gather of world ranks in group order).
  double same_stage = 0, same_replica = 0, same_part = 0;
  for (int d = 0; d < t.dp; ++d)
    for (int c = 0; c < t.cp; ++c) same_stage += t.rank_of(t.pp_rank, d, c);
  for (int c = 0; c < t.cp; ++c) same_replica += t.rank_of(t.pp_rank, t.dp_rank, c);
  for (int s = 0; s < t.pp; ++s) same_part += t.in_stage(s);
  EXPECT_EQ(sum_of_world_ranks(*g.data), same_stage);
  EXPECT_EQ(sum_of_world_ranks(*g.context), same_replica);
  EXPECT_EQ(sum_of_world_ranks(*g.pipeline), same_part);
  const std::vector<std::string> members = g.data->gather(std::to_string(t.rank), 0);
  for (std::size_t r = 0; r < members.size(); ++r)
    EXPECT_EQ(members[r], std::to_string(t.pp_rank * t.stage_size() + int(r))) << "data-parallel rank " << r;
  const std::vector<std::string> parts = g.context->gather(std::to_string(t.rank), 0);
  for (std::size_t r = 0; r < parts.size(); ++r)
    EXPECT_EQ(parts[r], std::to_string(t.rank_of(t.pp_rank, t.dp_rank, int(r)))) << "context-parallel rank " << r;
  const std::vector<std::string> stages = g.pipeline->gather(std::to_string(t.rank), 0);
  for (std::size_t r = 0; r < stages.size(); ++r)
    EXPECT_EQ(stages[r], std::to_string(t.in_stage(int(r)))) << "pipeline rank " << r;
  EXPECT_EQ(sum_of_world_ranks(*g.world), t.world * (t.world - 1) / 2.0);
}

TEST(ProcessGroups, TwoByTwoSplitsIntoStagesAndReplicas) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const ProcessGroups g = make_mpi_process_groups(2, 2);
  EXPECT_EQ(g.topology.pp_rank, g.topology.rank / 2);
  EXPECT_EQ(g.topology.dp_rank, g.topology.rank % 2);
  expect_groups_match_topology(g);
}

// cp innermost: at 4 ranks, pp 1 x dp 2 x cp 2 puts ranks 0, 1 in replica 0 and 2, 3 in replica 1;
// pp 2 x dp 1 x cp 2 puts them in stages; the data-parallel group is the stage's dp x cp ranks.
TEST(ProcessGroups, ContextPartsAreInnermost) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const ProcessGroups replicas = make_mpi_process_groups(1, 2, 2);
  EXPECT_EQ(replicas.topology.dp_rank, replicas.topology.rank / 2);
  EXPECT_EQ(replicas.topology.cp_rank, replicas.topology.rank % 2);
  EXPECT_EQ(replicas.data->size(), 4);
  expect_groups_match_topology(replicas);
  const ProcessGroups stages = make_mpi_process_groups(2, 1, 2);
  EXPECT_EQ(stages.topology.pp_rank, stages.topology.rank / 2);
  EXPECT_EQ(stages.topology.cp_rank, stages.topology.rank % 2);
  EXPECT_EQ(stages.data->size(), 2);
  expect_groups_match_topology(stages);
  const ProcessGroups inferred = make_mpi_process_groups(1, 0, 2);
  EXPECT_EQ(inferred.topology.dp, 2);
  expect_groups_match_topology(inferred);
}

TEST(ProcessGroups, ContextParallelAloneIsOneReplica) {
  const int world = world_size();
  const ProcessGroups g = make_mpi_process_groups(1, 1, world);
  EXPECT_EQ(g.topology.cp_rank, g.topology.rank);
  EXPECT_EQ(g.topology.dp_rank, 0);
  expect_groups_match_topology(g);
}

TEST(ProcessGroups, DpZeroIsInferredAndPurePipelineWorks) {
  const int world = world_size();
  const ProcessGroups data_only = make_mpi_process_groups(1, 0);
  EXPECT_EQ(data_only.topology.dp, world);
  EXPECT_EQ(data_only.topology.pp, 1);
  expect_groups_match_topology(data_only);
  const ProcessGroups pipeline_only = make_mpi_process_groups(world, 1);
  EXPECT_EQ(pipeline_only.topology.pp, world);
  EXPECT_EQ(pipeline_only.topology.dp, 1);
  expect_groups_match_topology(pipeline_only);
  const ProcessGroups half = make_mpi_process_groups(2, 0);
  EXPECT_EQ(half.topology.dp, world / 2);
  expect_groups_match_topology(half);
}

TEST(ProcessGroups, ALayoutThatDoesNotFitTheWorldThrowsOnEveryRank) {
  EXPECT_THROW(make_mpi_process_groups(3, 0), Error);
  EXPECT_THROW(make_mpi_process_groups(2, world_size()), Error);
  EXPECT_THROW(make_mpi_process_groups(0, 0), Error);
  EXPECT_THROW(make_mpi_process_groups(1, 0, 3), Error);
  EXPECT_THROW(make_mpi_process_groups(1, world_size(), 2), Error);
  EXPECT_THROW(make_mpi_process_groups(1, 1, 0), Error);
  EXPECT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);  // every rank got here: none is left in a split
}

TEST(Topology, RankMapsToStageAndReplica) {
  const Topology a = Topology::of(8, 5, 2, 4);
  EXPECT_EQ(a.pp_rank, 1);
  EXPECT_EQ(a.dp_rank, 1);
  const Topology b = Topology::of(8, 5, 4, 2);
  EXPECT_EQ(b.pp_rank, 2);
  EXPECT_EQ(b.dp_rank, 1);
  for (int rank = 0; rank < 8; ++rank) {
    const Topology t = Topology::of(8, rank, 4, 0);
    EXPECT_EQ(t.dp, 2);
    EXPECT_EQ(t.rank_of(t.pp_rank, t.dp_rank), rank);
    EXPECT_EQ(t.cp, 1);
    EXPECT_EQ(t.cp_rank, 0);
    EXPECT_EQ(t.stage_rank(), t.dp_rank);
    EXPECT_EQ(t.stage_size(), t.dp);
  }
}

// pp 2 x dp 2 x cp 3 = 12 ranks, cp innermost: rank = pp_rank (dp cp) + dp_rank cp + cp_rank.
TEST(Topology, ContextPartsAreInnermost) {
  const Topology t = Topology::of(12, 11, 2, 2, 3);
  EXPECT_EQ(t.pp_rank, 1);
  EXPECT_EQ(t.dp_rank, 1);
  EXPECT_EQ(t.cp_rank, 2);
  EXPECT_EQ(t.stage_rank(), 5);
  EXPECT_EQ(t.stage_size(), 6);
  const Topology u = Topology::of(12, 7, 2, 2, 3);
  EXPECT_EQ(u.pp_rank, 1);
  EXPECT_EQ(u.dp_rank, 0);
  EXPECT_EQ(u.cp_rank, 1);
  EXPECT_EQ(u.in_stage(0), 1);  // its pipeline peer: the same replica and part in stage 0
  EXPECT_EQ(u.rank_of(0, 1), 3);
  EXPECT_EQ(u.rank_of(0, 1, 2), 5);
  EXPECT_EQ(u.at(5).dp_rank, 1);
  EXPECT_EQ(u.at(5).cp_rank, 2);
  EXPECT_EQ(u.at(5).pp_rank, 0);
  std::vector<int> seen;
  for (int rank = 0; rank < 12; ++rank) {
    const Topology r = Topology::of(12, rank, 2, 0, 3);  // dp inferred: 12 / (2 x 3)
    EXPECT_EQ(r.dp, 2);
    EXPECT_EQ(r.rank_of(r.pp_rank, r.dp_rank, r.cp_rank), rank);
    EXPECT_EQ(r.pp_rank * r.stage_size() + r.stage_rank(), rank);
    // Pipeline neighbours keep the replica and the part.
    if (!r.last_stage()) {
      const Topology next = r.at(r.in_stage(r.pp_rank + 1));
      EXPECT_EQ(next.dp_rank, r.dp_rank);
      EXPECT_EQ(next.cp_rank, r.cp_rank);
      EXPECT_EQ(next.pp_rank, r.pp_rank + 1);
    }
  }
}

TEST(Topology, AGridThatDoesNotFitTheWorldIsRefusedNamingParallelCp) {
  const auto message = [](int world, int pp, int dp, int cp) {
    try {
      Topology::of(world, 0, pp, dp, cp);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message(8, 2, 1, 2), "parallel.pp x parallel.dp x parallel.cp = 2 x 1 x 2 = 4 ranks, but 8 were started");
  EXPECT_EQ(message(6, 1, 0, 4), "parallel.pp x parallel.cp = 1 x 4 does not divide the 6 ranks started, so "
                                 "parallel.dp cannot be inferred");
  EXPECT_EQ(message(3, 1, 1, 1), "parallel.pp x parallel.dp x parallel.cp = 1 x 1 x 1 = 1 ranks, but 3 were started");
  EXPECT_EQ(message(8, 2, 2, 2), "(no error)");
  EXPECT_EQ(message(4, 1, 1, 0), "option parallel.cp = 0: must be >= 1");
}

}  // namespace
}  // namespace avtrain::parallel

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) avtrain::parallel::staged |= std::string(argv[i]) == "--staged";
#ifdef AVTRAIN_PINNED_STAGING
  avtrain::parallel::staged = true;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int gate = avtrain::cuda::device_gate(avtrain::cuda::probe_devices());  // the same on every rank of a node
  if (gate != 0 || cudaSetDevice(0) != cudaSuccess) {
    MPI_Finalize();
    return gate != 0 ? gate : 1;
  }
#endif
  const int failed = avtrain::test::run_tests_on_every_rank();
  MPI_Finalize();
  return failed;
}
