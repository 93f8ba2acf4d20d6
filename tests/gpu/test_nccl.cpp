// NcclCommunicator on this machine's GPUs, under mpiexec with 1 or 2 ranks, one GPU per rank.
// Every rank exits 77 (CTest: skipped) when any rank sees no CUDA device or fewer devices than
// there are ranks. Each rank runs the world-of-one suite on its own (an NCCL group over
// MPI_COMM_SELF) and, together, the suites over the world; expected values are computed locally.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "../mpi/mpi_gtest_runner.hpp"
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_check.hpp"
#include "device_query.hpp"
#include "device_binding.hpp"
#include "nccl_communicator.hpp"
#include "parallel/mpi_communicator.hpp"
#include "parallel/process_groups.hpp"

namespace avtrain::cuda {
namespace {

using parallel::ReduceOp;

// Device memory of `bytes` bytes.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) { CUDA_CHECK(cudaMalloc(&data_, bytes)); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return data_; }
  void upload(const std::vector<std::byte>& bytes) {
    CUDA_CHECK(cudaMemcpy(data_, bytes.data(), bytes_, cudaMemcpyHostToDevice));
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> bytes(bytes_);
    CUDA_CHECK(cudaMemcpy(bytes.data(), data_, bytes_, cudaMemcpyDeviceToHost));
    return bytes;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

std::vector<std::byte> encode(const std::vector<float>& values, DType type) {
  std::vector<std::byte> bytes(values.size() * dtype_size(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DType::f32) {
      std::memcpy(&bytes[4 * i], &values[i], 4);
      continue;
    }
    const std::uint16_t h = type == DType::f16 ? float_to_half(values[i]) : float_to_bf16(values[i]);
    std::memcpy(&bytes[2 * i], &h, 2);
  }
  return bytes;
}

std::vector<float> decode(const std::vector<std::byte>& bytes, DType type) {
  std::vector<float> values(bytes.size() / dtype_size(type));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (type == DType::f32) {
      std::memcpy(&values[i], &bytes[4 * i], 4);
      continue;
    }
    std::uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    values[i] = type == DType::f16 ? half_to_float(h) : bf16_to_float(h);
  }
  return values;
}

// Rank r's value i: nonzero, alternating in sign, exact in bf16 (and so are sums over 2 ranks).
float value(std::size_t i, int r) { return (i % 2 ? -0.25f : 0.25f) * float(i % 5 + 1) * float(r + 1); }

std::vector<float> values_of(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(i, r);
  return v;
}

std::vector<float> expected(ReduceOp op, int ranks, std::size_t n) {
  std::vector<float> v(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i)
    for (int r = 0; r < ranks; ++r)
      v[i] = op == ReduceOp::sum ? v[i] + value(i, r) : r == 0 ? value(i, r) : std::max(v[i], value(i, r));
  return v;
}

std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> bytes(n);
  for (std::size_t i = 0; i < n; ++i) bytes[i] = std::byte((i * 7 + std::size_t(seed) * 31 + 1) & 0xff);
  return bytes;
}

struct Case {
  DType type;
  ReduceOp op;
  bool async;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.type)) + (info.param.op == ReduceOp::sum ? "_sum" : "_max") +
         (info.param.async ? "_async" : "_blocking");
}

const std::vector<Case> cases = [] {
  std::vector<Case> all;
  for (DType type : {DType::f32, DType::f16, DType::bf16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (bool async : {false, true}) all.push_back({type, op, async});
  return all;
}();

void check_all_reduce(NcclCommunicator& nccl, const Case& c) {
  const std::size_t n = 4099;  // not a multiple of NCCL's chunks
  DeviceBuffer buffer(n * dtype_size(c.type));
  buffer.upload(encode(values_of(nccl.rank(), n), c.type));
  if (c.async) {
    parallel::Request request = nccl.all_reduce_async(buffer.data(), n, c.type, c.op);
    request.wait();
    EXPECT_FALSE(request.active());
  } else {
    nccl.all_reduce(buffer.data(), n, c.type, c.op);
  }
  const std::vector<float> got = decode(buffer.download(), c.type);
  const std::vector<float> want = expected(c.op, nccl.size(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "value " << i;
}

// ZeRO's collectives over uneven parts (rank 1's empty when there is one): the reduce-scatter leaves
// each rank the sums of its part, the all-gather every part everywhere, the gather every part at the
// last rank.
void check_parts(NcclCommunicator& nccl, DType type) {
  std::vector<std::size_t> bounds = {0};
  for (int r = 0; r < nccl.size(); ++r) bounds.push_back(bounds.back() + (r == 1 ? 0 : std::size_t(1000 + 333 * r)));
  const std::size_t n = bounds.back(), element = dtype_size(type);
  const std::size_t lo = bounds[std::size_t(nccl.rank())], hi = bounds[std::size_t(nccl.rank()) + 1];
  DeviceBuffer buffer(n * element);
  buffer.upload(encode(values_of(nccl.rank(), n), type));
  nccl.reduce_scatter_async(buffer.data(), bounds, type).wait();
  const std::vector<float> got = decode(buffer.download(), type), want = expected(ReduceOp::sum, nccl.size(), n);
  for (std::size_t i = lo; i < hi; ++i) ASSERT_EQ(got[i], want[i]) << "reduce-scatter, value " << i;
  // Each rank's part of its own values, gathered everywhere, then at the last rank.
  std::vector<float> parts(n, 0.0f);
  for (int r = 0; r < nccl.size(); ++r)
    for (std::size_t i = bounds[std::size_t(r)]; i < bounds[std::size_t(r) + 1]; ++i) parts[i] = value(i, r);
  std::vector<float> mine(n, -1.0f);
  std::copy(parts.begin() + std::ptrdiff_t(lo), parts.begin() + std::ptrdiff_t(hi), mine.begin() + std::ptrdiff_t(lo));
  buffer.upload(encode(mine, type));
  nccl.all_gather_async(buffer.data(), bounds, type).wait();
  EXPECT_TRUE(decode(buffer.download(), type) == decode(encode(parts, type), type)) << "all-gather";
  const std::vector<std::byte> encoded = encode(mine, type);
  const std::vector<std::byte> own(encoded.begin() + std::ptrdiff_t(lo * element), encoded.begin() + std::ptrdiff_t(hi * element));
  DeviceBuffer piece(std::max<std::size_t>(own.size(), 1)), all(n * element);
  if (!own.empty()) CUDA_CHECK(cudaMemcpy(piece.data(), own.data(), own.size(), cudaMemcpyHostToDevice));
  const int root = nccl.size() - 1;
  nccl.gather(piece.data(), nccl.rank() == root ? all.data() : nullptr, bounds, type, root);
  if (nccl.rank() == root) {
    EXPECT_TRUE(decode(all.download(), type) == decode(encode(parts, type), type)) << "gather";
  }
}

// Context parallelism's head exchange: chunk r of each rank's send lands at chunk `sender` of rank
// r's recv (the own chunk copied), whose every byte starts different from what it should get;
// bytes_sent counts the chunks for the other ranks. Chunks of 64 KiB + 1 and of 6 bytes.
void check_all_to_all(NcclCommunicator& nccl) {
  const int rank = nccl.rank(), size = nccl.size();
  for (std::size_t each : {std::size_t(65537), std::size_t(6)}) {
    SCOPED_TRACE(std::to_string(each) + " bytes each");
    std::vector<std::byte> send, want;
    for (int r = 0; r < size; ++r) {
      const std::vector<std::byte> out = pattern(each, 10 * rank + r), in = pattern(each, 10 * r + rank);
      send.insert(send.end(), out.begin(), out.end());
      want.insert(want.end(), in.begin(), in.end());
    }
    std::vector<std::byte> poison(want.size());
    for (std::size_t i = 0; i < want.size(); ++i) poison[i] = ~want[i];
    DeviceBuffer from(send.size()), to(send.size());
    from.upload(send);
    to.upload(poison);
    const std::uint64_t before = nccl.bytes_sent();
    nccl.all_to_all(from.data(), to.data(), each);
    EXPECT_EQ(nccl.bytes_sent() - before, std::uint64_t(size - 1) * each);
    const std::vector<std::byte> got = to.download();
    for (int r = 0; r < size; ++r)
      EXPECT_TRUE(std::equal(got.begin() + std::ptrdiff_t(r * each), got.begin() + std::ptrdiff_t((r + 1) * each),
                             want.begin() + std::ptrdiff_t(r * each)))
          << "the chunk from rank " << r;
    EXPECT_TRUE(from.download() == send) << "send changed";
  }
}

// An NCCL group of one over MPI_COMM_SELF, borrowing its MPI communicator.
class WorldOfOne : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    mpi_ = std::make_unique<parallel::MpiCommunicator>(MPI_COMM_SELF, false, "self");
    nccl_ = make_nccl_communicator(*mpi_, "self");
  }
  static void TearDownTestSuite() {
    nccl_.reset();
    mpi_.reset();
  }

 protected:
  static inline std::unique_ptr<parallel::MpiCommunicator> mpi_;
  static inline std::unique_ptr<NcclCommunicator> nccl_;
};

class WorldOfOneTypes : public WorldOfOne, public ::testing::WithParamInterface<Case> {};

TEST_P(WorldOfOneTypes, AllReduceKeepsTheValues) { check_all_reduce(*nccl_, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Types, WorldOfOneTypes, ::testing::ValuesIn(cases), case_name);

TEST_F(WorldOfOne, ReduceScatterAllGatherAndGatherOfOnePart) {
  for (DType type : {DType::f32, DType::bf16}) check_parts(*nccl_, type);
}

TEST_F(WorldOfOne, SendsToItselfInOneGroup) {
  const std::size_t n = 100003;
  DeviceBuffer from(n), to(n);
  from.upload(pattern(n, 1));
  to.upload(pattern(n, 2));
  const std::uint64_t before = nccl_->bytes_sent();
  nccl_->group_begin();
  parallel::Request sent = nccl_->send_async(from.data(), n, 0, /*tag=*/5);
  parallel::Request received = nccl_->recv_async(to.data(), n, 0, /*tag=*/5);
  nccl_->group_end();
  received.wait();
  sent.wait();
  EXPECT_TRUE(to.download() == pattern(n, 1));
  EXPECT_EQ(nccl_->bytes_sent() - before, n);
}

TEST_F(WorldOfOne, BroadcastKeepsTheRootsBytes) {
  DeviceBuffer buffer(1000);
  buffer.upload(pattern(1000, 3));
  nccl_->broadcast(buffer.data(), 1000, 0);
  EXPECT_TRUE(buffer.download() == pattern(1000, 3));
  EXPECT_THROW(nccl_->broadcast(buffer.data(), 1000, 1), Error);
}

TEST_F(WorldOfOne, WaitsForTheComputeStream) {
  const std::size_t n = 1 << 20;
  const std::vector<std::byte> bytes = encode(values_of(0, n), DType::f32);
  DeviceBuffer buffer(bytes.size());
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0, bytes.size(), compute));
  CUDA_CHECK(cudaMemcpyAsync(buffer.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, compute));
  nccl_->after(compute);
  nccl_->all_reduce(buffer.data(), n, DType::f32, ReduceOp::sum);
  EXPECT_TRUE(buffer.download() == bytes);
  CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST_F(WorldOfOne, AllToAllCopiesTheOwnChunk) { check_all_to_all(*nccl_); }

// The own chunk's copy runs on stream(), after the compute stream's work that wrote send.
TEST_F(WorldOfOne, AllToAllWaitsForTheComputeStream) {
  const std::size_t n = 1 << 22;
  const std::vector<std::byte> bytes = pattern(n, 7);
  DeviceBuffer from(n), to(n);
  to.upload(pattern(n, 8));
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemsetAsync(from.data(), 0, n, compute));
  CUDA_CHECK(cudaMemcpyAsync(from.data(), bytes.data(), n, cudaMemcpyHostToDevice, compute));
  nccl_->after(compute);
  nccl_->all_to_all(from.data(), to.data(), n);
  EXPECT_TRUE(to.download() == bytes);
  CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST_F(WorldOfOne, HostDataGoesThroughMpi) {
  double stats[2] = {1.5, -2.0};
  nccl_->all_reduce(stats, 2, ReduceOp::sum);
  EXPECT_EQ(stats[0], 1.5);
  EXPECT_EQ(stats[1], -2.0);
  EXPECT_EQ(nccl_->gather("mine", 0), std::vector<std::string>{"mine"});
  nccl_->barrier();
}

// An NCCL group over the world (1 or 2 ranks), owning its MPI communicator.
class World : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    auto mpi = std::make_unique<parallel::MpiCommunicator>(comm, true, "world");
    nccl_ = std::make_unique<NcclCommunicator>(std::move(mpi), "world");
  }
  static void TearDownTestSuite() { nccl_.reset(); }

 protected:
  static inline std::unique_ptr<NcclCommunicator> nccl_;
};

class WorldTypes : public World, public ::testing::WithParamInterface<Case> {};

TEST_P(WorldTypes, AllReducesAcrossTheRanks) { check_all_reduce(*nccl_, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Types, WorldTypes, ::testing::ValuesIn(cases), case_name);

TEST_F(World, ExchangesWithTheNextRankInOneGroup) {
  const int r = nccl_->rank(), n = nccl_->size();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const std::size_t bytes = 65537;
  DeviceBuffer out(bytes), in(bytes);
  out.upload(pattern(bytes, r));
  nccl_->group_begin();
  parallel::Request sent = nccl_->send_async(out.data(), bytes, next, 0);
  parallel::Request received = nccl_->recv_async(in.data(), bytes, prev, 0);
  nccl_->group_end();
  sent.wait();
  received.wait();
  EXPECT_TRUE(in.download() == pattern(bytes, prev));
}

TEST_F(World, BlockingSendMatchesReceiveInOrder) {
  if (nccl_->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  DeviceBuffer first(64), second(128);
  if (nccl_->rank() == 0) {
    first.upload(pattern(64, 10));
    second.upload(pattern(128, 11));
    nccl_->send(first.data(), 64, 1, /*tag=*/1);
    nccl_->send(second.data(), 128, 1, /*tag=*/2);
  } else if (nccl_->rank() == 1) {
    nccl_->recv(first.data(), 64, 0, /*tag=*/1);
    nccl_->recv(second.data(), 128, 0, /*tag=*/2);
    EXPECT_TRUE(first.download() == pattern(64, 10));
    EXPECT_TRUE(second.download() == pattern(128, 11));
  }
}

TEST_F(World, ReduceScatterAllGatherAndGatherOfUnevenParts) {
  for (DType type : {DType::f32, DType::f16, DType::bf16}) check_parts(*nccl_, type);
}

TEST_F(World, AllToAllExchangesEveryPairsChunk) { check_all_to_all(*nccl_); }

TEST_F(World, BroadcastsFromTheLastRank) {
  const int root = nccl_->size() - 1;
  DeviceBuffer buffer(4096);
  buffer.upload(pattern(4096, nccl_->rank()));
  nccl_->broadcast(buffer.data(), 4096, root);
  EXPECT_TRUE(buffer.download() == pattern(4096, root));
}

TEST(ProcessGroups, DataAndContextBecomeNcclPipelineAndWorldStayMpi) {
  parallel::ProcessGroups groups = parallel::make_mpi_process_groups(/*pp=*/1, /*dp=*/0);
  make_nccl_groups(groups, nullptr);
  ASSERT_NE(dynamic_cast<NcclCommunicator*>(groups.data.get()), nullptr);
  ASSERT_NE(dynamic_cast<NcclCommunicator*>(groups.context.get()), nullptr);  // made at cp 1 too, of size 1
  EXPECT_EQ(groups.context->size(), 1);
  EXPECT_EQ(dynamic_cast<NcclCommunicator*>(groups.pipeline.get()), nullptr);
  EXPECT_EQ(dynamic_cast<NcclCommunicator*>(groups.world.get()), nullptr);
  EXPECT_EQ(groups.data->size(), groups.topology.world);
  EXPECT_EQ(groups.pipeline->size(), 1);
  check_all_reduce(*static_cast<NcclCommunicator*>(groups.data.get()), {DType::bf16, ReduceOp::sum, true});
}

// pp = world: the pipeline becomes NCCL, one communicator per direction. Each stage first sends
// (activations forward on one, gradients back on the other) and only then receives: on a single
// tagless communicator the two sends between neighbours would wait for each other.
TEST(ProcessGroups, PipelineBecomesNcclOneCommunicatorPerDirection) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size == 1) GTEST_SKIP() << "one rank: no pipeline";
  parallel::ProcessGroups groups = parallel::make_mpi_process_groups(/*pp=*/size, /*dp=*/1);
  make_nccl_groups(groups, nullptr);
  ASSERT_NE(dynamic_cast<NcclCommunicator*>(groups.pipeline.get()), nullptr);
  ASSERT_NE(dynamic_cast<NcclCommunicator*>(groups.pipeline_gradients.get()), nullptr);
  parallel::Communicator& forward = *groups.pipeline;
  parallel::Communicator& backward = groups.gradient_pipeline();
  const int stage = forward.rank(), stages = forward.size();
  constexpr std::size_t kBytes = 1 << 20;
  DeviceBuffer activation_out(kBytes), activation_in(kBytes), gradient_out(kBytes), gradient_in(kBytes);
  activation_out.upload(pattern(kBytes, 100 + stage));
  gradient_out.upload(pattern(kBytes, 200 + stage));
  parallel::Request sent_forward, sent_backward;
  if (stage + 1 < stages) sent_forward = forward.send_async(activation_out.data(), kBytes, stage + 1, 0);
  if (stage > 0) sent_backward = backward.send_async(gradient_out.data(), kBytes, stage - 1, 0);
  if (stage > 0) forward.recv(activation_in.data(), kBytes, stage - 1, 0);
  if (stage + 1 < stages) backward.recv(gradient_in.data(), kBytes, stage + 1, 0);
  sent_forward.wait();
  sent_backward.wait();
  if (stage > 0) {
    EXPECT_TRUE(activation_in.download() == pattern(kBytes, 100 + stage - 1));
  }
  if (stage + 1 < stages) {
    EXPECT_TRUE(gradient_in.download() == pattern(kBytes, 200 + stage + 1));
  }
}

// On every rank: 1 when every rank sees at least as many devices as there are ranks, 0 when some
// rank sees too few (skipped), -1 when some rank's CUDA runtime fails otherwise (a failure).
int enough_devices(int ranks) {
  const DeviceProbe probe = probe_devices();
  if (!probe.error.empty()) std::printf("CUDA error: %s\n", probe.error.c_str());
  const int mine = !probe.error.empty() ? -1 : probe.count >= ranks ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

}  // namespace
}  // namespace avtrain::cuda

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int devices = avtrain::cuda::enough_devices(size);
  if (devices < 0) {
    if (rank == 0) std::printf("a CUDA error on some rank (printed above): FAILED\n");
    MPI_Finalize();
    return 1;
  }
  if (devices == 0) {
    if (rank == 0)
      std::printf("fewer than %d CUDA device(s) visible to some rank: skipped (NCCL needs a GPU per rank; on one GPU "
                  "the same collectives and transfers run staged, in gpu_layouts_match_staged_mpi)\n", size);
    MPI_Finalize();
    return 77;
  }
  avtrain::cuda::set_error_rank(rank);
  avtrain::parallel::Topology node;  // one node: the node-local rank is the world rank
  node.world = node.local_size = size;
  node.rank = node.local_rank = rank;
  avtrain::cuda::bind_device(node, /*nccl=*/true);
  const int failed = avtrain::test::run_tests_on_every_rank();
  MPI_Finalize();
  return failed;
}
