// GradBuckets against a fake data-parallel group: the bucket plan, which buckets each ready_from
// launches, and the averaged gradients that come back in fp32, fp16 and bf16 on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.hpp"
#include "parallel/grad_buckets.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain::parallel {
namespace {

// The buckets cast and scale through a backend; the CPU's works on these host vectors.
Backend& cpu() {
  static const std::unique_ptr<Backend> backend = make_cpu_backend();
  return *backend;
}


// One all-reduce as GradBuckets handed it over.
struct Call {
  const void* data;
  std::size_t count;
  DType type;
  ReduceOp op;
};

// This process as rank 0 of a group of `size` in which every other member holds exactly the values
// this one sends: the sum is then size x mine, added pairwise in the wire type as the interface says.
class FakeGroup final : public Communicator {
 public:
  explicit FakeGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }

  Request all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) override {
    calls.push_back({data, count, type, op});
    bytes_ += count * dtype_size(type);
    return Request(std::make_unique<Reduction>(data, count, type, size_));
  }
  void all_reduce(void* data, std::size_t count, DType type, ReduceOp op) override {
    all_reduce_async(data, count, type, op).wait();
  }
  std::uint64_t bytes_sent() const override { return bytes_; }

  // As this member sees it: its own part holds the sums (here every element does).
  Request reduce_scatter_async(void* data, const std::vector<std::size_t>& bounds, DType type) override {
    calls.push_back({data, bounds.back(), type, ReduceOp::sum});
    scatter_bounds.push_back(bounds);
    bytes_ += bounds.back() * dtype_size(type) / 2;
    return Request(std::make_unique<Reduction>(data, bounds.back(), type, size_));
  }
  Request all_gather_async(void*, const std::vector<std::size_t>&, DType) override {
    return unexpected("all_gather_async"), Request();
  }
  void gather(const void*, void*, const std::vector<std::size_t>&, DType, int) override { unexpected("gather"); }
  void all_reduce(double*, std::size_t, ReduceOp) override { unexpected("all_reduce(double)"); }
  void all_to_all(const void*, void*, std::size_t) override { unexpected("all_to_all"); }
  void broadcast(void*, std::size_t, int) override { unexpected("broadcast"); }
  void send(const void*, std::size_t, int, int) override { unexpected("send"); }
  void recv(void*, std::size_t, int, int) override { unexpected("recv"); }
  Request send_async(const void*, std::size_t, int, int) override { return unexpected("send_async"), Request(); }
  Request recv_async(void*, std::size_t, int, int) override { return unexpected("recv_async"), Request(); }
  std::vector<std::string> gather(const std::string&, int) override { return unexpected("gather"), std::vector<std::string>(); }
  void barrier() override { unexpected("barrier"); }

  std::vector<Call> calls;
  std::vector<std::vector<std::size_t>> scatter_bounds;  // each reduce-scatter's parts

 private:
  static void unexpected(const char* what) { ADD_FAILURE() << "GradBuckets called " << what; }

  // Completes on its first test() or wait(). What this member sent is taken when the operation is
  // started; the buffer must still hold it at completion (the caller may not touch it meanwhile).
  class Reduction final : public Request::Impl {
   public:
    Reduction(void* data, std::size_t count, DType type, int members)
        : data_(data), count_(count), type_(type), members_(members),
          sent_(static_cast<const std::uint8_t*>(data), static_cast<const std::uint8_t*>(data) + count * dtype_size(type)) {}
    bool test() override {
      complete();
      return true;
    }
    void wait() override { complete(); }

   private:
    void complete() {
      if (done_) return;
      done_ = true;
      EXPECT_EQ(std::memcmp(data_, sent_.data(), sent_.size()), 0) << "buffer changed while the all-reduce was in flight";
      if (type_ == DType::f32) {
        auto* x = static_cast<float*>(data_);
        for (std::size_t i = 0; i < count_; ++i) {
          float sum = x[i];
          for (int m = 1; m < members_; ++m) sum += x[i];
          x[i] = sum;
        }
        return;
      }
      auto* x = static_cast<std::uint16_t*>(data_);
      const bool half = type_ == DType::f16;
      for (std::size_t i = 0; i < count_; ++i) {
        const float mine = half ? half_to_float(x[i]) : bf16_to_float(x[i]);
        std::uint16_t sum = x[i];
        for (int m = 1; m < members_; ++m) {
          const float s = (half ? half_to_float(sum) : bf16_to_float(sum)) + mine;
          sum = half ? float_to_half(s) : float_to_bf16(s);
        }
        x[i] = sum;
      }
    }
    void* data_;
    std::size_t count_;
    DType type_;
    int members_;
    std::vector<std::uint8_t> sent_;
    bool done_ = false;
  };

  int size_;
  std::uint64_t bytes_ = 0;
};

const std::vector<std::size_t> kBounds = {0, 100, 300, 350, 1000};
constexpr std::size_t kSize = 1000;
constexpr double kCap250Floats = 250.0 * sizeof(float) / (1024.0 * 1024.0);  // bucket_mb for a 250-float cap

std::vector<float> random_grads(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.01f, 4.0f);
  std::vector<float> g(n);
  for (float& v : g) v = (rng() & 1 ? 1.0f : -1.0f) * magnitude(rng);
  return g;
}

float through(DType type, float v) {
  return type == DType::f16 ? half_to_float(float_to_half(v)) : bf16_to_float(float_to_bf16(v));
}

// One step as the trainer takes it: the buckets from offset 350 on become ready during backward
// (launched, let progress), the rest at its end.
void take_step(GradBuckets& buckets) {
  buckets.start_step();
  buckets.ready_from(350);
  buckets.progress();
  buckets.finish();
}

std::size_t offset_of(const Call& c, const float* grads) {
  return std::size_t(static_cast<const float*>(c.data) - grads);
}

TEST(GradBuckets, PlanCutsWholeParametersFromTheEndWithEachBucketAtLeastTheCap) {
  std::vector<float> grads(kSize);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  buckets.start_step();
  buckets.finish();

  // The launch order is the plan's order; with fp32 on the wire each call points into the buffer.
  ASSERT_EQ(group.calls.size(), buckets.count());
  std::vector<std::pair<std::size_t, std::size_t>> plan;
  for (const Call& c : group.calls) plan.emplace_back(offset_of(c, grads.data()), offset_of(c, grads.data()) + c.count);
  const std::vector<std::pair<std::size_t, std::size_t>> expected = {{350, 1000}, {100, 350}, {0, 100}};
  EXPECT_EQ(plan, expected);

  // The same properties stated generally: contiguous from the end to the start, on parameter
  // bounds, each at least the cap but the last.
  std::size_t end = kSize;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(plan[i].second, end) << "bucket " << i;
    EXPECT_NE(std::find(kBounds.begin(), kBounds.end(), plan[i].first), kBounds.end()) << "bucket " << i;
    if (i + 1 < plan.size()) {
      EXPECT_GE(plan[i].second - plan[i].first, 250u) << "bucket " << i;
    }
    end = plan[i].first;
  }
  EXPECT_EQ(end, 0u);
}

TEST(GradBuckets, ACapLargerThanTheBufferGivesOneBucket) {
  std::vector<float> grads(kSize);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, 25.0, DType::f32, group);
  EXPECT_EQ(buckets.count(), 1u);
}

TEST(GradBuckets, ACapOfOneFloatGivesOneBucketPerParameter) {
  std::vector<float> grads(kSize);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, 1e-9, DType::f32, group);
  EXPECT_EQ(buckets.count(), kBounds.size() - 1);
}

TEST(GradBuckets, ReadyFromLaunchesExactlyTheBucketsWhollyPastTheOffset) {
  std::vector<float> grads(kSize, 1.0f);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  buckets.start_step();

  buckets.ready_from(400);  // inside the last bucket [350, 1000): not final yet
  EXPECT_TRUE(group.calls.empty());
  buckets.ready_from(350);
  ASSERT_EQ(group.calls.size(), 1u);
  EXPECT_EQ(offset_of(group.calls[0], grads.data()), 350u);
  EXPECT_EQ(group.calls[0].count, 650u);
  EXPECT_EQ(group.calls[0].type, DType::f32);
  EXPECT_EQ(group.calls[0].op, ReduceOp::sum);

  buckets.ready_from(350);  // again: nothing new
  buckets.ready_from(101);
  EXPECT_EQ(group.calls.size(), 1u);
  buckets.progress();
  buckets.ready_from(0);  // both remaining buckets, in plan order
  ASSERT_EQ(group.calls.size(), 3u);
  EXPECT_EQ(offset_of(group.calls[1], grads.data()), 100u);
  EXPECT_EQ(group.calls[1].count, 250u);
  EXPECT_EQ(offset_of(group.calls[2], grads.data()), 0u);
  EXPECT_EQ(group.calls[2].count, 100u);

  buckets.finish();  // nothing left to launch
  EXPECT_EQ(group.calls.size(), 3u);
}

TEST(GradBuckets, FinishLaunchesTheRestAndWaitsForAll) {
  std::vector<float> grads(kSize, 1.5f);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  take_step(buckets);
  ASSERT_EQ(group.calls.size(), 3u);
  EXPECT_EQ(offset_of(group.calls[1], grads.data()), 100u);
  EXPECT_EQ(offset_of(group.calls[2], grads.data()), 0u);
  // Every bucket's result is in: the average of two equal halves is the value itself.
  for (std::size_t i = 0; i < kSize; ++i) ASSERT_EQ(grads[i], 1.5f) << "at " << i;
}

TEST(GradBuckets, EachStepLaunchesEveryBucketAgain) {
  std::vector<float> grads(kSize, 2.0f);
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  for (int step = 0; step < 2; ++step) {
    buckets.start_step();
    buckets.ready_from(100);
    buckets.finish();
  }
  EXPECT_EQ(group.calls.size(), 2 * buckets.count());
  EXPECT_EQ(grads[0], 2.0f);
}

TEST(GradBuckets, Fp32AverageOfEqualGradientsIsBitForBitTheGradient) {
  const std::vector<float> original = random_grads(kSize, 1);
  std::vector<float> grads = original;
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  buckets.start_step();
  buckets.ready_from(0);
  buckets.finish();
  for (std::size_t i = 0; i < kSize; ++i) ASSERT_EQ(float_bits(grads[i]), float_bits(original[i])) << "at " << i;
  EXPECT_EQ(group.bytes_sent(), kSize * sizeof(float));
}

TEST(GradBuckets, AverageOverFourDividesByFour) {
  // Dyadic values: x / 4 and its sums over four members are exact in fp32.
  std::vector<float> grads(kSize);
  for (std::size_t i = 0; i < kSize; ++i) grads[i] = float(int(i % 17) - 8) * 0.125f;
  const std::vector<float> original = grads;
  FakeGroup group(4);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, group);
  buckets.start_step();
  buckets.finish();
  EXPECT_EQ(grads, original);
}

class GradBucketsWire : public ::testing::TestWithParam<DType> {};

TEST_P(GradBucketsWire, AverageIsTheGradientRoundedThroughTheWireType) {
  const DType wire = GetParam();
  std::vector<float> original = random_grads(kSize, 2);
  original[0] = 0.25f;
  original[999] = -3.5f;
  original[500] = 1.0f / 3.0f;  // not representable: must come back rounded
  std::vector<float> grads = original;
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, wire, group);
  take_step(buckets);

  ASSERT_EQ(group.calls.size(), 3u);
  for (const Call& c : group.calls) EXPECT_EQ(c.type, wire);
  const float precision = wire == DType::f16 ? 0x1p-11f : 0x1p-8f;  // half an ulp, relative
  for (std::size_t i = 0; i < kSize; ++i) {
    ASSERT_EQ(grads[i], through(wire, original[i])) << "at " << i << ", original " << original[i];
    ASSERT_LE(std::fabs(grads[i] - original[i]), precision * std::fabs(original[i])) << "at " << i;
  }
  EXPECT_EQ(grads[0], 0.25f);
  EXPECT_EQ(grads[999], -3.5f);
  EXPECT_NE(grads[500], 1.0f / 3.0f);
}

TEST(GradBuckets, DividesByDpBeforeTheSixteenBitCastSoTheSumCannotOverflow) {
  // 40000 is below fp16's 65504, but two of them are not: divided first, each member sends 20000
  // and the sum comes back 40000; cast first, the sum would overflow to inf.
  std::vector<float> grads = random_grads(kSize, 5);
  grads[7] = 40000.0f;
  FakeGroup group(2);
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f16, group);
  buckets.start_step();
  buckets.finish();
  EXPECT_EQ(grads[7], 40000.0f);
}

TEST_P(GradBucketsWire, HandsTheGroupHalfTheBytesOfFp32) {
  std::vector<float> grads = random_grads(kSize, 3);
  FakeGroup fp32_group(2), wire_group(2);
  {
    GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, DType::f32, fp32_group);
    buckets.start_step();
    buckets.finish();
  }
  GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, GetParam(), wire_group);
  buckets.start_step();
  buckets.finish();
  EXPECT_EQ(fp32_group.bytes_sent(), kSize * 4);
  EXPECT_EQ(wire_group.bytes_sent() * 2, fp32_group.bytes_sent());
  // The 16-bit copy travels, not the fp32 buffer.
  for (const Call& c : wire_group.calls) {
    const auto* p = static_cast<const std::uint8_t*>(c.data);
    const auto* g = reinterpret_cast<const std::uint8_t*>(grads.data());
    EXPECT_TRUE(p < g || p >= g + kSize * sizeof(float));
  }
}

INSTANTIATE_TEST_SUITE_P(Fp16AndBf16, GradBucketsWire, ::testing::Values(DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

// ZeRO: each bucket is reduce-scattered with the replicas' parts cut at the bucket's edges; this
// member (rank 0 of 2) gets its part back averaged (through the wire type), the same bits as the
// all-reduce gives there, and hands over half the bytes of an all-reduce.
TEST(GradBuckets, UnderZeroBucketsAreReduceScatteredAtThePartsOfTheBuffer) {
  const std::vector<std::size_t> parts = zero_parts(kSize, 2);  // {0, 512, 1000}
  ASSERT_EQ(parts, (std::vector<std::size_t>{0, 512, 1000}));
  for (const DType wire : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(wire));
    const std::vector<float> original = random_grads(kSize, 6);
    std::vector<float> reduced = original, scattered = original;
    FakeGroup all(2), scatter(2);
    GradBuckets all_reduce(cpu(), reduced.data(), kBounds, kCap250Floats, wire, all);
    GradBuckets reduce_scatter(cpu(), scattered.data(), kBounds, kCap250Floats, wire, scatter, parts);
    take_step(all_reduce);
    take_step(reduce_scatter);
    // Buckets [350, 1000), [100, 350), [0, 100): cut at 512 only the first.
    ASSERT_EQ(scatter.scatter_bounds.size(), 3u);
    EXPECT_EQ(scatter.scatter_bounds[0], (std::vector<std::size_t>{0, 162, 650}));
    EXPECT_EQ(scatter.scatter_bounds[1], (std::vector<std::size_t>{0, 250, 250}));
    EXPECT_EQ(scatter.scatter_bounds[2], (std::vector<std::size_t>{0, 100, 100}));
    for (std::size_t i = 0; i < 512; ++i) ASSERT_EQ(float_bits(scattered[i]), float_bits(reduced[i])) << "at " << i;
    EXPECT_EQ(scatter.bytes_sent() * 2, all.bytes_sent());
  }
}

TEST(GradBuckets, LocalSumSquaresIsOverTheOwnGradientsBeforeReduction) {
  const std::vector<float> original = random_grads(kSize, 4);
  double expected = 0;
  for (const float v : original) expected += double(v) * double(v);
  for (const DType wire : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<float> grads = original;
    FakeGroup group(2);
    GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, wire, group);
    take_step(buckets);
    EXPECT_NEAR(buckets.local_sum_squares(), expected, 1e-12 * expected) << dtype_name(wire);
    // A new step starts counting afresh.
    buckets.start_step();
    EXPECT_EQ(buckets.local_sum_squares(), 0.0);
  }
}

TEST(GradBuckets, GroupOfOneMakesNoCallsAndLeavesTheGradients) {
  const std::vector<float> original = random_grads(kSize, 5);
  for (const DType wire : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<float> grads = original;
    FakeGroup group(1);
    GradBuckets buckets(cpu(), grads.data(), kBounds, kCap250Floats, wire, group);
    take_step(buckets);
    EXPECT_TRUE(group.calls.empty()) << dtype_name(wire);
    EXPECT_EQ(group.bytes_sent(), 0u);
    EXPECT_EQ(buckets.local_sum_squares(), 0.0);
    EXPECT_EQ(grads, original) << dtype_name(wire);
  }
}

}  // namespace
}  // namespace avtrain::parallel
