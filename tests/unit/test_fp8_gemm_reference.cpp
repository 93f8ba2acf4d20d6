// The CPU's emulated FP8 product against a double-precision product of the decoded fp8 values: within
// the bound of fp32 summation, exactly where the fp32 sum is exact, the same bits for every storage
// layout (padding poisoned with NaN, never read), saturation at the formats' largest values, the
// operands' amaxes, and beta accumulating.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/keyed_random.hpp"
#include "precision/fp8_gemm_reference.hpp"
#include "fp8_test_matrices.hpp"

namespace avtrain {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A logical rows x cols matrix stored row-major with leading dimension ld (padding NaN), or
// transposed.
struct Stored {
  std::vector<float> data;
  int ld;
  bool transposed;
};

Stored store(const std::vector<float>& m, int rows, int cols, bool transposed, int pad) {
  const int stored_rows = transposed ? cols : rows, stored_cols = transposed ? rows : cols;
  Stored s{std::vector<float>(std::size_t(stored_rows) * (stored_cols + pad), kNaN), stored_cols + pad, transposed};
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const std::size_t at = transposed ? std::size_t(c) * s.ld + r : std::size_t(r) * s.ld + c;
      s.data[at] = m[std::size_t(r) * cols + c];
    }
  return s;
}

Fp8GemmOperand operand(const Stored& s, Fp8Format f, float scale) {
  return {s.data.data(), s.ld, s.transposed, f, scale};
}

struct Expected {
  std::vector<double> value;  // the double product of the decoded values, times the inverse scales
  std::vector<double> bound;  // fp32 summation's error bound for each element
};

// The product from the decoded values, in double: independent of the order the code sums in.
Expected reference(const std::vector<float>& a, const std::vector<float>& b, int M, int N, int K, Fp8Format fa,
                   float sa, Fp8Format fb, float sb, float alpha) {
  Expected e{std::vector<double>(std::size_t(M) * N), std::vector<double>(std::size_t(M) * N)};
  const double factor = double(alpha) / (double(sa) * double(sb));
  const double u = std::ldexp(1.0, -24);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(fp8_to_float(fa, float_to_fp8(fa, a[std::size_t(i) * K + k] * sa))) *
                         double(fp8_to_float(fb, float_to_fp8(fb, b[std::size_t(k) * N + j] * sb)));
        sum += p;
        magnitude += std::fabs(p);
      }
      e.value[std::size_t(i) * N + j] = sum * factor;
      // K-1 roundings of the sum, the factor's two and the final product's: (K + 3) u of the magnitude
      e.bound[std::size_t(i) * N + j] = (K + 3) * u * magnitude * std::fabs(factor) + 1e-37;
    }
  return e;
}

// A linear's three products at a transformer's shapes: forward x (E4M3) times W^T (E4M3), dgrad
// dy (E5M2) times W, wgrad dy^T times x; delayed scales from the amaxes, as the recipe gives them.
TEST(Fp8GemmReference, TheLinearsProductsAgreeWithTheDoubleProductOfTheDecodedValues) {
  KeyedRandom random(5, "fp8 gemm");
  const int rows = 37, in = 48, out = 40;
  const std::vector<float> x = random_matrix(random, std::size_t(rows) * in, 2.0),
                           w = random_matrix(random, std::size_t(out) * in, 1.0),
                           dy = random_matrix(random, std::size_t(rows) * out, 4.0);
  auto scale_for = [](Fp8Format f, const std::vector<float>& m) { return fp8_max(f) / amax_of(m); };
  struct Case {
    const char* name;
    int M, N, K;
    std::vector<float> a, b;  // logical M x K and K x N
    Fp8Format fa, fb;
    bool ta, tb;
  };
  auto transpose = [](const std::vector<float>& m, int rows, int cols) {
    std::vector<float> t(m.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) t[std::size_t(c) * rows + r] = m[std::size_t(r) * cols + c];
    return t;
  };
  const Case cases[] = {
      {"forward y = x W^T", rows, out, in, x, transpose(w, out, in), Fp8Format::e4m3, Fp8Format::e4m3, false, true},
      {"dgrad dx = dy W", rows, in, out, dy, w, Fp8Format::e5m2, Fp8Format::e4m3, false, false},
      {"wgrad dW = dy^T x", out, in, rows, transpose(dy, rows, out), x, Fp8Format::e5m2, Fp8Format::e4m3, true,
       false}};
  for (const Case& c : cases) {
    const float sa = scale_for(c.fa, c.a), sb = scale_for(c.fb, c.b), alpha = 1.0f;
    const Stored A = store(c.a, c.M, c.K, c.ta, 3), B = store(c.b, c.K, c.N, c.tb, 5);
    std::vector<float> C(std::size_t(c.M) * c.N, kNaN);  // beta 0: C is not read
    const Fp8GemmAmax amax =
        fp8_gemm_reference(c.M, c.N, c.K, alpha, operand(A, c.fa, sa), operand(B, c.fb, sb), 0.0f, C.data(), c.N);
    EXPECT_EQ(amax.a, amax_of(c.a)) << c.name;
    EXPECT_EQ(amax.b, amax_of(c.b)) << c.name;
    const Expected e = reference(c.a, c.b, c.M, c.N, c.K, c.fa, sa, c.fb, sb, alpha);
    double worst = 0;
    for (std::size_t i = 0; i < C.size(); ++i) {
      ASSERT_LE(std::fabs(double(C[i]) - e.value[i]), e.bound[i]) << c.name << " element " << i;
      worst = std::max(worst, std::fabs(double(C[i]) - e.value[i]) / e.bound[i]);
    }
    EXPECT_GT(worst, 0.0) << c.name << ": some fp32 sum rounds (else the bound is not exercised)";
    // The same bits from every layout of the operands.
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        const Stored A2 = store(c.a, c.M, c.K, ta, 0), B2 = store(c.b, c.K, c.N, tb, 1);
        std::vector<float> C2(std::size_t(c.M) * (c.N + 2), -1.0f);
        fp8_gemm_reference(c.M, c.N, c.K, alpha, operand(A2, c.fa, sa), operand(B2, c.fb, sb), 0.0f, C2.data(),
                           c.N + 2);
        for (int i = 0; i < c.M; ++i)
          for (int j = 0; j < c.N; ++j)
            ASSERT_EQ(float_bits(C2[std::size_t(i) * (c.N + 2) + j]), float_bits(C[std::size_t(i) * c.N + j]))
                << c.name << " layout " << ta << tb;
        EXPECT_EQ(C2[c.N], -1.0f) << "past N: not written";
      }
  }
}

// Small integers are exact in both formats and their sums exact in fp32: the product is exact, and
// the scales (powers of two) come back out exactly.
TEST(Fp8GemmReference, ExactWhereTheSumIsExact) {
  const int M = 2, N = 3, K = 4;
  const std::vector<float> a = {1, 2, 3, 4, -5, 6, -7, 8};
  const std::vector<float> b = {1, 0, -1, 2, 1, 0, 3, 2, 1, -4, 3, 2};
  const Stored A = store(a, M, K, false, 0), B = store(b, K, N, false, 0);
  std::vector<float> C(M * N);
  fp8_gemm_reference(M, N, K, 2.0f, operand(A, Fp8Format::e4m3, 4.0f), operand(B, Fp8Format::e5m2, 0.5f), 0.0f,
                     C.data(), N);
  const std::vector<float> want = {2 * (1 + 4 + 9 - 16), 2 * (0 + 2 + 6 + 12), 2 * (-1 + 0 + 3 + 8),
                                   2 * (-5 + 12 - 21 - 32), 2 * (0 + 6 - 14 + 24), 2 * (5 + 0 - 7 + 16)};
  EXPECT_EQ(C, want);
}

// Values beyond the format's largest (after scaling) saturate to it; beta accumulates into C.
TEST(Fp8GemmReference, SaturationAndBeta) {
  const std::vector<float> a = {1000.0f, -1e30f}, b = {1.0f, 1.0f};  // 1 x 2 times 2 x 1
  const Stored A = store(a, 1, 2, false, 0), B = store(b, 2, 1, false, 0);
  float c = 0;
  const Fp8GemmAmax amax =
      fp8_gemm_reference(1, 1, 2, 1.0f, operand(A, Fp8Format::e4m3, 1.0f), operand(B, Fp8Format::e4m3, 1.0f),
                         0.0f, &c, 1);
  EXPECT_EQ(c, 448.0f - 448.0f);
  EXPECT_EQ(amax.a, 1e30f);
  const std::vector<float> a2 = {1000.0f, 70000.0f};
  const Stored A2 = store(a2, 1, 2, false, 0);
  fp8_gemm_reference(1, 1, 2, 1.0f, operand(A2, Fp8Format::e5m2, 1.0f), operand(B, Fp8Format::e4m3, 1.0f), 0.0f,
                     &c, 1);
  EXPECT_EQ(c, 1024.0f + 57344.0f);  // 1000 rounds to 1024 in E5M2, 70000 saturates
  c = 10.0f;
  fp8_gemm_reference(1, 1, 2, 1.0f, operand(A2, Fp8Format::e5m2, 1.0f), operand(B, Fp8Format::e4m3, 1.0f), 0.5f,
                     &c, 1);
  EXPECT_EQ(c, 1024.0f + 57344.0f + 5.0f);
}

TEST(Fp8GemmReference, ANaNInAnOperandShowsInItsAmaxAndBadShapesAreRefused) {
  const std::vector<float> a = {1.0f, kNaN, 2.0f, 3.0f}, b = {1.0f, 2.0f};
  const Stored A = store(a, 2, 2, false, 0), B = store(b, 2, 1, false, 0);
  std::vector<float> C(2);
  const Fp8GemmAmax amax =
      fp8_gemm_reference(2, 1, 2, 1.0f, operand(A, Fp8Format::e4m3, 1.0f), operand(B, Fp8Format::e4m3, 1.0f),
                         0.0f, C.data(), 1);
  EXPECT_TRUE(std::isnan(amax.a));
  EXPECT_EQ(amax.b, 2.0f);
  EXPECT_TRUE(std::isnan(C[0]));
  EXPECT_EQ(C[1], 8.0f);
  EXPECT_THROW(fp8_gemm_reference(2, 1, 2, 1.0f, {a.data(), 1, false, Fp8Format::e4m3, 1.0f},
                                  operand(B, Fp8Format::e4m3, 1.0f), 0.0f, C.data(), 1),
               Error);
  EXPECT_THROW(fp8_gemm_reference(-1, 1, 2, 1.0f, operand(A, Fp8Format::e4m3, 1.0f),
                                  operand(B, Fp8Format::e4m3, 1.0f), 0.0f, C.data(), 1),
               Error);
}

}  // namespace
}  // namespace avtrain
