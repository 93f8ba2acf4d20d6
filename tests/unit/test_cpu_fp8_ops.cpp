// The CPU backend's FP8 ops: pack/unpack with a scale give core/fp8's conversions, and gemm with fp8
// operands (the emulated FP8 product) agrees with a double product of the decoded values within fp32
// summation's bound and with precision/fp8_gemm_reference, for the linear's three products in every
// layout (padding NaN codes, never read), beta accumulating, and the same bits for any thread count.
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
#include "core/keyed_random.hpp"
#include "precision/fp8_gemm_reference.hpp"
#include "fp8_test_matrices.hpp"

namespace avtrain {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A logical rows x cols matrix stored row-major with leading dimension ld (padding NaN), or transposed.
struct Stored {
  std::vector<float> data;
  int ld;
  bool transposed;
};

Stored store(const std::vector<float>& m, int rows, int cols, bool transposed, int pad) {
  const int stored_rows = transposed ? cols : rows, stored_cols = transposed ? rows : cols;
  Stored s{std::vector<float>(std::size_t(stored_rows) * (stored_cols + pad), kNaN), stored_cols + pad, transposed};
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      s.data[transposed ? std::size_t(c) * s.ld + r : std::size_t(r) * s.ld + c] = m[std::size_t(r) * cols + c];
  return s;
}

class CpuFp8 : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

// Over several chunks and threads, with saturation, infinities, NaN, signed zeros and subnormals.
TEST_F(CpuFp8, PackAndUnpackWithAScaleGiveTheScalarConversions) {
  KeyedRandom random(3, "cpu fp8 pack");
  std::vector<float> x = random_matrix(random, 40000, 6.0);
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, kNaN, 1e30f, -1e30f, 1e-30f, 3e-3f, -448.0f, 57344.0f};
  for (std::size_t i = 0; i < std::size(specials); ++i) x[i * 997] = specials[i];
  be->set_threads(2);
  for (DType t : {DType::e4m3, DType::e5m2}) {
    const Fp8Format f = fp8_format(t);
    const float scale = t == DType::e4m3 ? 20.0f : 0.375f;
    std::vector<std::uint8_t> codes(x.size());
    std::vector<float> back(x.size(), kNaN);
    be->pack(x.data(), {codes.data(), t, const_cast<float*>(&scale)}, x.size());
    be->unpack({codes.data(), t, &scale}, back.data(), back.size());
    const float inverse = 1.0f / scale;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint8_t want = float_to_fp8(f, x[i] * scale);
      ASSERT_EQ(codes[i], want) << dtype_name(t) << " " << x[i];
      const float value = fp8_to_float(f, want) * inverse;
      if (std::isnan(value))
        ASSERT_TRUE(std::isnan(back[i])) << x[i];
      else
        ASSERT_EQ(float_bits(back[i]), float_bits(value)) << dtype_name(t) << " " << x[i];
    }
    EXPECT_EQ(codes[2 * 997] & 0x7F, float_to_fp8(f, 1e30f)) << "inf saturates to the largest value";
  }
}

// quantize with statistics: pack's codes, and what the cast did counted element by element here (a zero code
// from a non-zero value, |x * scale| above the largest value, the amax, the smallest non-zero |x|),
// folded into what the statistics held before; the same on 1 and 2 threads.
TEST_F(CpuFp8, QuantizeGivesPacksCodesAndTheCastsStatistics) {
  KeyedRandom random(5, "cpu fp8 counted");
  std::vector<float> x = random_matrix(random, 40000, 6.0);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-6f;  // some underflow at either scale
  const float specials[] = {0.0f, -0.0f, kInf, -1e30f, 1e-30f, -3e-3f, 448.0f, 57344.0f, 2e-38f};
  for (std::size_t i = 0; i < std::size(specials); ++i) x[i * 997 + 1] = specials[i];
  for (DType t : {DType::e4m3, DType::e5m2}) {
    const Fp8Format f = fp8_format(t);
    const float scale = t == DType::e4m3 ? 20.0f : 0.375f;
    double underflow = 0, saturated = 0;
    float min_nonzero = 0.5f;  // what the statistics held before: larger than this tensor's minimum
    for (float v : x) {
      const float scaled = v * scale;
      underflow += v != 0.0f && (float_to_fp8(f, scaled) & 0x7F) == 0;
      saturated += std::fabs(scaled) > fp8_max(f);
      if (v != 0.0f && std::fabs(v) < min_nonzero) min_nonzero = std::fabs(v);
    }
    ASSERT_GT(underflow, 0);
    ASSERT_GE(saturated, 2);  // inf and -1e30 at least
    for (int threads : {1, 2}) {
      be->set_threads(threads);
      std::vector<std::uint8_t> codes(x.size()), packed(x.size());
      be->pack(x.data(), {packed.data(), t, const_cast<float*>(&scale)}, x.size());
      Fp8CastStats stats{3.0f, 0.5f, 10, 1};
      be->quantize(fp32(x.data()), {codes.data(), t, const_cast<float*>(&scale)}, x.size(), &stats, nullptr);
      EXPECT_EQ(codes, packed) << dtype_name(t);
      EXPECT_TRUE(std::isinf(stats.amax)) << "the inf is the amax";
      EXPECT_EQ(stats.min_nonzero, min_nonzero);
      EXPECT_EQ(stats.underflow, 10 + underflow) << dtype_name(t);
      EXPECT_EQ(stats.saturated, 1 + saturated) << dtype_name(t);
    }
  }
  // A bf16 copy, read through scratch as its values: the codes and statistics of those values in fp32.
  std::vector<std::uint16_t> bits(x.size());
  be->pack(x.data(), {bits.data(), DType::bf16}, x.size());
  std::vector<float> widened(x.size()), scratch(x.size());
  be->unpack({bits.data(), DType::bf16}, widened.data(), x.size());
  const float scale16 = 3.0f;
  std::vector<std::uint8_t> from16(x.size()), from32(x.size());
  Fp8CastStats s16, s32;
  be->quantize({bits.data(), DType::bf16}, {from16.data(), DType::e4m3, const_cast<float*>(&scale16)}, x.size(), &s16,
               scratch.data());
  be->quantize(fp32(widened.data()), {from32.data(), DType::e4m3, const_cast<float*>(&scale16)}, x.size(), &s32, nullptr);
  EXPECT_EQ(from16, from32);
  EXPECT_EQ(float_bits(s16.amax), float_bits(s32.amax));
  EXPECT_EQ(s16.min_nonzero, s32.min_nonzero);
  EXPECT_EQ(s16.underflow, s32.underflow);
  EXPECT_EQ(s16.saturated, s32.saturated);
  EXPECT_GT(s16.underflow, 0);
  // A NaN is the amax (it stays), and is no minimum, underflow or saturation.
  std::vector<float> y = {kNaN, 0.25f, 0.0f};
  std::vector<std::uint8_t> codes(3);
  const float scale = 1.0f;
  Fp8CastStats stats;
  be->quantize(fp32(y.data()), {codes.data(), DType::e4m3, const_cast<float*>(&scale)}, y.size(), &stats, nullptr);
  EXPECT_TRUE(std::isnan(stats.amax));
  EXPECT_EQ(stats.min_nonzero, 0.25f);
  EXPECT_EQ(stats.underflow, 0);
  EXPECT_EQ(stats.saturated, 0);
  EXPECT_THROW(be->quantize(fp32(y.data()), {codes.data(), DType::bf16}, y.size(), &stats, nullptr), Error);
}

TEST_F(CpuFp8, PackAndUnpackRefuseAnFp8TensorWithoutAScale) {
  std::vector<float> x = {1.0f, 2.0f};
  std::vector<std::uint8_t> codes(2);
  EXPECT_THROW(be->pack(x.data(), {codes.data(), DType::e4m3}, x.size()), Error);
  EXPECT_THROW(be->unpack({codes.data(), DType::e5m2}, x.data(), x.size()), Error);
}

// Fp8 codes of a stored fp32 matrix, quantized with `scale` (NaN padding gives NaN codes).
std::vector<std::uint8_t> codes_of(Backend& be, const Stored& s, DType t, const float& scale) {
  std::vector<std::uint8_t> codes(s.data.size());
  be.pack(s.data.data(), {codes.data(), t, const_cast<float*>(&scale)}, s.data.size());
  return codes;
}

struct Product {
  const char* name;
  int M, N, K;
  DType ta_type, tb_type;
};

// The double product of the decoded values times the inverse scales, and fp32 summation's bound:
// K - 1 roundings of the sum, the factor's two and the final product's, (K + 3) u of the magnitude.
void expected(const std::vector<float>& a, const std::vector<float>& b, int M, int N, int K, Fp8Format fa, float sa,
              Fp8Format fb, float sb, float alpha, std::vector<double>& value, std::vector<double>& bound) {
  value.assign(std::size_t(M) * N, 0);
  bound.assign(std::size_t(M) * N, 0);
  const double factor = double(alpha) / (double(sa) * double(sb)), u = std::ldexp(1.0, -24);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(fp8_to_float(fa, float_to_fp8(fa, a[std::size_t(i) * K + k] * sa))) *
                         double(fp8_to_float(fb, float_to_fp8(fb, b[std::size_t(k) * N + j] * sb)));
        sum += p;
        magnitude += std::fabs(p);
      }
      value[std::size_t(i) * N + j] = sum * factor;
      bound[std::size_t(i) * N + j] = (K + 3) * u * magnitude * std::fabs(factor) + 1e-37;
    }
}

// The linear's products at small transformer shapes, forward E4M3 x E4M3, dgrad and wgrad E5M2 x E4M3,
// with scales from the amaxes (margin 0), in all four layouts, beta 0 (C poisoned) and beta 1.
TEST_F(CpuFp8, GemmOfFp8OperandsAgreesWithTheDoubleProductAndTheReference) {
  KeyedRandom random(9, "cpu fp8 gemm");
  const Product products[] = {{"forward", 37, 40, 48, DType::e4m3, DType::e4m3},
                              {"dgrad", 37, 48, 40, DType::e5m2, DType::e4m3},
                              {"wgrad", 40, 48, 37, DType::e5m2, DType::e4m3}};
  for (const Product& p : products) {
    const std::vector<float> a = random_matrix(random, std::size_t(p.M) * p.K, 3.0),
                             b = random_matrix(random, std::size_t(p.K) * p.N, 1.0);
    const Fp8Format fa = fp8_format(p.ta_type), fb = fp8_format(p.tb_type);
    const float sa = fp8_max(fa) / amax_of(a), sb = fp8_max(fb) / amax_of(b), alpha = 0.75f;
    std::vector<double> value, bound;
    expected(a, b, p.M, p.N, p.K, fa, sa, fb, sb, alpha, value, bound);
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const Stored A = store(a, p.M, p.K, ta, 3), B = store(b, p.K, p.N, tb, 2);
        const std::vector<std::uint8_t> ca = codes_of(*be, A, p.ta_type, sa), cb = codes_of(*be, B, p.tb_type, sb);
        const int ldc = p.N + 1;
        std::vector<float> C(std::size_t(p.M) * ldc, kNaN), R(std::size_t(p.M) * p.N);
        be->gemm(p.ta_type, ta ? Trans::yes : Trans::no, tb ? Trans::yes : Trans::no, p.M, p.N, p.K, alpha,
                 {ca.data(), p.ta_type, &sa}, A.ld, {cb.data(), p.tb_type, &sb}, B.ld, 0.0f, C.data(), ldc);
        fp8_gemm_reference(p.M, p.N, p.K, alpha, {A.data.data(), A.ld, ta, fa, sa}, {B.data.data(), B.ld, tb, fb, sb},
                           0.0f, R.data(), p.N);
        double worst = 0;
        for (int i = 0; i < p.M; ++i) {
          for (int j = 0; j < p.N; ++j) {
            const std::size_t at = std::size_t(i) * p.N + j;
            const double got = C[std::size_t(i) * ldc + j];
            ASSERT_LE(std::fabs(got - value[at]), bound[at]) << p.name << " " << ta << tb << " (" << i << ", " << j << ")";
            ASSERT_LE(std::fabs(got - double(R[at])), 2 * bound[at]) << p.name << " vs the reference";
            worst = std::max(worst, std::fabs(got - value[at]));
          }
          ASSERT_TRUE(std::isnan(C[std::size_t(i) * ldc + p.N])) << "C's padding is left alone";
        }
        EXPECT_GT(worst, 0.0) << p.name << ": some fp32 sum rounds (else the bound is not exercised)";
        // beta 1 adds the product to C
        std::vector<float> D(std::size_t(p.M) * ldc, 2.0f);
        be->gemm(p.ta_type, ta ? Trans::yes : Trans::no, tb ? Trans::yes : Trans::no, p.M, p.N, p.K, alpha,
                 {ca.data(), p.ta_type, &sa}, A.ld, {cb.data(), p.tb_type, &sb}, B.ld, 1.0f, D.data(), ldc);
        for (int i = 0; i < p.M; ++i)
          for (int j = 0; j < p.N; ++j) {
            const std::size_t at = std::size_t(i) * p.N + j;
            ASSERT_LE(std::fabs(double(D[std::size_t(i) * ldc + j]) - (value[at] + 2.0)), bound[at] + 4.0 * 0x1p-24)
                << p.name << " beta 1";
          }
      }
  }
}

// The bands of C depend on the shape alone: one thread and two give the same bits (M large enough
// for several bands).
TEST_F(CpuFp8, GemmOfFp8OperandsGivesTheSameBitsForAnyThreadCount) {
  KeyedRandom random(4, "cpu fp8 threads");
  const int M = 600, N = 96, K = 130;
  const std::vector<float> a = random_matrix(random, std::size_t(M) * K, 2.0), b = random_matrix(random, std::size_t(K) * N, 2.0);
  const float sa = 448.0f / amax_of(a), sb = 57344.0f / amax_of(b);
  const Stored A = store(a, M, K, false, 0), B = store(b, K, N, true, 0);
  const std::vector<std::uint8_t> ca = codes_of(*be, A, DType::e4m3, sa), cb = codes_of(*be, B, DType::e5m2, sb);
  std::vector<std::vector<float>> C(2, std::vector<float>(std::size_t(M) * N));
  for (int threads : {1, 2}) {
    be->set_threads(threads);
    be->gemm(DType::e4m3, Trans::no, Trans::yes, M, N, K, 1.0f, {ca.data(), DType::e4m3, &sa}, K,
             {cb.data(), DType::e5m2, &sb}, K, 0.0f, C[threads - 1].data(), N);
  }
  for (std::size_t i = 0; i < C[0].size(); ++i) ASSERT_EQ(float_bits(C[0][i]), float_bits(C[1][i])) << i;
}

TEST_F(CpuFp8, GemmRefusesMixingFp8WithOtherTypesAndAnOperandWithoutAScale) {
  std::vector<std::uint8_t> a(4, 0x38);
  std::vector<float> b(4, 1.0f), c(4);
  const float one = 1.0f;
  EXPECT_THROW(be->gemm(DType::e4m3, Trans::no, Trans::no, 2, 2, 2, 1.0f, {a.data(), DType::e4m3, &one}, 2,
                        fp32(b.data()), 2, 0.0f, c.data(), 2),
               Error);
  EXPECT_THROW(be->gemm(DType::bf16, Trans::no, Trans::no, 2, 2, 2, 1.0f, {a.data(), DType::e4m3, &one}, 2,
                        {a.data(), DType::e4m3, &one}, 2, 0.0f, c.data(), 2),
               Error);
  EXPECT_THROW(be->gemm(DType::e4m3, Trans::no, Trans::no, 2, 2, 2, 1.0f, {a.data(), DType::e4m3}, 2,
                        {a.data(), DType::e4m3, &one}, 2, 0.0f, c.data(), 2),
               Error);
  be->gemm(DType::e4m3, Trans::no, Trans::no, 2, 2, 2, 1.0f, {a.data(), DType::e4m3, &one}, 2,
           {a.data(), DType::e4m3, &one}, 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c[0], 2.0f) << "0x38 is 1.0 in E4M3";
  EXPECT_NE(be->gemm_engine(DType::e4m3).find("FP8"), std::string::npos);
}

}  // namespace
}  // namespace avtrain
