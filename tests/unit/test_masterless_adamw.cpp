// Training without fp32 masters (precision.master_weights none): AdamW on the bf16 weights against
// a plain reference, nearest and stochastic; the state's memory (4 bytes less per bf16 weight);
// the same bits under any cut into ZeRO parts or pipeline stages (the rounding bits keyed by name
// and element, not by offset); the statistics; and a checkpoint that resumes bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "core/half.hpp"
#include "core/keyed_random.hpp"
#include "core/stochastic_round.hpp"
#include "optim/distributed_optimizer.hpp"
#include "parallel/zero_parts.hpp"

namespace avtrain {
namespace {

TEST(MasterlessAdamW, TheCpuUpdateIsTheFp32UpdateRoundedAsAsked) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  constexpr std::size_t n = 20000, first = 12345;  // a piece of a parameter, from its element 12345
  const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.05f;
  const std::uint64_t key = rounding_key(4, "x.weight");
  for (const Rounding rounding : {Rounding::nearest, Rounding::stochastic}) {
    SCOPED_TRACE(enum_name(rounding));
    KeyedRandom rng(11, "state");
    std::vector<std::uint16_t> w(n);
    std::vector<float> g(n), m(n), v(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = float_to_bf16(float(rng.normal()));
      g[i] = float(rng.normal() * 1e-2);
      m[i] = float(rng.normal() * 1e-3);
      v[i] = float(rng.uniform() * 1e-4);
    }
    std::vector<std::uint16_t> w16 = w;
    std::vector<float> m16 = m, v16 = v;
    constexpr int step = 7;
    be->adamw_bf16(w16.data(), g.data(), m16.data(), v16.data(), n, lr, b1, b2, eps, wd, step, rounding, key, first);
    // The reference: the fp32 update of the widened weights (adamw, checked on its own), then rounded
    // with the bits of (key, step, first + i); and, independently, the update in double.
    std::vector<float> w32(n), m32 = m, v32 = v;
    for (std::size_t i = 0; i < n; ++i) w32[i] = bf16_to_float(w[i]);
    be->adamw(w32.data(), g.data(), m32.data(), v32.data(), n, lr, b1, b2, eps, wd, step);
    const std::uint64_t stream = rounding_stream(key, step);
    std::size_t up = 0, moved = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(m16[i], m32[i]) << i;
      ASSERT_EQ(v16[i], v32[i]) << i;
      const std::uint16_t want = rounding == Rounding::stochastic
                                     ? float_to_bf16_stochastic(w32[i], rounding_bits(stream, first + i))
                                     : float_to_bf16(w32[i]);
      ASSERT_EQ(w16[i], want) << i;
      const double wi = bf16_to_float(w[i]);
      const double mi = 0.9 * m[i] + 0.1 * double(g[i]), vi = 0.95 * v[i] + 0.05 * double(g[i]) * g[i];
      const double exact = wi - double(lr) * (mi / (1 - std::pow(0.9, step)) /
                                                  (std::sqrt(vi / (1 - std::pow(0.95, step))) + double(eps)) +
                                              double(wd) * wi);
      // The result is within one bf16 spacing of the exact update (one of its two neighbours).
      const float got = bf16_to_float(w16[i]);
      ASSERT_LE(std::abs(got - exact), std::ldexp(std::abs(exact), -7) * 1.001 + 1e-30) << i;
      up += std::abs(got) > std::abs(w32[i]);
      moved += w16[i] != w[i];
    }
    // Stochastic rounding rounds up about as often as the fractions say: here, a fair share of both.
    if (rounding == Rounding::stochastic) {
      EXPECT_GT(up, n / 5);
      EXPECT_LT(up, 4 * n / 5);
    }
    EXPECT_GT(moved, n / 10) << "the update moved the weights";
  }
}

// Three parameters, two bf16 weight matrices and an fp32 bias: 1000 + 3000 + 77 elements.
void register_params(ParamStore& s, const std::vector<std::string>& which = {"a", "b"}) {
  for (const std::string& m : which) {
    const ParamId w = s.add(m, "weight", {m == "a" ? 10 : 30, 100}, Init::normal, 0.5f, true);
    s.set_working_dtype(w, DType::bf16);
    if (m == "b") s.add("b", "bias", {77}, Init::normal, 0.5f, false);
  }
}

DistributedOptimizerConfig config(bool masters, Rounding rounding, int zero = 0, std::uint64_t seed = 7) {
  DistributedOptimizerConfig c;
  c.zero = zero;
  c.seed = seed;
  c.masters = masters;
  c.rounding = rounding;
  c.optim.lr = 1e-3;
  return c;
}

// The gradients of update `step`, by parameter name and element: the same under any cut.
void set_grads(ParamStore& s, int step) {
  for (ParamId id = 0; id < ParamId(s.params().size()); ++id)
    for (std::size_t i = 0; i < s.info(id).size; ++i)
      s.grad(id)[i] = std::cos(float(i) * 0.37f + float(s.info(id).name.size() * 13 + step));
}

std::vector<std::uint16_t> weights(const ParamStore& s, const std::string& name, std::size_t from, std::size_t to) {
  for (const ParamInfo& p : s.params())
    if (p.name == name)
      return {s.working().data() + p.working_offset + from, s.working().data() + p.working_offset + to};
  ADD_FAILURE() << name;
  return {};
}

TEST(MasterlessAdamW, NoMastersSavesFourBytesPerBf16Weight) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  DistributedOptimizer with(*be, config(true, Rounding::nearest)), without(*be, config(false, Rounding::stochastic));
  for (DistributedOptimizer* o : {&with, &without}) {
    register_params(o->params());
    o->build(1, 0, nullptr);
  }
  ASSERT_TRUE(without.params().masterless());
  EXPECT_FALSE(with.params().masterless());
  EXPECT_EQ(without.params().masters().size(), 0u);
  EXPECT_EQ(without.params().values().size(), 80u) << "the bias alone, padded";
  // The masters of the two matrices, each padded to 16 elements: 1008 + 3008.
  EXPECT_DOUBLE_EQ(with.bytes() - without.bytes(), 4.0 * (1008 + 3008)) << "the masters of the two matrices";
  EXPECT_NE(without.memory_description().find("bf16 weights (no fp32 masters)"), std::string::npos);
}

// Trains `steps` updates; the store's bf16 weights and fp32 values after them.
void train(DistributedOptimizer& o, int steps) {
  for (int step = 0; step < steps; ++step) {
    set_grads(o.params(), step);
    o.step(float(1e-3), 1.0f);
  }
}

TEST(MasterlessAdamW, ZeroPartsAndPipelineStagesGiveTheSameBits) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  for (const Rounding rounding : {Rounding::nearest, Rounding::stochastic}) {
    SCOPED_TRACE(enum_name(rounding));
    DistributedOptimizer whole(*be, config(false, rounding));
    register_params(whole.params());
    whole.build(1, 0, nullptr);
    train(whole, 5);
    // Under ZeRO each replica updates its part of every tensor: the same bits there.
    for (const int dp : {2, 3}) {
      for (int rank = 0; rank < dp; ++rank) {
        DistributedOptimizer part(*be, config(false, rounding, 1));
        register_params(part.params());
        part.build(dp, rank, nullptr);
        ASSERT_TRUE(part.sharded());
        train(part, 5);
        const FlatPart own = *part.own_part();
        for (const ParamInfo& p : whole.params().params()) {
          const FlatPart mine = own.overlap(p.offset, p.offset + p.size);
          if (mine.size() == 0) continue;
          const std::size_t from = mine.begin - p.offset, to = mine.end - p.offset;
          if (p.working != DType::f32) {
            EXPECT_EQ(weights(part.params(), p.name, from, to), weights(whole.params(), p.name, from, to))
                << p.name << " dp " << dp << " rank " << rank;
          } else {
            EXPECT_EQ(std::memcmp(part.params().values().data() + p.value_offset + from,
                                  whole.params().values().data() + p.value_offset + from, (to - from) * sizeof(float)),
                      0)
                << p.name;
          }
        }
      }
    }
    // A pipeline stage holding b alone (b.weight at another flat offset): the same bits for b.
    DistributedOptimizer stage(*be, config(false, rounding));
    register_params(stage.params(), {"b"});
    stage.build(1, 0, nullptr);
    train(stage, 5);
    EXPECT_EQ(weights(stage.params(), "b.weight", 0, 3000), weights(whole.params(), "b.weight", 0, 3000));
    // Repeatable: the same seed the same bits; another seed other stochastic bits.
    DistributedOptimizer again(*be, config(false, rounding)), other(*be, config(false, rounding, 0, 8));
    for (DistributedOptimizer* o : {&again, &other}) {
      register_params(o->params());
      o->build(1, 0, nullptr);
    }
    train(again, 5);
    EXPECT_EQ(weights(again.params(), "a.weight", 0, 1000), weights(whole.params(), "a.weight", 0, 1000));
    // (Another seed also draws other initial weights: compare the moves, not the values.)
    if (rounding == Rounding::stochastic) {
      const std::vector<std::uint16_t> before = weights(other.params(), "a.weight", 0, 1000);
      train(other, 5);
      EXPECT_NE(weights(other.params(), "a.weight", 0, 1000), before);
    }
  }
}

TEST(MasterlessAdamW, NearestCancelsSmallUpdatesThatStochasticRoundingKeeps) {
  // lr 1e-5: Adam's update (about lr in size) is under half a bf16 ulp of every weight above
  // 2.6e-3 in size, that is of all but about 0.4 % of these N(0, 0.5^2) weights: nearest rounds
  // them back every step; stochastic rounding moves a weight w with probability |update| / ulp(w)
  // a step (measured: 7 and 128 of the 1000 moved; the bits are keyed, so the counts repeat).
  const std::unique_ptr<Backend> be = make_cpu_backend();
  std::size_t moved[2] = {0, 0};
  for (const Rounding rounding : {Rounding::nearest, Rounding::stochastic}) {
    DistributedOptimizer o(*be, config(false, rounding));
    register_params(o.params(), {"a"});
    o.build(1, 0, nullptr);
    const std::vector<std::uint16_t> start = weights(o.params(), "a.weight", 0, 1000);
    for (int step = 0; step < 100; ++step) {
      set_grads(o.params(), step);
      o.step(1e-5f, 1.0f);
    }
    const std::vector<std::uint16_t> end = weights(o.params(), "a.weight", 0, 1000);
    for (std::size_t i = 0; i < end.size(); ++i) moved[int(rounding)] += end[i] != start[i];
  }
  EXPECT_LT(moved[0], 30u) << "nearest: only the smallest weights can move";
  EXPECT_GT(moved[1], 80u) << "stochastic: the small updates survive";
  std::cout << "weights of 1000 moved in 100 steps of lr 1e-5: nearest " << moved[0] << ", stochastic " << moved[1]
            << "\n";
}

TEST(MasterlessAdamW, TheValueStatisticsAreThoseOfTheBf16Weights) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  DistributedOptimizer o(*be, config(false, Rounding::stochastic));
  register_params(o.params());
  o.build(1, 0, nullptr);
  train(o, 2);
  o.start_statistics(0.0f);
  const DistributedOptimizer::Statistics stats = o.statistics();
  ASSERT_EQ(stats.values.size(), 3u);
  for (ParamId id = 0; id < 3; ++id) {
    const ParamInfo& p = o.params().info(id);
    double want = 0;
    for (std::size_t i = 0; i < p.size; ++i) {
      const double x = p.working == DType::f32 ? o.params().value(id)[i]
                                               : bf16_to_float(o.params().working()[p.working_offset + i]);
      want += x * x;
    }
    EXPECT_NEAR(stats.values[id].sum_squares, want, 1e-6 * want) << p.name;
    EXPECT_GT(want, 0);
  }
  const auto [low, high] = o.replica_range();
  EXPECT_EQ(low, high);
  EXPECT_GT(low, 0);
}

TEST(MasterlessAdamW, ACheckpointResumesBitForBit) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("avtrain_masterless_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "stage-0.h5").string();
  DistributedOptimizer straight(*be, config(false, Rounding::stochastic));
  register_params(straight.params());
  straight.build(1, 0, nullptr);
  train(straight, 3);
  checkpoint::StageSnapshot snapshot;
  snapshot.take(*be, straight.params(), &straight.adamw(), checkpoint::Counters{3, 3, straight.adamw().updates(), {}, 0},
                nlohmann::json::object());
  checkpoint::write_stage(file, snapshot);
  DistributedOptimizer resumed(*be, config(false, Rounding::stochastic, 0, 7));
  register_params(resumed.params());
  resumed.build(1, 0, nullptr);
  checkpoint::Checkpoint({file}).load(*be, resumed.params(), &resumed.adamw());
  resumed.loaded(*be);
  EXPECT_EQ(weights(resumed.params(), "a.weight", 0, 1000), weights(straight.params(), "a.weight", 0, 1000));
  EXPECT_EQ(weights(resumed.params(), "b.weight", 0, 3000), weights(straight.params(), "b.weight", 0, 3000));
  for (int step = 3; step < 6; ++step)
    for (DistributedOptimizer* o : {&straight, &resumed}) {
      set_grads(o->params(), step);
      o->step(1e-3f, 1.0f);
    }
  EXPECT_EQ(weights(resumed.params(), "b.weight", 0, 3000), weights(straight.params(), "b.weight", 0, 3000));
  EXPECT_EQ(std::memcmp(resumed.params().values().data(), straight.params().values().data(),
                        straight.params().values().bytes()),
            0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace avtrain
