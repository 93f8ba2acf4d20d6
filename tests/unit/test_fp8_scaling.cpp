// Delayed scaling of an FP8 tensor against a hand-worked example and Transformer Engine's rules
// (amax_and_scale_update: scale = (FP8 max / amax) / 2^margin from the largest amax of the history
// window; a zero or non-finite amax keeps the scale; an inf scale is FLT_MAX), the amax reduced
// between record() and update(), and a checkpoint's flat state continuing bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/keyed_random.hpp"
#include "precision/fp8_scaling.hpp"

namespace avtrain {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float step(Fp8DelayedScaling& s, std::initializer_list<float> amaxes) {
  for (float a : amaxes) s.record(a);
  s.update();
  return s.scale();
}

// E4M3, history 4, max: each scale is 448 / (the largest amax of the last four steps).
TEST(Fp8DelayedScaling, HandWorkedHistoryOfFour) {
  Fp8DelayedScaling s(Fp8Format::e4m3, {4, Fp8Amax::max, 0});
  EXPECT_EQ(s.scale(), 1.0f);  // before any step
  EXPECT_EQ(step(s, {2.0f, 3.5f}), 128.0f);   // two micro-batches: the step's amax is 3.5; 448 / 3.5
  EXPECT_EQ(step(s, {7.0f}), 64.0f);          // window 3.5 7
  EXPECT_EQ(step(s, {1.0f}), 64.0f);          // window 3.5 7 1
  EXPECT_EQ(step(s, {0.5f}), 64.0f);          // window 3.5 7 1 0.5
  EXPECT_EQ(step(s, {0.25f}), 64.0f);         // window 7 1 0.5 0.25 (3.5 left)
  EXPECT_EQ(step(s, {0.25f}), 448.0f);        // window 1 0.5 0.25 0.25 (7 left)
  EXPECT_EQ(s.history(), (std::vector<float>{1.0f, 0.5f, 0.25f, 0.25f}));
  EXPECT_EQ(s.scale_inv(), 1.0f / 448.0f);
}

TEST(Fp8DelayedScaling, MostRecentMarginAndE5M2) {
  Fp8DelayedScaling recent(Fp8Format::e4m3, {4, Fp8Amax::most_recent, 0});
  EXPECT_EQ(step(recent, {3.5f}), 128.0f);
  EXPECT_EQ(step(recent, {7.0f}), 64.0f);
  EXPECT_EQ(step(recent, {1.0f}), 448.0f);  // max would keep 64
  Fp8DelayedScaling margin(Fp8Format::e4m3, {4, Fp8Amax::max, 2});
  EXPECT_EQ(step(margin, {7.0f}), 16.0f);  // (448 / 7) / 2^2
  Fp8DelayedScaling e5m2(Fp8Format::e5m2, {1024, Fp8Amax::max, 1});
  EXPECT_EQ(step(e5m2, {0.5f}), 57344.0f);  // (57344 / 0.5) / 2
  EXPECT_EQ(step(e5m2, {3.0f}), 28672.0f / 3.0f);  // in fp32, as TE divides
  EXPECT_EQ(e5m2.format(), Fp8Format::e5m2);
}

// The quantized amax lands on the format's largest value (or just below it: the scale is rounded).
TEST(Fp8DelayedScaling, TheScaledAmaxIsTheFormatsLargest) {
  KeyedRandom random(3, "amax");
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    for (int i = 0; i < 1000; ++i) {
      Fp8DelayedScaling s(f, {16, Fp8Amax::max, 0});
      const float amax = float(std::exp(random.uniform(-30.0, 30.0)));
      step(s, {amax});
      const float scaled = amax * s.scale();
      EXPECT_NEAR(scaled, fp8_max(f), fp8_max(f) * 1e-6f) << amax;
      EXPECT_EQ(float_to_fp8(f, scaled), f == Fp8Format::e4m3 ? 0x7E : 0x7B) << amax;
    }
  }
}

// A zero amax (the tensor unused this step, or all zeros) changes nothing: not the scale, and not the
// history (TE's bulk update does not roll it).
TEST(Fp8DelayedScaling, AZeroAmaxLeavesScaleAndHistory) {
  Fp8DelayedScaling s(Fp8Format::e4m3, {2, Fp8Amax::max, 0});
  EXPECT_EQ(step(s, {0.0f}), 1.0f);  // the first step, all zeros: the initial scale stays
  EXPECT_EQ(s.history(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(step(s, {7.0f}), 64.0f);
  EXPECT_EQ(step(s, {}), 64.0f);
  EXPECT_EQ(step(s, {0.0f}), 64.0f);
  EXPECT_EQ(s.history(), (std::vector<float>{0.0f, 7.0f}));  // rolled, it would be 0 0
  EXPECT_EQ(step(s, {14.0f}), 32.0f);
  EXPECT_EQ(step(s, {1.0f}), 32.0f);  // window 14 1
  EXPECT_EQ(step(s, {1.0f}), 448.0f);
}

// An inf or NaN amax keeps the scale while it is in the window; most_recent only for its own step.
TEST(Fp8DelayedScaling, ANonFiniteAmaxKeepsTheScaleWhileInTheWindow) {
  for (const float bad : {kInf, std::numeric_limits<float>::quiet_NaN()}) {
    Fp8DelayedScaling s(Fp8Format::e4m3, {3, Fp8Amax::max, 0});
    EXPECT_EQ(step(s, {7.0f}), 64.0f);
    EXPECT_EQ(step(s, {1.0f, bad, 2.0f}), 64.0f) << bad;  // a NaN among the step's amaxes stays NaN
    EXPECT_EQ(step(s, {1.0f}), 64.0f);
    EXPECT_EQ(step(s, {1.0f}), 64.0f);  // window bad 1 1
    EXPECT_EQ(step(s, {2.0f}), 224.0f);  // window 1 1 2
    Fp8DelayedScaling recent(Fp8Format::e4m3, {3, Fp8Amax::most_recent, 0});
    EXPECT_EQ(step(recent, {7.0f}), 64.0f);
    EXPECT_EQ(step(recent, {bad}), 64.0f);
    EXPECT_EQ(step(recent, {1.0f}), 448.0f);
  }
}

// An amax so small that FP8 max / amax overflows fp32 gives FLT_MAX (TE's rule), not inf.
TEST(Fp8DelayedScaling, AnInfiniteScaleIsFltMax) {
  Fp8DelayedScaling s(Fp8Format::e5m2, {4, Fp8Amax::max, 0});
  EXPECT_EQ(step(s, {std::numeric_limits<float>::denorm_min()}), std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(s.scale_inv()));
}

// The caller reduces the step's amax over the data-parallel replicas between record() and update():
// replicas that saw different amaxes end with the same scale and history.
TEST(Fp8DelayedScaling, TheStepsAmaxReducedOverReplicasGivesOneScale) {
  std::vector<Fp8DelayedScaling> replicas(3, Fp8DelayedScaling(Fp8Format::e4m3, {8, Fp8Amax::max, 0}));
  const float seen[3] = {1.0f, 7.0f, 3.5f};
  float reduced = 0;
  for (int r = 0; r < 3; ++r) {
    replicas[r].record(seen[r]);
    reduced = std::max(reduced, replicas[r].step_amax());  // what an all-reduce MAX gives every replica
  }
  for (auto& s : replicas) {
    s.set_step_amax(reduced);
    s.update();
    EXPECT_EQ(s.scale(), 64.0f);
    EXPECT_EQ(s.history(), replicas[0].history());
    EXPECT_EQ(s.step_amax(), 0.0f);  // the next step starts afresh
  }
}

// state() / restore(): a copy restored from the state continues with the same bits, wherever the ring
// stood; a state of another history length is refused naming the option.
TEST(Fp8DelayedScaling, CheckpointStateContinuesBitForBit) {
  KeyedRandom random(11, "amaxes");
  Fp8DelayedScaling run(Fp8Format::e5m2, {5, Fp8Amax::max, 1});
  for (int i = 0; i < 13; ++i) step(run, {float(random.uniform(0.0, 100.0))});
  run.record(0.75f);  // part of a step recorded
  const std::vector<float> saved = run.state();
  ASSERT_EQ(saved.size(), run.state_size());
  EXPECT_EQ(saved.size(), 7u);
  Fp8DelayedScaling resumed(Fp8Format::e5m2, {5, Fp8Amax::max, 1});
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  for (int i = 0; i < 20; ++i) {
    const float a = float(random.uniform(0.0, 100.0));
    EXPECT_EQ(step(resumed, {a}), step(run, {a})) << i;
    ASSERT_EQ(resumed.history(), run.history());
  }
  Fp8DelayedScaling other(Fp8Format::e5m2, {4, Fp8Amax::max, 1});
  try {
    other.restore(saved);
    FAIL() << "a state of history 5 restored into history 4";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "FP8 scaling state of 5 amaxes, but precision.fp8_history is 4 (a checkpoint continues with the "
              "history it was written with)");
  }
}

// scale_for(amax), the scale a first step takes just in time, is the formula of update(); without an
// amax (zero, inf, NaN) it is the scale held (1 at first). has_history(): after a step with an amax,
// and after a restore of a state that had one.
TEST(Fp8DelayedScaling, ScaleForIsTheFormulaOfTheAmaxAndHistoryStartsWithTheFirstAmax) {
  Fp8DelayedScaling s(Fp8Format::e5m2, {4, Fp8Amax::max, 1});
  EXPECT_FALSE(s.has_history());
  EXPECT_EQ(s.scale_for(3.0f), 28672.0f / 3.0f);
  EXPECT_EQ(s.scale_for(1e-40f), std::numeric_limits<float>::max());
  for (const float none : {0.0f, kInf, std::numeric_limits<float>::quiet_NaN()}) EXPECT_EQ(s.scale_for(none), 1.0f);
  step(s, {0.0f});  // a step that saw nothing: still no history
  EXPECT_FALSE(s.has_history());
  EXPECT_EQ(step(s, {3.0f}), s.scale_for(3.0f));
  EXPECT_TRUE(s.has_history());
  EXPECT_EQ(s.scale_for(kInf), s.scale());
  Fp8DelayedScaling resumed(Fp8Format::e5m2, {4, Fp8Amax::max, 1});
  resumed.restore(s.state());
  EXPECT_TRUE(resumed.has_history());
  Fp8DelayedScaling nan_seen(Fp8Format::e4m3, {4, Fp8Amax::max, 0});
  step(nan_seen, {std::numeric_limits<float>::quiet_NaN()});
  EXPECT_TRUE(nan_seen.has_history());  // a NaN is history too: the scale held, not one per use
  EXPECT_EQ(nan_seen.scale(), 1.0f);
}

TEST(Fp8DelayedScaling, RecipeOutsideItsRangeIsRefusedNamingTheOption) {
  EXPECT_THROW(Fp8DelayedScaling(Fp8Format::e4m3, {0, Fp8Amax::max, 0}), Error);
  EXPECT_THROW(Fp8DelayedScaling(Fp8Format::e4m3, {4, Fp8Amax::max, -1}), Error);
  try {
    Fp8DelayedScaling(Fp8Format::e4m3, {4, Fp8Amax::max, 19});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "precision.fp8_margin = 19: must be in [0, 18]");
  }
  // Why 18 is the largest margin: the amax an E4M3 scale maps to, 448 / 2^margin, still quantizes to
  // the smallest E4M3 value at 18 and to 0 at 19.
  EXPECT_EQ(float_to_e4m3(std::ldexp(448.0f, -kFp8MarginMax)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(448.0f, -kFp8MarginMax - 1)), 0x00);
  PrecisionConfig c;
  c.fp8_history = 7, c.fp8_amax = Fp8Amax::most_recent, c.fp8_margin = 3;
  const Fp8Recipe r = Fp8Recipe::of(c);
  EXPECT_EQ(r.history, 7);
  EXPECT_EQ(r.amax, Fp8Amax::most_recent);
  EXPECT_EQ(r.margin, 3);
}

}  // namespace
}  // namespace avtrain
