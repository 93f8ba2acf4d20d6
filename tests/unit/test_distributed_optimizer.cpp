// The stage's training state as one object: the ZeRO decision, each replica's part of the masters
// and of AdamW's state, the statistics part, the memory it reports; and that a step through it is
// AdamW's step on the same parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "optim/distributed_optimizer.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain {
namespace {

// Three parameters, one of them in bf16 with a working copy: 1000 + 3000 + 77 elements.
void register_params(ParamStore& s, DType working) {
  const ParamId w = s.add("a", "weight", {10, 100}, Init::normal, 0.5f, true);
  s.set_working_dtype(w, working);
  const ParamId v = s.add("b", "weight", {30, 100}, Init::normal, 0.5f, true);
  s.set_working_dtype(v, working);
  s.add("b", "bias", {77}, Init::normal, 0.5f, false);
}

DistributedOptimizerConfig config(int zero) {
  DistributedOptimizerConfig c;
  c.zero = zero;
  c.seed = 7;
  return c;
}

TEST(DistributedOptimizer, OneReplicaHoldsEverythingAndSplitsNothing) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  for (const int zero : {0, 1}) {
    DistributedOptimizer opt(*be, config(zero));
    register_params(opt.params(), DType::bf16);
    opt.build(1, 0, nullptr);
    EXPECT_FALSE(opt.sharded()) << "zero " << zero << " at dp 1";
    EXPECT_FALSE(opt.own_part().has_value());
    const std::size_t n = opt.params().total_size();
    EXPECT_EQ(opt.statistics_part().begin, 0u);
    EXPECT_EQ(opt.statistics_part().end, n);
    EXPECT_EQ(opt.adamw().part().size(), n);
    EXPECT_EQ(opt.buckets(), 0u) << "no data-parallel group, no buckets";
    EXPECT_DOUBLE_EQ(opt.bytes(), double(opt.params().bytes()) + 8.0 * double(n));
    EXPECT_EQ(opt.memory_description().find("parallel.zero"), std::string::npos);
  }
}

TEST(DistributedOptimizer, UnderZeroEachReplicaHoldsItsPartOfTheMastersAndMoments) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  const int dp = 4;
  for (int rank = 0; rank < dp; ++rank) {
    SCOPED_TRACE("replica " + std::to_string(rank));
    DistributedOptimizer opt(*be, config(1));
    register_params(opt.params(), DType::bf16);
    opt.build(dp, rank, nullptr);
    const std::vector<std::size_t> cut = parallel::zero_parts(opt.params().total_size(), dp);
    ASSERT_TRUE(opt.sharded());
    EXPECT_EQ(opt.parts(), cut);
    ASSERT_TRUE(opt.own_part().has_value());
    EXPECT_EQ(opt.own_part()->begin, cut[rank]);
    EXPECT_EQ(opt.own_part()->end, cut[rank + 1]);
    EXPECT_EQ(opt.params().master_part().begin, cut[rank]) << "bf16: the masters split with the moments";
    EXPECT_EQ(opt.params().master_part().end, cut[rank + 1]);
    EXPECT_EQ(opt.adamw().part().begin, cut[rank]);
    EXPECT_EQ(opt.adamw().first_moments().size(), cut[rank + 1] - cut[rank]);
    EXPECT_EQ(opt.statistics_part().begin, cut[rank]);
    EXPECT_DOUBLE_EQ(opt.bytes(), double(opt.params().bytes()) + 8.0 * double(cut[rank + 1] - cut[rank]));
    EXPECT_NE(opt.memory_description().find("parallel.zero 1: this replica's part of 4"), std::string::npos);
  }
}

TEST(DistributedOptimizer, WithoutZeroTheStatisticsPartIsStillTheZeroCut) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  DistributedOptimizer opt(*be, config(0));
  register_params(opt.params(), DType::f32);
  opt.build(3, 2, nullptr);
  const std::vector<std::size_t> cut = parallel::zero_parts(opt.params().total_size(), 3);
  EXPECT_FALSE(opt.sharded());
  EXPECT_EQ(opt.statistics_part().begin, cut[2]);
  EXPECT_EQ(opt.statistics_part().end, cut[3]);
  EXPECT_EQ(opt.adamw().part().size(), opt.params().total_size()) << "replicated: AdamW over everything";
}

TEST(DistributedOptimizer, AStepIsAdamWsStepOnTheSameParameters) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  DistributedOptimizer opt(*be, config(0));
  register_params(opt.params(), DType::bf16);
  opt.build(1, 0, nullptr);
  ParamStore plain;
  register_params(plain, DType::bf16);
  plain.allocate(7);
  plain.refresh_working(*be);
  AdamW adamw(*be, plain, OptimConfig{});
  for (ParamStore* s : {&opt.params(), &plain})
    for (ParamId id = 0; id < 3; ++id)
      for (std::size_t i = 0; i < s->info(id).size; ++i) s->grad(id)[i] = std::cos(float(i + 31 * id));
  for (int step = 0; step < 2; ++step) {
    opt.step(1e-2f, 0.5f);
    adamw.step(1e-2f, 0.5f);
  }
  EXPECT_EQ(std::memcmp(opt.params().values().data(), plain.values().data(), plain.values().bytes()), 0);
  EXPECT_EQ(std::memcmp(opt.params().working().data(), plain.working().data(), plain.working().bytes()), 0);
  opt.start_statistics(0.0f);
  const DistributedOptimizer::Statistics stats = opt.statistics();
  ASSERT_EQ(stats.grads.size(), 3u);
  double want = 0;
  for (std::size_t i = 0; i < plain.info(0).size; ++i) want += double(plain.grad(0)[i]) * plain.grad(0)[i];
  EXPECT_NEAR(stats.grads[0].sum_squares, want, 1e-9 * want);
  const auto [low, high] = opt.replica_range();
  EXPECT_EQ(low, high) << "one replica agrees with itself";
}

}  // namespace
}  // namespace avtrain
