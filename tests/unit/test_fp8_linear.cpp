// A bf16 Linear with FP8 products (precision.mode fp8) on the CPU against a double reference that
// quantizes the same way: y, dx, dW and db of a step whose scales came from the first step's amaxes;
// the amaxes each step records; and that the products are FP8's (not the bf16 linear's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/fp8.hpp"
#include "core/half.hpp"
#include "core/keyed_random.hpp"
#include "model/fp8_linear_scaling.hpp"
#include "model/linear.hpp"
#include "model/param_store.hpp"

namespace avtrain {
namespace {

using Role = Fp8LinearScaling::Role;

// n normal values with magnitudes spread over e^(+-spread), rounded to bf16.
std::vector<float> bf16_values(std::size_t n, const char* key, double spread) {
  KeyedRandom random(13, key);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_float(float_to_bf16(float(random.normal() * std::exp(random.uniform(-spread, spread)))));
  return v;
}

float amax_of(const std::vector<float>& v) {
  float a = 0;
  for (float x : v) a = std::max(a, std::fabs(x));
  return a;
}

double q(Fp8Format f, float x, float scale) { return fp8_to_float(f, float_to_fp8(f, x * scale)); }

struct StepResult {
  std::vector<float> y, dx, dw, db;
};

class Fp8LinearTest : public ::testing::Test {
 protected:
  static constexpr int rows = 19, in = 24, out = 16;
  std::unique_ptr<Backend> be = make_cpu_backend();
  ParamStore params;
  Linear linear{params, "blocks.0.mlp.fc1", in, out, 0.3f, DType::bf16, true};
  Fp8LinearScaling fp8{"blocks.0.mlp.fc1", Fp8Recipe{16, Fp8Amax::max, 0}};
  std::vector<float> x = bf16_values(std::size_t(rows) * in, "x", 2.0), dy = bf16_values(std::size_t(rows) * out, "dy", 3.0);
  std::vector<float> w, bias;

  void SetUp() override {
    params.allocate(17);
    for (int o = 0; o < out; ++o) params.value(1)[o] = bf16_to_float(float_to_bf16(0.01f * float(o - 7)));
    params.refresh_working(*be);
    w.resize(std::size_t(out) * in);
    be->unpack(params.operand(0), w.data(), w.size());
    bias.assign(params.value(1), params.value(1) + out);
  }

  // One micro-batch forward and backward, x and dy as bf16 copies (their values in fp32 too).
  StepResult step() {
    StepResult r{std::vector<float>(std::size_t(rows) * out), std::vector<float>(std::size_t(rows) * in), {}, {}};
    std::vector<std::uint16_t> xb(x.size()), yb(r.y.size()), dyb(dy.size());
    be->pack(x.data(), {xb.data(), DType::bf16}, x.size());
    be->pack(dy.data(), {dyb.data(), DType::bf16}, dy.size());
    params.zero_grads();
    linear.forward(*be, {xb.data(), DType::bf16}, rounded(r.y.data(), DType::bf16, yb.data()), rows);
    std::vector<float> dyv = dy;
    linear.backward(*be, {xb.data(), DType::bf16}, rounded(dyv.data(), DType::bf16, dyb.data()), r.dx.data(), rows);
    r.dw.assign(params.grad(0), params.grad(0) + std::size_t(out) * in);
    r.db.assign(params.grad(1), params.grad(1) + out);
    return r;
  }
};

TEST_F(Fp8LinearTest, ProductsAreTheQuantizedProductsOfTheStepsScalesRoundedAsTheBf16Linears) {
  linear.use_fp8(&fp8);
  // Step 1 at just-in-time scales (no history yet): the amaxes of x, W and dy are recorded.
  fp8.begin_step();
  step();
  fp8.end_step();
  EXPECT_EQ(fp8.scaling(Role::x).step_amax(), amax_of(x));
  EXPECT_EQ(fp8.scaling(Role::w).step_amax(), amax_of(w));
  EXPECT_EQ(fp8.scaling(Role::dy).step_amax(), amax_of(dy));
  fp8.update();
  const float sx = fp8.scaling(Role::x).scale(), sw = fp8.scaling(Role::w).scale(), sdy = fp8.scaling(Role::dy).scale();
  EXPECT_EQ(sx, kFp8E4M3Max / amax_of(x));
  EXPECT_EQ(sdy, kFp8E5M2Max / amax_of(dy));

  // Step 2 with those scales, against the double reference of the same quantization.
  fp8.begin_step();
  const StepResult r = step();
  fp8.end_step();
  const double u = std::ldexp(1.0, -24), half_bf16 = std::ldexp(1.0, -8);
  const Fp8Format e4 = Fp8Format::e4m3, e5 = Fp8Format::e5m2;
  int differs_from_exact = 0;
  for (int i = 0; i < rows; ++i)
    for (int o = 0; o < out; ++o) {
      double sum = 0, magnitude = 0, exact = 0;
      for (int k = 0; k < in; ++k) {
        const double p = q(e4, x[std::size_t(i) * in + k], sx) * q(e4, w[std::size_t(o) * in + k], sw);
        sum += p, magnitude += std::fabs(p);
        exact += double(x[std::size_t(i) * in + k]) * w[std::size_t(o) * in + k];
      }
      const double want = bias[o] + sum / (double(sx) * sw), got = r.y[std::size_t(i) * out + o];
      const double bound = (in + 4) * u * (magnitude / (double(sx) * sw) + std::fabs(bias[o]));
      ASSERT_LE(std::fabs(got - want), half_bf16 * std::fabs(want) + bound) << "y(" << i << ", " << o << ")";
      differs_from_exact += std::fabs(got - (bias[o] + exact)) > half_bf16 * std::fabs(bias[o] + exact) + bound;
    }
  EXPECT_GT(differs_from_exact, 0) << "some output shows the fp8 quantization (else the products are not FP8's)";
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < in; ++k) {
      double sum = 0, magnitude = 0;
      for (int o = 0; o < out; ++o) {
        const double p = q(e5, dy[std::size_t(i) * out + o], sdy) * q(e4, w[std::size_t(o) * in + k], sw);
        sum += p, magnitude += std::fabs(p);
      }
      const double want = sum / (double(sdy) * sw), got = r.dx[std::size_t(i) * in + k];
      ASSERT_LE(std::fabs(got - want), half_bf16 * std::fabs(want) + (out + 4) * u * magnitude / (double(sdy) * sw))
          << "dx(" << i << ", " << k << ")";
    }
  for (int o = 0; o < out; ++o) {
    for (int k = 0; k < in; ++k) {
      double sum = 0, magnitude = 0;
      for (int i = 0; i < rows; ++i) {
        const double p = q(e5, dy[std::size_t(i) * out + o], sdy) * q(e4, x[std::size_t(i) * in + k], sx);
        sum += p, magnitude += std::fabs(p);
      }
      const double want = sum / (double(sdy) * sx), got = r.dw[std::size_t(o) * in + k];
      ASSERT_LE(std::fabs(got - want), half_bf16 * std::fabs(want) + (rows + 4) * u * magnitude / (double(sdy) * sx))
          << "dW(" << o << ", " << k << ")";
    }
    double db = 0, magnitude = 0;
    for (int i = 0; i < rows; ++i) db += dy[std::size_t(i) * out + o], magnitude += std::fabs(dy[std::size_t(i) * out + o]);
    ASSERT_LE(std::fabs(r.db[o] - db), half_bf16 * std::fabs(db) + (rows + 2) * u * magnitude) << "db(" << o << ")";
  }
  // The step records the same amaxes again (the scales do not change them).
  EXPECT_EQ(fp8.scaling(Role::x).step_amax(), amax_of(x));
  EXPECT_EQ(fp8.scaling(Role::dy).step_amax(), amax_of(dy));
}

// Without the scaling the module is the bf16 linear: the two differ (the FP8 path is taken).
TEST_F(Fp8LinearTest, TheFp8ModuleDiffersFromTheBf16OneAndANaNReachesTheAmax) {
  const StepResult plain = step();
  linear.use_fp8(&fp8);
  fp8.begin_step();
  const StepResult quantized = step();
  EXPECT_NE(plain.y, quantized.y);
  EXPECT_NE(plain.dw, quantized.dw);
  fp8.end_step();
  fp8.update();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  fp8.begin_step();
  step();
  fp8.end_step();
  EXPECT_TRUE(std::isnan(fp8.scaling(Role::x).step_amax()));
  EXPECT_FALSE(std::isnan(fp8.scaling(Role::w).step_amax()));
}

// A fresh start's first step: a tensor without amax history is quantized with the scale of its own
// amax, (FP8 max / amax), not 1. An E5M2 gradient of magnitude 1e-6 (below E5M2's smallest value,
// 2^-16, at scale 1: all zeros) keeps every value to E5M2's precision; the amax still goes to the
// history, whose scale the next step takes (the same here: the same tensor). A restored history is
// used as it is (no per-use scale after a resume).
TEST_F(Fp8LinearTest, AFirstStepTakesEachTensorsScaleFromItsOwnAmax) {
  std::vector<float> tiny = bf16_values(std::size_t(rows) * out, "tiny", 1.0);
  const float to_1e6 = 2e-6f / amax_of(tiny);  // the largest 2e-6, below 2^-17 (half E5M2's smallest)
  for (float& v : tiny) v = bf16_to_float(float_to_bf16(v * to_1e6));
  const float amax = amax_of(tiny);
  for (float v : tiny) ASSERT_EQ(fp8_to_float(Fp8Format::e5m2, float_to_fp8(Fp8Format::e5m2, v)), 0.0f);  // at scale 1
  Mask codes;
  Buffer scratch;
  std::vector<float> back(tiny.size());
  fp8.begin_step();
  const Operand dy8 = fp8.quantize(*be, Role::dy, fp32(tiny.data()), tiny.size(), codes, scratch, true);
  EXPECT_EQ(*dy8.scale, kFp8E5M2Max / amax);
  be->unpack(dy8, back.data(), back.size());
  for (std::size_t i = 0; i < tiny.size(); ++i)
    ASSERT_NEAR(back[i], tiny[i], std::ldexp(std::fabs(tiny[i]), -3) + std::ldexp(amax, -30)) << i;  // 2 mantissa bits
  fp8.end_step();
  EXPECT_EQ(fp8.scaling(Role::dy).step_amax(), amax);
  fp8.update();
  EXPECT_EQ(fp8.scaling(Role::dy).scale(), kFp8E5M2Max / amax);
  // A resumed scaling with a history uses its delayed scale, whatever the tensor.
  Fp8LinearScaling resumed{"blocks.0.mlp.fc1", Fp8Recipe{16, Fp8Amax::max, 0}};
  Fp8DelayedScaling held(Fp8Format::e5m2, Fp8Recipe{16, Fp8Amax::max, 0});
  held.record(1.0f);
  held.update();
  resumed.scaling(Role::dy).restore(held.state());
  resumed.load_scales();
  resumed.begin_step();
  EXPECT_EQ(*resumed.quantize(*be, Role::dy, fp32(tiny.data()), tiny.size(), codes, scratch, true).scale, kFp8E5M2Max);
}

TEST_F(Fp8LinearTest, AnFp32ModuleRefusesFp8ProductsAndQuantizeBeforeTheStepIsRefused) {
  ParamStore other;
  Linear fp32_linear{other, "head.cls", in, out, 0.3f, DType::f32, false};
  EXPECT_THROW(fp32_linear.use_fp8(&fp8), Error);
  linear.use_fp8(&fp8);
  EXPECT_THROW(step(), Error);
}

}  // namespace
}  // namespace avtrain
