// The pieces around the step: sample order, learning-rate schedule, gradient clipping, parameter
// initialisation, options and decks, and the trace files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../data/temp_dir.hpp"
#include "app/options.hpp"
#include "backend/backend.hpp"
#include "backend/update_gate.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "data/sampler.hpp"
#include "io/trace_writer.hpp"
#include "model/param_store.hpp"
#include "model/activation_stats.hpp"
#include "optim/adamw.hpp"
#include "optim/distributed_optimizer.hpp"
#include "train/layer_statistics.hpp"
#include "optim/lr_schedule.hpp"
#include "train/rank_report.hpp"

namespace avtrain {
namespace {

using data::Sampler;
using test::TempDir;

// ---------------------------------------------------------------- Sampler

std::vector<std::int64_t> epoch_order(Sampler& s, int epoch) {
  std::vector<std::int64_t> order;
  for (std::int64_t step = epoch * s.steps_per_epoch(); step < (epoch + 1) * s.steps_per_epoch(); ++step) {
    const auto b = s.batch(step);
    order.insert(order.end(), b.begin(), b.end());
  }
  return order;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Sampler, SplitSizesFollowValFractionAndBatchesPerEpochDropTheRemainder) {
  Sampler s(103, 0.2, 5, 8);  // 20.6 -> 21 held out, 82 train, 10 batches of 8
  EXPECT_EQ(s.validation().size(), 21u);
  EXPECT_EQ(s.train_size(), 82);
  EXPECT_EQ(s.steps_per_epoch(), 10);
  EXPECT_EQ(s.batch(0).size(), 8u);
}

TEST(Sampler, TrainAndValidationAreDisjointAndCoverEverySample) {
  Sampler s(100, 0.2, 5, 8);  // 80 train in exactly 10 batches
  const auto train = sorted(epoch_order(s, 0));
  const auto& val = s.validation();
  std::vector<std::int64_t> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::vector<std::int64_t> want(100);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted(all), want);  // no index twice, none missing
}

TEST(Sampler, SameSeedGivesSameSplitAndBatches) {
  Sampler a(103, 0.2, 5, 8), b(103, 0.2, 5, 8);
  EXPECT_EQ(a.validation(), b.validation());
  for (std::int64_t step : {0, 3, 10, 27}) EXPECT_EQ(a.batch(step), b.batch(step)) << "step " << step;
}

TEST(Sampler, DifferentSeedGivesDifferentSplitAndBatches) {
  Sampler a(103, 0.2, 5, 8), b(103, 0.2, 6, 8);
  EXPECT_NE(a.validation(), b.validation());
  EXPECT_NE(a.batch(0), b.batch(0));
}

TEST(Sampler, EachEpochIsANewPermutationOfTheWholeTrainingSplit) {
  Sampler s(100, 0.2, 5, 8);  // 80 train, no remainder; epoch 0 covers the split exactly (test above)
  const auto e0 = epoch_order(s, 0);
  for (int epoch : {1, 2}) {
    const auto e = epoch_order(s, epoch);
    EXPECT_EQ(sorted(e), sorted(e0)) << "epoch " << epoch;
    EXPECT_NE(e, e0) << "epoch " << epoch;
  }
}

TEST(Sampler, EpochWithARemainderUsesDistinctTrainingSamplesOnly) {
  Sampler s(103, 0.2, 5, 8);  // 82 train: 80 used per epoch
  for (int epoch : {0, 1}) {
    const auto e = epoch_order(s, epoch);
    EXPECT_EQ(std::set<std::int64_t>(e.begin(), e.end()).size(), 80u) << "a sample repeats in epoch " << epoch;
    for (std::int64_t i : e)
      EXPECT_FALSE(std::binary_search(s.validation().begin(), s.validation().end(), i)) << i << " is held out";
  }
}

TEST(Sampler, BatchOfAStepDoesNotDependOnTheStepsAskedBefore) {
  Sampler fresh(103, 0.2, 5, 8), used(103, 0.2, 5, 8);
  used.batch(25);  // epoch 2 first
  EXPECT_EQ(used.batch(3), fresh.batch(3));
}

TEST(Sampler, EpochOfCountsWholeEpochsOfSteps) {
  Sampler s(103, 0.2, 5, 8);
  EXPECT_EQ(s.epoch_of(0), 0);
  EXPECT_EQ(s.epoch_of(9), 0);
  EXPECT_EQ(s.epoch_of(10), 1);
  EXPECT_EQ(s.epoch_of(35), 3);
}

TEST(Sampler, TrainingSplitSmallerThanOneGlobalBatchIsAnError) {
  try {
    Sampler(10, 0.5, 1, 6);
    FAIL() << "no error for 5 training samples and a batch of 6";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 samples"), std::string::npos) << e.what();
  }
}

TEST(Sampler, ValFractionOfOneOrMoreOrNegativeIsAnError) {
  EXPECT_THROW(Sampler(100, 1.0, 1, 4), Error);
  EXPECT_THROW(Sampler(100, 1.5, 1, 4), Error);
  EXPECT_THROW(Sampler(100, -0.1, 1, 4), Error);
}

// ---------------------------------------------------------------- learning-rate schedule

OptimConfig schedule(int warmup) {
  OptimConfig c;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_steps = warmup;
  return c;
}

TEST(LearningRate, WarmUpRisesLinearlyToThePeakAtItsLastStep) {
  const OptimConfig c = schedule(10);
  for (int s = 0; s < 10; ++s) EXPECT_FLOAT_EQ(learning_rate(c, s, 100), c.lr * (s + 1) / 10.0) << "step " << s;
  EXPECT_EQ(learning_rate(c, 9, 100), float(c.lr));
}

TEST(LearningRate, CosineStartsAtThePeakAndTheLastStepUsesMinLr) {
  const OptimConfig c = schedule(10);
  EXPECT_FLOAT_EQ(learning_rate(c, 10, 101), c.lr);
  EXPECT_FLOAT_EQ(learning_rate(c, 55, 101), 0.5f * (c.lr + c.min_lr));  // half-way down the cosine
  EXPECT_FLOAT_EQ(learning_rate(c, 100, 101), c.min_lr);                 // the last of 101 steps
  EXPECT_FLOAT_EQ(learning_rate(c, 150, 101), c.min_lr);                 // held past the end
}

TEST(LearningRate, DecaysMonotonicallyAfterWarmUp) {
  const OptimConfig c = schedule(10);
  for (int s = 10; s < 100; ++s) EXPECT_LE(learning_rate(c, s + 1, 100), learning_rate(c, s, 100)) << "step " << s;
  EXPECT_LT(learning_rate(c, 99, 100), learning_rate(c, 10, 100));
}

TEST(LearningRate, WithoutWarmUpTheFirstStepUsesThePeak) {
  const OptimConfig c = schedule(0);
  EXPECT_FLOAT_EQ(learning_rate(c, 0, 100), c.lr);
}

// ---------------------------------------------------------------- gradient clipping

struct TwoParams {
  ParamStore store;
  ParamId a, b;
  TwoParams() {
    a = store.add("a", "weight", {3, 4}, Init::zeros, 0.0f, true);
    b = store.add("b", "bias", {5}, Init::zeros, 0.0f, false);
    store.allocate(1);
    for (int i = 0; i < 12; ++i) store.grad(a)[i] = float(i % 5) - 2.0f + 0.25f;
    for (int i = 0; i < 5; ++i) store.grad(b)[i] = 0.5f * float(i) + 0.1f;
  }
  double norm() {
    double s = 0;
    for (ParamId id : {a, b})
      for (std::size_t i = 0; i < store.info(id).size; ++i) s += double(store.grad(id)[i]) * store.grad(id)[i];
    return std::sqrt(s);
  }
  std::vector<float> grads() {
    std::vector<float> g(store.grad(a), store.grad(a) + 12);
    g.insert(g.end(), store.grad(b), store.grad(b) + 5);
    return g;
  }
};

TEST(ClipGradients, TheFactorBringsAGlobalNormAboveMaxNormDownToMaxNorm) {
  TwoParams p;
  const double norm = p.norm();
  ASSERT_GT(norm, 2.0);
  EXPECT_NEAR(grad_factor(norm, 1.0, 1.0f), 1.0 / norm, 1e-6);
  EXPECT_EQ(grad_factor(norm, 1.0, float(norm) * 2.0f), 1.0f);  // below max_norm: untouched
  EXPECT_EQ(grad_factor(norm, 1.0, 0.0f), 1.0f);                 // 0 turns clipping off
}

// Scaled gradients are divided by the scale by the same factor; clipping looks at the unscaled norm.
TEST(ClipGradients, TheFactorUnscalesAndClipsAtOnce) {
  TwoParams p;
  const double norm = p.norm();
  EXPECT_NEAR(grad_factor(norm / 4.0, 4.0, float(norm / 8.0)), 0.5 / 4.0, 1e-6);
  EXPECT_EQ(grad_factor(norm / 256.0, 256.0, 0.0f), 1.0f / 256.0f);  // no clip: unscale only
}

// AdamW::step(lr, factor): the gradients times the factor, the update and the working copies, in one
// call with the bits of scale(), then step(lr) and refresh() one after the other.
TEST(ClipGradients, AdamWStepWithAFactorIsScaleThenStepThenRefreshBitForBit) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  OptimConfig config;
  for (const DType working : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(working));
    ParamStore a_store, b_store;
    for (ParamStore* s : {&a_store, &b_store}) {
      const ParamId w = s->add("m", "weight", {7, 9}, Init::normal, 0.5f, true);
      s->add("m", "bias", {9}, Init::normal, 0.5f, false);
      s->set_working_dtype(w, working);
      s->allocate(3);
      s->refresh_working(*be);
      for (ParamId id : {0, 1})
        for (std::size_t i = 0; i < s->info(id).size; ++i) s->grad(id)[i] = std::sin(float(i + 100 * id)) * 3.0f;
    }
    AdamW one(*be, a_store, config), apart(*be, b_store, config);
    for (int step = 0; step < 3; ++step) {
      const float factor = step == 1 ? 1.0f : 0.37f;
      one.step(1e-2f, factor);
      if (factor != 1.0f) be->scale(b_store.grads().data(), b_store.total_size(), factor);
      apart.step(1e-2f);
      EXPECT_EQ(std::memcmp(a_store.values().data(), b_store.values().data(), a_store.values().bytes()), 0) << step;
      for (ParamId id : {0, 1})  // the parameters' gradients, scaled alike (padding between them aside)
        EXPECT_EQ(std::memcmp(a_store.grad(id), b_store.grad(id), a_store.info(id).size * sizeof(float)), 0) << step;
      // The working copies are the new masters, packed.
      std::vector<std::uint16_t> packed(a_store.info(0).size);
      if (working != DType::f32) {
        be->pack(a_store.value(0), {packed.data(), working}, packed.size());
        EXPECT_EQ(std::memcmp(a_store.working().data(), packed.data(), packed.size() * 2), 0) << step;
      }
    }
  }
}

// One rank's update decided where it runs (LayerStatistics::update_rule, Backend::update_gate,
// DistributedOptimizer::step_as_decided_on_device) against the host's decision (the rows' norm,
// grad_factor, found_inf): the same masters, working copies and moments to the bit, over steps that
// clip, steps that do not, a loss scale that is not a power of two, and skipped steps (a non-finite
// gradient, a non-finite loss) that change nothing and are not counted.
TEST(ClipGradients, AnUpdateDecidedOnTheDeviceIsTheHostsUpdateBitForBit) {
  const std::unique_ptr<Backend> be = make_cpu_backend();
  DistributedOptimizerConfig config;
  config.optim.clip_norm = 1.0f;
  const auto make = [&] {
    auto opt = std::make_unique<DistributedOptimizer>(*be, config);
    ParamStore& s = opt->params();
    const ParamId w = s.add("enc", "weight", {7, 9}, Init::normal, 0.5f, true);
    s.add("enc", "bias", {9}, Init::normal, 0.5f, false);
    s.add("head", "weight", {9, 3}, Init::normal, 0.5f, true);
    s.set_working_dtype(w, DType::bf16);
    opt->build(1, 0, nullptr);
    return opt;
  };
  const std::unique_ptr<DistributedOptimizer> device = make(), host = make();
  LayerStatistics device_stats(device->params()), host_stats(host->params());
  const ActivationStats acts;
  struct Case {
    double loss_scale, grad_size;
    float poison;  // put into one gradient (0: none)
    bool loss_finite;
    bool skipped;
  };
  const Case cases[] = {{1.0, 3.0, 0, true, false},          {1024.0, 3.0 * 1024, 0, true, false},
                        {3.0, 0.01 * 3, 0, true, false},     {1000.0, 0.3 * 1000, 0, true, false},
                        {1024.0, 3.0 * 1024, NAN, true, true}, {64.0, 1.0, INFINITY, true, true},
                        {64.0, 1.0, 0, false, true},         {1.0, 2.0, 0, true, false}};
  int taken = 0;
  for (std::size_t k = 0; k < std::size(cases); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE("case " + std::to_string(k));
    for (DistributedOptimizer* opt : {device.get(), host.get()}) {
      ParamStore& s = opt->params();
      for (ParamId id = 0; id < ParamId(s.params().size()); ++id)
        for (std::size_t i = 0; i < s.info(id).size; ++i)
          s.grad(id)[i] = float(c.grad_size * std::sin(double(i + 17 * id + 5 * k)) / 8.0);
      if (c.poison != 0) s.grad(2)[4] = c.poison;
    }
    const float lr = 1e-2f / float(k + 1);
    // On the device: the gate from the statistics, the update, then the rows read back.
    device_stats.start(*device, DType::bf16);
    device->step_as_decided_on_device(lr, device_stats.update_rule(c.loss_scale, config.optim.clip_norm, c.loss_finite));
    double device_sum = 0, host_sum = 0;
    const std::vector<LayerRow> device_rows = device_stats.rows(*device, acts, c.loss_scale, device_sum);
    // On the host: the rows, then the update given its factor, or none.
    host_stats.start(*host, DType::bf16);
    const std::vector<LayerRow> host_rows = host_stats.rows(*host, acts, c.loss_scale, host_sum);
    std::size_t nonfinite = 0;
    for (const LayerRow& r : host_rows) nonfinite += r.nonfinite;
    const bool found_inf = nonfinite > 0 || !c.loss_finite || !std::isfinite(host_sum);
    ASSERT_EQ(found_inf, c.skipped);
    if (!found_inf) {
      host->step(lr, grad_factor(std::sqrt(host_sum), c.loss_scale, config.optim.clip_norm));
      device->took_step();
      ++taken;
    }
    EXPECT_EQ(std::memcmp(&device_sum, &host_sum, sizeof host_sum), 0) << "the same rows";
    if (k == 0) {
      EXPECT_GT(std::sqrt(host_sum), 1.0) << "a step that clips";
    }
    if (k == 2) {
      EXPECT_LT(std::sqrt(host_sum), 1.0) << "a step that does not";
    }
    ParamStore &d = device->params(), &h = host->params();
    EXPECT_EQ(std::memcmp(d.values().data(), h.values().data(), h.values().bytes()), 0);
    EXPECT_EQ(std::memcmp(d.working().data(), h.working().data(), h.working().bytes()), 0);
    AdamW &da = device->adamw(), &ha = host->adamw();
    EXPECT_EQ(std::memcmp(da.first_moments().data(), ha.first_moments().data(), ha.first_moments().bytes()), 0);
    EXPECT_EQ(std::memcmp(da.second_moments().data(), ha.second_moments().data(), ha.second_moments().bytes()), 0);
    EXPECT_EQ(da.updates(), taken);
    EXPECT_EQ(ha.updates(), taken);
  }
  EXPECT_EQ(taken, 5);
}

// ---------------------------------------------------------------- ParamStore

// The fp32 values of every parameter that has them: with packed values (masters split, or none) a
// parameter with a 16-bit working copy has none, and value() would point past values() (ASan).
std::map<std::string, std::vector<float>> values_by_name(ParamStore& s) {
  std::map<std::string, std::vector<float>> out;
  for (ParamId id = 0; id < ParamId(s.params().size()); ++id) {
    if (s.values_packed() && s.info(id).working != DType::f32) continue;
    out[s.info(id).name] = std::vector<float>(s.value(id), s.value(id) + s.info(id).size);
  }
  return out;
}

TEST(ParamStore, ValuesDependOnSeedAndNameNotOnRegistrationOrderOrOtherParameters) {
  ParamStore first, second;
  first.add("enc", "weight", {3, 5}, Init::normal, 0.5f, true);
  first.add("enc", "bias", {7}, Init::zeros, 0.0f, false);
  first.add("dec", "weight", {4, 4}, Init::normal, 0.5f, true);
  second.add("extra", "weight", {9}, Init::normal, 0.5f, true);
  second.add("dec", "weight", {4, 4}, Init::normal, 0.5f, true);
  second.add("enc", "bias", {7}, Init::zeros, 0.0f, false);
  second.add("enc", "weight", {3, 5}, Init::normal, 0.5f, true);
  first.allocate(42);
  second.allocate(42);
  auto a = values_by_name(first), b = values_by_name(second);
  for (const char* name : {"enc.weight", "enc.bias", "dec.weight"}) EXPECT_EQ(a[name], b[name]) << name;
  EXPECT_NE(first.info(0).offset, second.info(3).offset);  // enc.weight really moved
}

TEST(ParamStore, DifferentNamesOrSeedsGiveDifferentValues) {
  ParamStore s, reseeded;
  for (ParamStore* p : {&s, &reseeded}) {
    p->add("x", "weight", {16}, Init::normal, 1.0f, true);
    p->add("y", "weight", {16}, Init::normal, 1.0f, true);
  }
  s.allocate(1);
  reseeded.allocate(2);
  auto a = values_by_name(s), b = values_by_name(reseeded);
  EXPECT_NE(a["x.weight"], a["y.weight"]);
  EXPECT_NE(a["x.weight"], b["x.weight"]);
}

TEST(ParamStore, NormalInitHasTheRequestedStd) {
  ParamStore s;
  const ParamId id = s.add("w", "weight", {100, 100}, Init::normal, 0.02f, true);
  s.allocate(7);
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < 10000; ++i) sum += s.value(id)[i], sum_sq += double(s.value(id)[i]) * s.value(id)[i];
  const double mean = sum / 10000, std = std::sqrt(sum_sq / 10000 - mean * mean);
  EXPECT_NEAR(std, 0.02, 0.002);
  EXPECT_NEAR(mean, 0.0, 0.001);  // 5 standard errors
}

TEST(ParamStore, InitUlpsMovesEveryDrawnValueThatManyUlpsUpAndNothingElse) {
  auto make = [](int ulps) {
    ParamStore p;
    p.add("w", "weight", {64}, Init::normal, 0.02f, true);
    p.add("n", "weight", {4}, Init::ones, 0.0f, false);
    p.add("n", "bias", {4}, Init::zeros, 0.0f, false);
    p.allocate(5, ulps);
    return p;
  };
  ParamStore plain = make(0);
  for (int ulps : {1, 3, 65536}) {  // 65536: the bf16-sized twin avtrain-reconcile's band uses
    ParamStore nudged = make(ulps);
    auto a = values_by_name(plain), b = values_by_name(nudged);
    for (std::size_t i = 0; i < a["w.weight"].size(); ++i) {
      float expect = a["w.weight"][i];
      for (int k = 0; k < ulps; ++k) expect = std::nextafter(expect, INFINITY);
      EXPECT_EQ(b["w.weight"][i], expect) << ulps << " ulps, value " << i;
    }
    EXPECT_EQ(a["n.weight"], b["n.weight"]);  // only randomly drawn values move
    EXPECT_EQ(a["n.bias"], b["n.bias"]);
  }
}

// ZeRO in bf16: a store keeping the masters of one part holds, of the same initial values, the
// masters of that part, every bf16 working copy and the fp32 values of the parameters without one;
// the bounds of the parts map into values() and the working copies; refresh() of the part writes
// its working copies and values from its masters.
TEST(ParamStore, SplitMastersKeepThePartWholeWorkingCopiesAndTheOtherValues) {
  auto make = [](std::optional<FlatPart> part) {
    auto s = std::make_unique<ParamStore>();
    const ParamId w1 = s->add("a", "weight", {40}, Init::normal, 0.5f, true);
    s->add("a", "bias", {5}, Init::normal, 0.5f, false);
    const ParamId w2 = s->add("b", "weight", {24}, Init::normal, 0.5f, true);
    s->add("b", "bias", {3}, Init::ones, 0.0f, false);
    s->set_working_dtype(w1, DType::bf16);
    s->set_working_dtype(w2, DType::bf16);
    if (part) s->keep_masters_of(*part);
    s->allocate(9);
    return s;
  };
  const std::unique_ptr<Backend> be = make_cpu_backend();
  auto whole = make(std::nullopt);
  whole->refresh_working(*be);
  ASSERT_EQ(whole->total_size(), 48u + 16 + 32 + 16);  // a.weight 0, a.bias 48, b.weight 64, b.bias 96
  const FlatPart part{50, 70};                         // inside a.bias, into b.weight
  auto split = make(part);
  split->refresh_working(*be);
  ASSERT_TRUE(split->masters_split());
  EXPECT_EQ(split->masters().size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(split->masters()[i], whole->values()[50 + i]) << i;
  EXPECT_EQ(split->values().size(), 32u);  // the two biases, 16-aligned
  for (const char* name : {"a.bias", "b.bias"}) EXPECT_EQ(values_by_name(*split)[name], values_by_name(*whole)[name]);
  ASSERT_EQ(split->working().size(), whole->working().size());
  for (std::size_t i = 0; i < whole->working().size(); ++i) EXPECT_EQ(split->working()[i], whole->working()[i]) << i;
  // Bounds: 50 is in a.bias (value 2; working: the next 16-bit parameter starts at 64), 70 in b.weight.
  const std::vector<std::size_t> flat = {0, 50, 70, 112};
  EXPECT_EQ(split->value_bounds(flat), (std::vector<std::size_t>{0, 2, 16, 32}));
  EXPECT_EQ(split->working_bounds(flat), (std::vector<std::size_t>{0, 64, 70, 96}));
  // An update of the part's masters reaches its working copies (b.weight 64..69) and trainable values.
  for (std::size_t i = 0; i < 20; ++i) split->masters()[i] = 1.0f + float(i);
  split->refresh(*be, part);
  for (std::size_t i = 64; i < 70; ++i) EXPECT_EQ(split->working()[64 + (i - 64)], float_to_bf16(1.0f + float(i - 50))) << i;
  EXPECT_EQ(split->working()[70], whole->working()[70]);  // outside the part: untouched
  std::vector<float> bias = values_by_name(*whole)["a.bias"];
  bias[2] = 1.0f, bias[3] = 2.0f, bias[4] = 3.0f;  // flat 50..52
  EXPECT_EQ(values_by_name(*split)["a.bias"], bias);
}

TEST(ParamStore, OnesAndZerosInitsAreExact) {
  ParamStore s;
  const ParamId ones = s.add("n", "weight", {5}, Init::ones, 0.0f, false);
  const ParamId zeros = s.add("n", "bias", {5}, Init::zeros, 0.0f, false);
  s.allocate(3);
  EXPECT_EQ(std::vector<float>(s.value(ones), s.value(ones) + 5), std::vector<float>(5, 1.0f));
  EXPECT_EQ(std::vector<float>(s.value(zeros), s.value(zeros) + 5), std::vector<float>(5, 0.0f));
}

TEST(ParamStore, OffsetsAre16FloatAlignedAndDoNotOverlap) {
  ParamStore s;
  const std::pair<const char*, int> sizes[] = {{"a", 15}, {"b", 1}, {"c", 17}, {"d", 16}, {"e", 33}};
  for (const auto& [module, size] : sizes) s.add(module, "weight", {size}, Init::normal, 1.0f, true);
  s.allocate(1);
  const auto& ps = s.params();
  std::size_t end = 0;
  for (ParamId id = 0; id < ParamId(ps.size()); ++id) {
    EXPECT_EQ(ps[id].offset % 16, 0u) << ps[id].name;
    EXPECT_GE(ps[id].offset, end) << ps[id].name << " overlaps the one before";
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s.value(id)) % 64, 0u) << ps[id].name;
    end = ps[id].offset + ps[id].size;
  }
  EXPECT_GE(s.total_size(), end);
  EXPECT_EQ(s.total_size() % 16, 0u);
}

// ---------------------------------------------------------------- options and decks

std::string write_deck(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "run.ini";
  std::ofstream(path) << text;
  return path;
}

const char* const kDeck =
    "[data]\ndir = /deck/data\nval_fraction = 0.25\n"
    "[model]\nwidth = 64\nheads = 2\n"
    "[optim]\nlr = 0.01\n"
    "[train]\nsteps = 7\nseed = 9\n";

TEST(ParseOptions, DeckSectionsSetTheirFields) {
  TempDir dir;
  const auto parsed = parse_options({write_deck(dir, kDeck)});
  const RunConfig& c = parsed.config;
  EXPECT_EQ(c.data.dir, "/deck/data");
  EXPECT_EQ(c.data.val_fraction, 0.25);
  EXPECT_EQ(c.model.width, 64);
  EXPECT_EQ(c.model.heads, 2);
  EXPECT_EQ(c.optim.lr, 0.01);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.seed, 9u);
  EXPECT_EQ(c.model.depth, ModelConfig{}.depth);  // untouched keys keep their defaults
}

// Boost.Program_options 1.74 loops forever reporting a word that holds one of its template tokens: such
// words are refused first, on the command line and in a deck, in one line naming where.
TEST(ParseOptions, BoostTemplateTokensAreRefusedBeforeBoostLoopsOnThem) {
  const auto refusal = [](const std::vector<std::string>& args) {
    try {
      parse_options(args);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal({"--model.width", "%value%"}),
            "command line word 2: holds \"%value%\", which the option parser (Boost.Program_options) cannot report; "
            "refused");
  EXPECT_NE(refusal({"--%original_token%"}).find("command line word 1: holds \"%original_token%\""), std::string::npos);
  TempDir dir;
  const std::string deck = write_deck(dir, "[model]\nwidth = 64\nheads = x%option%y\n");
  EXPECT_EQ(refusal({deck}), "input deck " + deck + " line 3: holds \"%option%\", which the option parser "
                             "(Boost.Program_options) cannot report; refused");
  EXPECT_EQ(parse_options({"--model.width", "96", "--data", "/d/50%"}).config.data.dir, "/d/50%");  // a % alone is fine
}

TEST(ParseOptions, CommandLineWinsOverTheDeck) {
  TempDir dir;
  const auto parsed = parse_options({write_deck(dir, kDeck), "--train.steps", "11", "--model.width", "96"});
  EXPECT_EQ(parsed.config.train.steps, 11);
  EXPECT_EQ(parsed.config.model.width, 96);
  EXPECT_EQ(parsed.config.train.seed, 9u);
}

TEST(ParseOptions, ShortFormsSetTheirKeysAndWinOverTheDeck) {
  TempDir dir;
  const auto parsed = parse_options({"--config", write_deck(dir, kDeck), "--data", "/cli/data", "--out", "/cli/out",
                                     "--steps", "12", "--seed", "77", "--threads", "3"});
  const RunConfig& c = parsed.config;
  EXPECT_EQ(c.data.dir, "/cli/data");
  EXPECT_EQ(c.train.out, "/cli/out");
  EXPECT_EQ(c.train.steps, 12);
  EXPECT_EQ(c.train.seed, 77u);
  EXPECT_EQ(c.train.threads, 3);
}

TEST(ParseOptions, ShortFormAndItsDottedKeyTogetherAreAnError) {
  EXPECT_THROW(parse_options({"--steps", "3", "--train.steps", "4"}), Error);
}

std::string error_of(const std::vector<std::string>& args) {
  try {
    parse_options(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ParseOptions, UnknownDeckKeyIsAnErrorNamingTheKeyAndTheDeck) {
  TempDir dir;
  const std::string deck = write_deck(dir, "[train]\nsteps = 3\nstpes = 4\n");
  const std::string message = error_of({deck});
  EXPECT_NE(message.find("stpes"), std::string::npos) << message;
  EXPECT_NE(message.find(deck), std::string::npos) << message;
}

TEST(ParseOptions, UnknownCommandLineOptionIsAnErrorNamingIt) {
  const std::string message = error_of({"--train.stpes", "4"});
  EXPECT_NE(message.find("train.stpes"), std::string::npos) << message;
}

TEST(ParseOptions, DeviceAttentionIsAutoByDefaultAndTakesItsWords) {
  EXPECT_EQ(parse_options({}).config.device.attention, AttentionEngine::automatic);
  EXPECT_EQ(parse_options({}).resolved["device.attention"], "auto");
  for (const auto& [word, engine] : {std::pair{"cudnn", AttentionEngine::cudnn}, std::pair{"own", AttentionEngine::own}}) {
    const auto parsed = parse_options({"--device.attention", word});
    EXPECT_EQ(parsed.config.device.attention, engine) << word;
    EXPECT_EQ(parsed.resolved["device.attention"], word);
  }
}

TEST(ParseOptions, FixedChoicesAreTypedAndReadBackAsTheirWords) {
  TempDir dir;
  const auto parsed = parse_options({write_deck(dir, "[parallel]\nschedule = gpipe\ngrad_comm_dtype = bf16\n"
                                                     "[precision]\nmode = bf16\n"),
                                     "--precision", "fp16", "--train.recompute", "blocks", "--comm", "mpi",
                                     "--precision.loss_scale", "2.5e2"});
  const RunConfig& c = parsed.config;
  EXPECT_EQ(c.precision.mode, PrecisionMode::fp16);  // the short form over the deck
  EXPECT_EQ(c.train.recompute, Recompute::blocks);
  EXPECT_EQ(c.parallel.schedule, parallel::Schedule::gpipe);
  EXPECT_EQ(c.parallel.grad_comm_dtype, DType::bf16);
  EXPECT_EQ(c.device.backend, DeviceBackend::cpu);
  EXPECT_EQ(c.device.comm, DeviceComm::mpi);
  EXPECT_EQ(c.precision.loss_scale.kind, LossScale::Kind::fixed);
  EXPECT_EQ(c.precision.loss_scale.fixed, 250.0);
  EXPECT_EQ(parsed.resolved["precision.mode"], "fp16");
  EXPECT_EQ(parsed.resolved["train.recompute"], "blocks");
  EXPECT_EQ(parsed.resolved["parallel.schedule"], "gpipe");
  EXPECT_EQ(parsed.resolved["parallel.grad_comm_dtype"], "bf16");
  EXPECT_EQ(parsed.resolved["device.backend"], "cpu");
  EXPECT_EQ(parsed.resolved["device.comm"], "mpi");
  EXPECT_EQ(parsed.resolved["precision.loss_scale"], "2.5e2");  // as written
  EXPECT_EQ(parse_options({}).resolved["precision.loss_scale"], "auto");
}

TEST(ParseOptions, AWordOutsideAFixedChoiceIsAnErrorListingTheWords) {
  EXPECT_EQ(error_of({"--train.recompute", "all"}), "option train.recompute = all: must be one of none, attention, blocks");
  EXPECT_EQ(error_of({"--device", "gpu"}), "option device.backend = gpu: must be one of cpu, cuda");
  EXPECT_EQ(error_of({"--precision.loss_scale", "lots"}),
            "precision.loss_scale: 'lots' is not auto, dynamic, none or a positive number");
}

// The FP8 recipe's options: defaults (Transformer Engine's DelayedScaling: history 1024, max, margin 0;
// every linear), a deck's values typed and read back, bad values named in one line.
TEST(ParseOptions, Fp8OptionsDefaultsDeckAndBadValues) {
  const ParsedOptions defaults = parse_options({});
  EXPECT_EQ(defaults.config.precision.fp8_history, 1024);
  EXPECT_EQ(defaults.config.precision.fp8_amax, Fp8Amax::max);
  EXPECT_EQ(defaults.config.precision.fp8_margin, 0);
  EXPECT_EQ(defaults.config.precision.fp8_layers, "*");
  EXPECT_EQ(defaults.resolved["precision.fp8_amax"], "max");
  TempDir dir;
  const ParsedOptions deck = parse_options({write_deck(
      dir, "[precision]\nmode = bf16\nfp8_history = 16\nfp8_amax = most_recent\nfp8_margin = 2\n"
           "fp8_layers = blocks.*, head.cls\n")});
  const PrecisionConfig& p = deck.config.precision;
  EXPECT_EQ(p.fp8_history, 16);
  EXPECT_EQ(p.fp8_amax, Fp8Amax::most_recent);
  EXPECT_EQ(p.fp8_margin, 2);
  EXPECT_EQ(p.fp8_layers, "blocks.*, head.cls");
  EXPECT_EQ(deck.resolved["precision.fp8_history"], 16);
  EXPECT_EQ(deck.resolved["precision.fp8_amax"], "most_recent");
  EXPECT_EQ(deck.resolved["precision.fp8_margin"], 2);
  EXPECT_EQ(deck.resolved["precision.fp8_layers"], "blocks.*, head.cls");
  EXPECT_EQ(parse_options({"--precision.fp8_margin", "18"}).config.precision.fp8_margin, 18);  // the edge
  EXPECT_EQ(error_of({"--precision.fp8_history", "0"}), "option precision.fp8_history = 0: must be >= 1");
  EXPECT_EQ(error_of({"--precision.fp8_margin", "-1"}), "option precision.fp8_margin = -1: must be in [0, 18]");
  EXPECT_EQ(error_of({"--precision.fp8_margin", "19"}), "option precision.fp8_margin = 19: must be in [0, 18]");
  EXPECT_EQ(error_of({"--precision.fp8_amax", "mean"}),
            "option precision.fp8_amax = mean: must be one of max, most_recent");
}

// precision.mode fp8 is a word of the option: taken on the CPU (emulated) and on CUDA (cuBLASLt's FP8
// products; a GPU older than sm_89 is refused in one line when the backend starts, not here).
TEST(ParseOptions, ModeFp8IsTakenOnTheCpuAndOnCuda) {
  EXPECT_EQ(parse_options({"--precision", "fp8"}).config.precision.mode, PrecisionMode::fp8);
  const RunConfig cuda = parse_options({"--precision", "fp8", "--device", "cuda"}).config;
  EXPECT_EQ(cuda.precision.mode, PrecisionMode::fp8);
  EXPECT_EQ(cuda.device.backend, DeviceBackend::cuda);
  TempDir dir;
  EXPECT_EQ(parse_options({write_deck(dir, "[precision]\nmode = fp8\n[device]\nbackend = cuda\n")}).config.precision.mode,
            PrecisionMode::fp8);
  EXPECT_EQ(error_of({"--precision", "fp4"}), "option precision.mode = fp4: must be one of fp32, fp16, bf16, fp8");
}

TEST(ParseOptions, EveryShortFormIsInTheHelpAndRefusedBesideItsKey) {
  std::string help;
  std::istringstream words(*parse_options({"--help"}).help);
  for (std::string word; words >> word;) help += word + " ";  // boost wraps the descriptions
  const std::vector<std::pair<std::string, std::string>> forms = {
      {"data", "data.dir"},         {"out", "train.out"},          {"steps", "train.steps"},
      {"seed", "train.seed"},       {"threads", "train.threads"},  {"precision", "precision.mode"},
      {"pp", "parallel.pp"},        {"dp", "parallel.dp"},         {"timeline", "parallel.timeline"},
      {"cp", "parallel.cp"},
      {"device", "device.backend"}, {"comm", "device.comm"},       {"max-minutes", "train.max_minutes"}};
  for (const auto& [name, key] : forms) {
    EXPECT_NE(help.find("--" + name + " arg = --" + key + " "), std::string::npos) << name;
    EXPECT_NE(help.find("short form --" + name + " "), std::string::npos) << name;
  }
  EXPECT_NE(help.find("--allow-tf32 = --device.allow_tf32 1 "), std::string::npos);
  EXPECT_NE(help.find("--detect-anomaly = --precision.detect_anomaly 1 "), std::string::npos);
  EXPECT_NE(help.find("one of none, attention, blocks"), std::string::npos);
  EXPECT_TRUE(parse_options({"--allow-tf32"}).config.device.allow_tf32);
  EXPECT_NE(error_of({"--precision", "bf16", "--precision.mode", "fp16"}).find("both given"), std::string::npos);
  EXPECT_NE(error_of({"--detect-anomaly", "--precision.detect_anomaly", "0"}).find("both given"), std::string::npos);
}

// parallel.cp: heads the parts cannot share whole, and FP8 (each part's amaxes would scale its own
// tokens), each refused in one line naming the option; heads that it divides pass.
TEST(ParseOptions, ContextParallelNeedsHeadsItDividesAndNoFp8) {
  EXPECT_EQ(parse_options({"--cp", "2", "--model.heads", "4"}).config.parallel.cp, 2);
  EXPECT_EQ(parse_options({}).config.parallel.cp, 1);
  EXPECT_EQ(error_of({"--cp", "3", "--model.heads", "4"}),
            "option parallel.cp = 3: model.heads 4 is not divisible by parallel.cp 3 (the all-to-all gives each part "
            "heads / cp whole heads)");
  EXPECT_EQ(error_of({"--cp", "8", "--model.heads", "4"}).rfind("option parallel.cp = 8: model.heads 4 is not", 0), 0u);
  EXPECT_EQ(error_of({"--cp", "2", "--precision", "fp8"}),
            "option parallel.cp = 2: not with precision.mode fp8 yet: per-tensor FP8 scales would differ between the "
            "parts");
  EXPECT_EQ(error_of({"--cp", "0"}).rfind("option parallel.cp = 0", 0), 0u);
}

TEST(ParseOptions, ValuesOutsideTheirRangeAreErrorsNamingTheOption) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--data.val_fraction", "1"}, {"--model.mlp_ratio", "0"}, {"--model.depth", "-1"},
      {"--model.audio_window", "1"}, {"--model.nce_temperature", "0"}, {"--optim.beta1", "1"},
      {"--optim.eps", "0"}, {"--optim.lr", "-1e-3"}, {"--train.micro_batch", "0"}, {"--train.threads", "0"}};
  for (const auto& [option, value] : bad) {
    const std::string message = error_of({option, value});
    EXPECT_NE(message.find("option " + option.substr(2) + " = "), std::string::npos) << option << ": " << message;
  }
  // The edges themselves are accepted.
  EXPECT_NO_THROW(parse_options({"--data.val_fraction", "0", "--model.depth", "0", "--optim.beta1", "0"}));
}

// data.reader_threads: given, it is kept (deck or command line); not given, it is derived (at least 1,
// at most the cores this process may use) and shows in run.json's options; 0 and negatives are refused.
TEST(ParseOptions, ReaderThreadsGivenOrDerived) {
  EXPECT_EQ(parse_options({"--data.reader_threads", "3"}).config.data.reader_threads, 3);
  TempDir dir;
  EXPECT_EQ(parse_options({write_deck(dir, "[data]\nreader_threads = 5\n")}).config.data.reader_threads, 5);
  const ParsedOptions derived = parse_options({"--train.threads", "1"});
  EXPECT_GE(derived.config.data.reader_threads, 1);
  EXPECT_LE(derived.config.data.reader_threads, std::max(1, int(std::thread::hardware_concurrency())));
  EXPECT_EQ(derived.resolved["data.reader_threads"], derived.config.data.reader_threads);
  // more compute threads than cores: still one reader
  EXPECT_EQ(parse_options({"--train.threads", "1024"}).config.data.reader_threads, 1);
  for (const char* bad : {"0", "-2"}) {
    const std::string message = error_of({"--data.reader_threads", bad});
    EXPECT_NE(message.find(std::string("option data.reader_threads = ") + bad + ": must be in [1, 1024]"), std::string::npos)
        << message;
  }
}

TEST(ParseOptions, BadValueIsAnError) {
  EXPECT_NE(error_of({"--train.steps", "many"}).find("train.steps"), std::string::npos);
  TempDir dir;
  const std::string message = error_of({write_deck(dir, "[model]\nwidth = wide\n")});
  EXPECT_NE(message.find("model.width"), std::string::npos) << message;
}

// run.json records the options as JSON, which is UTF-8 text: a value that is not (a Latin-1 path, a
// stray byte) is refused naming the option, before any work, not by the JSON writer once the run has
// started (the deck fuzz target's finding, tests/fuzz/corpus/deck/finding-*).
TEST(ParseOptions, AValueThatIsNotUtf8IsAnErrorNamingTheOption) {
  std::string message = error_of({"--data.dir", "/data/caf\xe9"});
  EXPECT_NE(message.find("option data.dir: its value is not UTF-8 text"), std::string::npos) << message;
  TempDir dir;
  message = error_of({write_deck(dir, "[train]\nout = runs/\xff\xfe\n")});
  EXPECT_NE(message.find("option train.out: its value is not UTF-8 text"), std::string::npos) << message;
  EXPECT_EQ(parse_options({"--data.dir", "/data/caf\xc3\xa9"}).resolved["data.dir"], "/data/caf\xc3\xa9");
}

TEST(ParseOptions, MissingDeckIsAnErrorNamingIt) {
  const std::string message = error_of({"/nonexistent/deck.ini"});
  EXPECT_NE(message.find("/nonexistent/deck.ini"), std::string::npos) << message;
}

TEST(ParseOptions, HelpReturnsTextWithEverySection) {
  const auto parsed = parse_options({"--help"});
  ASSERT_TRUE(parsed.help.has_value());
  for (const char* section : {"General", "[data] shard set", "[model] AVNet architecture",
                              "[optim] AdamW and schedule", "[train] step loop"})
    EXPECT_NE(parsed.help->find(section), std::string::npos) << section;
}

TEST(ParseOptions, ResolvedJsonHoldsEveryDottedKeyWithItsFinalValue) {
  // Every --section.key in --help is in the resolved JSON, and nothing else is.
  std::set<std::string> help_keys;
  std::istringstream help(*parse_options({"--help"}).help);
  for (std::string word; help >> word;)
    if (word.rfind("--", 0) == 0 && word.find('.') != std::string::npos) help_keys.insert(word.substr(2));
  ASSERT_GE(help_keys.size(), 20u);

  TempDir dir;
  const auto parsed = parse_options({write_deck(dir, kDeck), "--train.steps", "11", "--seed", "77"});
  std::set<std::string> resolved_keys;
  for (const auto& [key, value] : parsed.resolved.items()) resolved_keys.insert(key);
  EXPECT_EQ(resolved_keys, help_keys);
  EXPECT_EQ(parsed.resolved["train.steps"], 11);                // command line over deck
  EXPECT_EQ(parsed.resolved["train.seed"], 77);                 // short form over deck
  EXPECT_EQ(parsed.resolved["model.width"], 64);                // deck
  EXPECT_EQ(parsed.resolved["data.dir"], "/deck/data");         // deck
  EXPECT_EQ(parsed.resolved["model.depth"], ModelConfig{}.depth);  // default
}

// ---------------------------------------------------------------- trace files

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.push_back("");
  return fields;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The files' headers are the column tables' names, and docs/traces.md lists exactly those columns
// with their meanings: the list under each file's heading is trace_columns_markdown() of its table.
// AVTRAIN_UPDATE_DOCS=1 writes the lists into the docs instead (after a column is added).
TEST(TraceWriter, HeadersAndTheDocsComeFromTheColumnTables) {
  TempDir dir;
  TraceWriter writer(dir / "out/nested");  // parents are created
  EXPECT_EQ(read_lines(dir / "out/nested/trace.csv"), std::vector<std::string>{trace_header(kStepColumns)});
  EXPECT_EQ(read_lines(dir / "out/nested/layers.csv"), std::vector<std::string>{trace_header(kLayerColumns)});
  EXPECT_EQ(read_lines(dir / "out/nested/ranks.csv"), std::vector<std::string>{trace_header(kRankColumns)});
  EXPECT_EQ(trace_header(kStepColumns).rfind("step,epoch,loss,", 0), 0u);
  const std::string path = AVTRAIN_SOURCE_DIR "/docs/traces.md";
  std::ifstream docs(path);
  std::string text((std::istreambuf_iterator<char>(docs)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty()) << path;
  const bool update = std::getenv("AVTRAIN_UPDATE_DOCS") != nullptr;
  for (const auto& [heading, table] : {std::pair{"## trace.csv", trace_columns_markdown(kStepColumns)},
                                       std::pair{"## layers.csv", trace_columns_markdown(kLayerColumns)},
                                       std::pair{"## ranks.csv", trace_columns_markdown(kRankColumns)}}) {
    const std::size_t at = text.find(heading);
    ASSERT_NE(at, std::string::npos) << path << " has no section " << heading;
    const std::size_t begin = text.find("| column | meaning |", at);
    ASSERT_NE(begin, std::string::npos) << path << ": no column list under " << heading;
    std::size_t end = text.find("\n\n", begin);  // the list ends at a blank line or the file's last newline
    if (end == std::string::npos) end = text.find_last_not_of('\n') + 1;
    const std::string listed = text.substr(begin, end - begin) + "\n";
    if (update) text.replace(begin, end - begin, table.substr(0, table.size() - 1));
    else EXPECT_EQ(listed, table) << path << " under " << heading << " (AVTRAIN_UPDATE_DOCS=1 writes it)";
  }
  if (update) write_file_atomically(path, text);
}

TEST(TraceWriter, StepRowReadsBackBitExactAndIsOnDiskWhileTheWriterLives) {
  TempDir dir;
  TraceWriter writer(dir.str());
  StepRow with_val;
  with_val.set("step", 41);
  with_val.set("epoch", 2);
  with_val.set("loss", 1.0 / 3.0);
  with_val.set("grad_norm", 0.1);
  with_val.set("loss_scale", 65536.0);
  with_val.set("lr", 1.2345678e-4f);
  with_val.set("val_loss", M_PI);
  with_val.set("val_acc", 1e-300);
  StepRow without_val = with_val;
  without_val.set("step", 42);
  without_val.clear("val_loss");
  without_val.clear("val_acc");
  writer.write_step(with_val);
  writer.write_step(without_val);

  const auto lines = read_lines(dir / "trace.csv");
  ASSERT_EQ(lines.size(), 3u);
  const auto f = split_csv(lines[1]);
  ASSERT_EQ(f.size(), std::size(kStepColumns)) << lines[1];
  EXPECT_EQ(f[0], "41");
  EXPECT_EQ(f[1], "2");
  EXPECT_TRUE(same_bits(std::strtod(f[2].c_str(), nullptr), with_val["loss"])) << f[2];
  EXPECT_TRUE(same_bits(std::strtod(f[3].c_str(), nullptr), with_val["grad_norm"])) << f[3];
  EXPECT_TRUE(same_bits(std::strtod(f[4].c_str(), nullptr), with_val["loss_scale"])) << f[4];
  EXPECT_EQ(f[5], "0") << "skipped, as its initial value";
  EXPECT_EQ(std::strtof(f[6].c_str(), nullptr), 1.2345678e-4f) << f[6];
  EXPECT_EQ(f[6], "0.000123456775") << "lr as a float's %.9g";
  EXPECT_TRUE(same_bits(std::strtod(f[15].c_str(), nullptr), with_val["val_loss"])) << f[15];
  EXPECT_TRUE(same_bits(std::strtod(f[16].c_str(), nullptr), with_val["val_acc"])) << f[16];

  const auto g = split_csv(lines[2]);
  ASSERT_EQ(g.size(), std::size(kStepColumns)) << lines[2];
  EXPECT_EQ(g[0], "42");
  EXPECT_EQ(g[15], "");
  EXPECT_EQ(g[16], "");
}

TEST(TraceWriter, LayerRowsReadBackBitExactWithEmptyActAbsmaxWhenAbsent) {
  TempDir dir;
  TraceWriter writer(dir.str());
  LayerRow measured;
  measured.layer = "blocks.0.attn.qkv";
  measured.grad_norm = 2.0 / 7.0;
  measured.param_norm = 1e10 / 3.0;
  measured.act_absmax = 3.14159274f;
  measured.grad_underflow_frac = 0.125;
  measured.nonfinite = 3;
  LayerRow unmeasured = measured;
  unmeasured.layer = "head.cls";
  unmeasured.act_absmax.reset();
  measured.fp8[0] = double(3.5f);         // fp8_x_amax
  measured.fp8[1] = double(128.0f / 3);   // fp8_x_scale: a float's bits
  measured.fp8[2] = 1.0 / 3.0;            // fp8_x_underflow: a double's
  measured.fp8[14] = 12.5;                // fp8_dy_range
  writer.write_layers(5, {measured, unmeasured});

  const auto lines = read_lines(dir / "layers.csv");
  ASSERT_EQ(lines.size(), 3u);
  const auto f = split_csv(lines[1]);
  ASSERT_EQ(f.size(), std::size(kLayerColumns)) << lines[1];
  ASSERT_EQ(f.size(), 22u) << "7 columns and 5 for each of x, W, dy";
  EXPECT_EQ(std::strtof(f[7].c_str(), nullptr), 3.5f);
  EXPECT_EQ(std::strtof(f[8].c_str(), nullptr), 128.0f / 3) << f[8];
  EXPECT_TRUE(same_bits(std::strtod(f[9].c_str(), nullptr), 1.0 / 3.0)) << f[9];
  EXPECT_EQ(f[10], "");
  EXPECT_EQ(f[21], "12.5");
  EXPECT_EQ(f[0], "5");
  EXPECT_EQ(f[1], "blocks.0.attn.qkv");
  EXPECT_TRUE(same_bits(std::strtod(f[2].c_str(), nullptr), measured.grad_norm)) << f[2];
  EXPECT_TRUE(same_bits(std::strtod(f[3].c_str(), nullptr), measured.param_norm)) << f[3];
  EXPECT_EQ(std::strtof(f[4].c_str(), nullptr), *measured.act_absmax) << f[4];
  EXPECT_TRUE(same_bits(std::strtod(f[5].c_str(), nullptr), 0.125)) << f[5];
  EXPECT_EQ(f[6], "3");
  const auto g = split_csv(lines[2]);
  ASSERT_EQ(g.size(), std::size(kLayerColumns)) << lines[2];
  EXPECT_EQ(g[1], "head.cls");
  EXPECT_EQ(g[4], "");
  for (std::size_t i = kFp8LayerColumnsFirst; i < g.size(); ++i) EXPECT_EQ(g[i], "") << "no FP8 linear";
}

TEST(WriteFileAtomically, ReplacesTheFileAndLeavesNoTmp) {
  TempDir dir;
  const std::string path = dir / "run.json";
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second");
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "second");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(RankReport, RoundTripsBitExactWithInfNanAndAbsentValues) {
  RankReport in;
  in.row.set("step", 7);
  in.row.set("rank", 3);
  in.row.set("pp_rank", 1);
  in.row.set("dp_rank", 1);
  in.row.set("local_loss", 1.0 / 3.0);
  in.row.set("loss_scale", 32768);
  in.row.set("grad_norm_local", std::numeric_limits<double>::infinity());
  in.row.set("act_mb", 0.1);
  in.row.set("grad_bytes", 123456789012.0);
  LayerRow a;
  a.layer = "blocks.1.attn.qkv";
  a.grad_norm = std::numeric_limits<double>::quiet_NaN();
  a.param_norm = M_PI;
  a.act_absmax = 3.5f;
  a.grad_underflow_frac = 0.25;
  a.nonfinite = 12;
  a.fp8[0] = 1.0 / 7.0;  // fp8_x_amax
  a.fp8[2] = 0.0;
  a.fp8[14] = std::numeric_limits<double>::infinity();  // fp8_dy_range
  LayerRow b = a;
  b.layer = "head.cls";
  b.grad_norm = 1e-300;
  b.act_absmax.reset();
  b.fp8 = {};
  in.layers = {a, b};
  const RankReport out = decode_report(encode_report(in));
  EXPECT_EQ(out.row["step"], 7);
  EXPECT_EQ(out.row["rank"], 3);
  EXPECT_EQ(out.row["dp_rank"], 1);
  ASSERT_TRUE(out.row.has("local_loss"));
  EXPECT_TRUE(same_bits(out.row["local_loss"], 1.0 / 3.0));
  EXPECT_TRUE(std::isinf(out.row["grad_norm_local"]));
  EXPECT_TRUE(same_bits(out.row["act_mb"], 0.1));
  EXPECT_EQ(out.row["grad_bytes"], 123456789012.0);
  for (std::size_t i = 0; i < RankRow::kCount; ++i)  // every column, set or not, as it was sent
    EXPECT_EQ(out.row.at(i).has_value(), in.row.at(i).has_value()) << kRankColumns[i].name;
  ASSERT_EQ(out.layers.size(), 2u);
  EXPECT_EQ(out.layers[0].layer, "blocks.1.attn.qkv");
  EXPECT_TRUE(std::isnan(out.layers[0].grad_norm));
  EXPECT_TRUE(same_bits(out.layers[0].param_norm, M_PI));
  EXPECT_EQ(out.layers[0].act_absmax, 3.5f);
  EXPECT_EQ(out.layers[0].nonfinite, 12u);
  EXPECT_TRUE(same_bits(out.layers[1].grad_norm, 1e-300));
  EXPECT_FALSE(out.layers[1].act_absmax.has_value());
  for (std::size_t i = 0; i < kFp8LayerColumns; ++i) {  // the fp8 columns, set or not, as they were sent
    EXPECT_EQ(out.layers[0].fp8[i].has_value(), a.fp8[i].has_value()) << i;
    EXPECT_FALSE(out.layers[1].fp8[i].has_value()) << i;
  }
  EXPECT_TRUE(same_bits(*out.layers[0].fp8[0], 1.0 / 7.0));
  EXPECT_EQ(*out.layers[0].fp8[2], 0.0);
  EXPECT_TRUE(std::isinf(*out.layers[0].fp8[14]));

  RankReport middle;  // a stage that is not last has no loss, a replica other than 0 no layers
  EXPECT_FALSE(decode_report(encode_report(middle)).row.has("local_loss"));
  EXPECT_THROW(decode_report("7 3 1 1 x"), Error);
}

TEST(RankReport, MergeTakesLargestOverRanksAndTheLastReplicasWaitAsComm) {
  // pp = 2, dp = 2: ranks 0, 1 on stage 0, ranks 2, 3 on stage 1.
  std::vector<std::string> reports;
  const double comm[4] = {9.0, 1.5, 0.5, 7.0}, step_ms[4] = {100, 120, 110, 105};
  for (int r = 0; r < 4; ++r) {
    RankReport rep;
    rep.row.set("rank", r);
    rep.row.set("pp_rank", r / 2);
    rep.row.set("dp_rank", r % 2);
    rep.row.set("comm_ms", comm[r]);
    rep.row.set("step_ms", step_ms[r]);
    rep.row.set("schedule_ms", 100);
    rep.row.set("idle_ms", 10.0 * (r + 1));
    rep.row.set("act_mb", r == 1 ? 5.0 : 1.0);
    rep.row.set("data_wait_ms", r == 2 ? 3.25 : 0.5);
    if (r % 2 == 0) {
      LayerRow l;
      l.layer = r == 0 ? "embed" : "head.cls";
      rep.layers.push_back(l);
    }
    reports.push_back(encode_report(rep));
  }
  StepRow row;
  std::vector<RankRow> ranks;
  std::vector<LayerRow> layers;
  merge_reports(reports, 2, row, ranks, layers);
  EXPECT_EQ(row["comm_ms"], 1.5);  // stage 0: min(9, 1.5); stage 1: min(0.5, 7); largest of the two
  EXPECT_EQ(row["step_ms"], 120);
  EXPECT_EQ(row["act_mb"], 5.0);
  EXPECT_EQ(row["data_wait_ms"], 3.25);
  EXPECT_DOUBLE_EQ(row["bubble"], 0.4);
  ASSERT_EQ(ranks.size(), 4u);
  EXPECT_EQ(ranks[3]["rank"], 3);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].layer, "embed");
  EXPECT_EQ(layers[1].layer, "head.cls");
}

}  // namespace
}  // namespace avtrain
