// A stage's FP8 linears (Fp8Linears): which linears it takes, the step's amaxes reduced MAX over
// replicas with NaN above inf above every finite value (so each reaches every replica as itself),
// the same scales on every replica after the reduction, and the checkpoint state round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "model/fp8_linears.hpp"
#include "model/linear.hpp"
#include "model/param_store.hpp"

namespace avtrain {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
using Role = Fp8LinearScaling::Role;

TEST(Fp8Linears, AmaxEncodingOrdersNaNAboveInfAboveEveryFiniteValueAndDecodesExactly) {
  const float finite[] = {0.0f, 1e-30f, 1.5f, 448.0f, 3.4028235e38f};
  for (float a : finite) {
    EXPECT_EQ(Fp8Linears::decode_amax(Fp8Linears::encode_amax(a)), a);
    EXPECT_LT(Fp8Linears::encode_amax(a), Fp8Linears::encode_amax(kInf));
  }
  EXPECT_LT(Fp8Linears::encode_amax(kInf), Fp8Linears::encode_amax(kNaN));
  EXPECT_TRUE(std::isinf(Fp8Linears::decode_amax(Fp8Linears::encode_amax(kInf))));
  EXPECT_TRUE(std::isnan(Fp8Linears::decode_amax(Fp8Linears::encode_amax(kNaN))));
}

// Two replicas of a stage of three linears, one left out by the selection; each runs its own
// micro-batch, then the step's end reduces over both (a MAX here in the test, as MPI's).
struct Replica {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore params;
  Linear a{params, "blocks.0.attn.qkv", 8, 12, 0.3f, DType::bf16, true};
  Linear b{params, "blocks.0.mlp.fc1", 8, 8, 0.3f, DType::bf16, true};
  Linear c{params, "head.cls", 8, 4, 0.3f, DType::bf16, true};
  Fp8Linears fp8;
  Replica(const Fp8Recipe& recipe) {
    params.allocate(3);
    params.refresh_working(*be);
    fp8 = Fp8Linears({&a, &b, &c}, [](const std::string& m) { return m != "blocks.0.mlp.fc1"; }, recipe);
  }
  // One forward of `x` (8 columns, 5 rows) through a and c.
  void forward(const std::vector<float>& x) {
    std::vector<float> y(5 * 12);
    a.forward(*be, fp32(x.data()), y.data(), 5);
    c.forward(*be, fp32(x.data()), y.data(), 5);
  }
};

std::vector<float> rows_of(float v) {
  std::vector<float> x(5 * 8, 0.25f);
  x[7] = v;
  return x;
}

TEST(Fp8Linears, TakesTheSelectedLinearsAndReducesEachAmaxOverTheReplicasNaNIncluded) {
  const Fp8Recipe recipe{4, Fp8Amax::max, 0};
  Replica r0(recipe), r1(recipe);
  EXPECT_EQ(r0.fp8.modules(), (std::vector<std::string>{"blocks.0.attn.qkv", "head.cls"}));
  EXPECT_NE(r0.a.fp8(), nullptr);
  EXPECT_EQ(r0.b.fp8(), nullptr);
  // Step 1: replica 0's x has amax 3, replica 1's 12: both get 448 / 12.
  for (Replica* r : {&r0, &r1}) r->fp8.begin_step();
  r0.forward(rows_of(3.0f));
  r1.forward(rows_of(-12.0f));
  std::vector<std::vector<double>> sent(2), summed(2);
  auto gather = [&](std::vector<std::vector<double>>& to, int i) {
    return [&to, i](double* v, std::size_t n) { to[i].assign(v, v + n); };
  };
  // As a collective would: each replica's values first, then the max and the sum.
  r0.fp8.end_step(gather(sent, 0), gather(summed, 0));
  r1.fp8.end_step(gather(sent, 1), gather(summed, 1));
  EXPECT_EQ(r0.fp8.scalings()[0]->scaling(Role::x).scale(), kFp8E4M3Max / 3.0f) << "not reduced yet";
  // Again with the reduction: both replicas end with the same state.
  Replica s0(recipe), s1(recipe);
  for (Replica* r : {&s0, &s1}) r->fp8.begin_step();
  s0.forward(rows_of(3.0f));
  s1.forward(rows_of(-12.0f));
  auto reduced = [&](double* v, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) v[k] = std::max(sent[0][k], sent[1][k]);
  };
  auto added = [&](double* v, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) v[k] = summed[0][k] + summed[1][k];
  };
  s0.fp8.end_step(reduced, added);
  s1.fp8.end_step(reduced, added);
  for (Replica* r : {&s0, &s1}) {
    EXPECT_EQ(r->fp8.scalings()[0]->scaling(Role::x).scale(), kFp8E4M3Max / 12.0f);
    EXPECT_EQ(r->fp8.scalings()[1]->scaling(Role::x).scale(), kFp8E4M3Max / 12.0f);
    // What the step's casts did, over both replicas: x's 5 x 8 values on each, at the first step's
    // just-in-time scales, each replica's own (448 / 3, 448 / 12): reported, the largest amax's.
    const Fp8LinearScaling::StepCasts& x = r->fp8.scalings()[0]->step(Role::x);
    EXPECT_EQ(x.scale, kFp8E4M3Max / 12.0f);
    EXPECT_EQ(x.cast.amax, 12.0f);
    EXPECT_EQ(x.cast.min_nonzero, 0.25f);
    EXPECT_EQ(x.values, 80);
    EXPECT_EQ(x.cast.underflow, 0);
    EXPECT_EQ(x.cast.saturated, 0);
    EXPECT_EQ(r->fp8.scalings()[0]->step(Role::w).values, 2 * 12 * 8);
  }
  EXPECT_EQ(s0.fp8.state(0), s1.fp8.state(0));
  // Step 2: a NaN on replica 1 alone reaches replica 0 as NaN: both keep their scale.
  for (Replica* r : {&s0, &s1}) r->fp8.begin_step();
  s0.forward(rows_of(100.0f));
  s1.forward(rows_of(kNaN));
  std::vector<std::vector<double>> step2(2);
  const auto none = [](double*, std::size_t) {};
  s0.fp8.end_step([&](double* v, std::size_t n) { step2[0].assign(v, v + n); }, none);
  s1.fp8.end_step([&](double* v, std::size_t n) { step2[1].assign(v, v + n); }, none);
  EXPECT_GT(step2[1][0], step2[0][0]) << "NaN's code is above 100's";
  EXPECT_TRUE(std::isnan(Fp8Linears::decode_amax(std::max(step2[0][0], step2[1][0]))));
}

// Underflow and saturation at the step's scale, the smallest non-zero |x| a MIN over the replicas
// (carried as its negative in the MAX), and a frozen module's scales that stay at 1 while the other's
// follow its amax.
TEST(Fp8Linears, CountsUnderflowAndSaturationAtTheStepsScaleAndAFrozenModuleKeepsItsScale) {
  const Fp8Recipe recipe{4, Fp8Amax::max, 0};
  Replica r(recipe);
  EXPECT_TRUE(r.fp8.freeze("head.cls"));
  EXPECT_FALSE(r.fp8.freeze("blocks.0.mlp.fc1")) << "not in FP8";
  EXPECT_FALSE(r.fp8.freeze("blocks.9.attn.qkv"));
  const auto none = [](double*, std::size_t) {};
  r.fp8.begin_step();
  r.forward(rows_of(7.0f));  // step 1 just in time (448 / 7), the frozen module at 1: amax 7
  r.fp8.end_step(none, none);
  EXPECT_EQ(r.fp8.scalings()[0]->step(Role::x).scale, kFp8E4M3Max / 7.0f);
  EXPECT_EQ(r.fp8.scalings()[1]->step(Role::x).scale, 1.0f);
  EXPECT_EQ(r.fp8.scalings()[0]->scaling(Role::x).scale(), kFp8E4M3Max / 7.0f);
  EXPECT_EQ(r.fp8.scalings()[1]->scaling(Role::x).scale(), 1.0f) << "frozen";
  // Step 2 at 448 / 7: 1e-5 x 64 is below E4M3's smallest subnormal's half (one value underflows),
  // 900 x 64 beyond 448 (one saturates); head.cls at scale 1: 900 saturates, 1e-5 underflows.
  std::vector<float> x = rows_of(900.0f);
  x[3] = 1e-5f;
  r.fp8.begin_step();
  r.forward(x);
  std::vector<double> largest;
  r.fp8.end_step([&](double* v, std::size_t n) { largest.assign(v, v + n); }, none);
  for (int m = 0; m < 2; ++m) {
    const Fp8LinearScaling::StepCasts& c = r.fp8.scalings()[m]->step(Role::x);
    EXPECT_EQ(c.scale, m == 0 ? kFp8E4M3Max / 7.0f : 1.0f);
    EXPECT_EQ(c.values, 40);
    EXPECT_EQ(c.cast.amax, 900.0f);
    EXPECT_EQ(c.cast.min_nonzero, 1e-5f);
    EXPECT_EQ(c.cast.underflow, 1);
    EXPECT_EQ(c.cast.saturated, 1);
  }
  EXPECT_EQ(largest[1], -double(1e-5f)) << "the minimum travels as its negative";
  EXPECT_EQ(r.fp8.scalings()[1]->scaling(Role::x).scale(), 1.0f) << "still frozen";
  EXPECT_EQ(r.fp8.scalings()[1]->scaling(Role::x).history().back(), 900.0f) << "its amaxes still recorded";
}

TEST(Fp8Linears, StatesRoundTripAndAStateOfAnotherHistoryIsRefused) {
  Replica r0(Fp8Recipe{4, Fp8Amax::max, 0}), r1(Fp8Recipe{4, Fp8Amax::max, 0}), other(Fp8Recipe{8, Fp8Amax::max, 0});
  r0.fp8.begin_step();
  r0.forward(rows_of(5.0f));
  r0.fp8.end_step([](double*, std::size_t) {}, [](double*, std::size_t) {});
  EXPECT_EQ(r0.fp8.state_size(), 3u * (4 + 2));
  for (std::size_t i = 0; i < 2; ++i) r1.fp8.restore(i, r0.fp8.state(i));
  EXPECT_EQ(r1.fp8.state(0), r0.fp8.state(0));
  EXPECT_EQ(r1.fp8.scalings()[0]->scaling(Role::x).scale(), kFp8E4M3Max / 5.0f);
  EXPECT_THROW(other.fp8.restore(0, r0.fp8.state(0)), Error);
}

}  // namespace
}  // namespace avtrain
