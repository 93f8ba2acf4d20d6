// Every CPU kernel against a plain double-precision reference written here, on random inputs.
// Outputs start as NaN so an element a kernel forgets to write fails the comparison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "backend/cpu/vector_math.hpp"
#include "core/keyed_random.hpp"
#include "model/log_mel_frontend.hpp"

namespace avtrain {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_floats(std::size_t n, const std::string& key, double low = -1.0, double high = 1.0) {
  KeyedRandom rng(11, key);
  std::vector<float> x(n);
  for (float& v : x) v = float(rng.uniform(low, high));
  return x;
}

std::vector<float> poisoned(std::size_t n) { return std::vector<float>(n, kNaN); }

// Each got[i] within atol + rtol * |want[i]|; a NaN never is.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                                     double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::fabs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_equal(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i]))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

class CpuKernels : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

// ---------------------------------------------------------------- matrix products

struct GemmCase {
  Trans ta, tb;
  float beta;
  int M = 5, N = 7, K = 6;  // large cases take the backend's threaded path (bands of rows or columns)
};

class CpuGemm : public CpuKernels, public ::testing::WithParamInterface<GemmCase> {};

// Row-major op(A)[i, k] for A stored with leading dimension lda.
double op_at(const std::vector<float>& A, Trans t, int lda, int i, int k) {
  return t == Trans::no ? A[std::size_t(i) * lda + k] : A[std::size_t(k) * lda + i];
}

TEST_P(CpuGemm, MatchesReferenceWithPaddedLeadingDimensionsAndLeavesPaddingAlone) {
  const auto [ta, tb, beta, M, N, K] = GetParam();
  const float alpha = 1.5f;
  const int lda = (ta == Trans::no ? K : M) + 3, ldb = (tb == Trans::no ? N : K) + 2, ldc = N + 4;
  const auto A = random_floats(std::size_t(ta == Trans::no ? M : K) * lda, "gemm.A");
  const auto B = random_floats(std::size_t(tb == Trans::no ? K : N) * ldb, "gemm.B");
  const auto C0 = random_floats(std::size_t(M) * ldc, "gemm.C");
  // With beta 0, C's old contents must not matter: NaN there must not leak into the result.
  std::vector<float> C = beta == 0.0f ? poisoned(C0.size()) : C0;
  be->gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);

  std::vector<float> got;
  std::vector<double> want;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double dot = 0;
      for (int k = 0; k < K; ++k) dot += op_at(A, ta, lda, i, k) * op_at(B, tb, ldb, k, j);
      got.push_back(C[std::size_t(i) * ldc + j]);
      want.push_back(alpha * dot + (beta == 0.0f ? 0.0 : beta * C0[std::size_t(i) * ldc + j]));
    }
  EXPECT_TRUE(all_close(got, want, 1e-4, 1e-5));
  for (int i = 0; i < M; ++i)
    for (int j = N; j < ldc; ++j) {
      const float before = beta == 0.0f ? kNaN : C0[std::size_t(i) * ldc + j];
      const float after = C[std::size_t(i) * ldc + j];
      EXPECT_TRUE(after == before || (std::isnan(after) && std::isnan(before))) << "padding (" << i << "," << j << ")";
    }
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  for (Trans ta : {Trans::no, Trans::yes})
    for (Trans tb : {Trans::no, Trans::yes})
      for (float beta : {0.0f, 1.0f}) {
        cases.push_back({ta, tb, beta});
        cases.push_back({ta, tb, beta, 301, 67, 150});  // tall: split by rows
        cases.push_back({ta, tb, beta, 41, 203, 260});  // wide: split by columns
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, CpuGemm, ::testing::ValuesIn(gemm_cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           const GemmCase& c = info.param;
                           return std::string(c.ta == Trans::yes ? "At" : "A") + (c.tb == Trans::yes ? "Bt" : "B") +
                                  (c.beta == 0.0f ? "_beta0_" : "_beta1_") + std::to_string(c.M) + "x" +
                                  std::to_string(c.N) + "x" + std::to_string(c.K);
                         });

// 16-bit products: A stored as 16-bit patterns, B as fp32 values exact in the type (both forms a
// layer passes), accumulated in fp32 — against a double reference of the same values.
class CpuGemm16 : public CpuKernels, public ::testing::WithParamInterface<std::tuple<DType, GemmCase>> {};

TEST_P(CpuGemm16, MatchesReferenceOfTheRoundedValues) {
  const auto [dtype, c] = GetParam();
  const auto [ta, tb, beta, M, N, K] = c;
  const int lda = ta == Trans::no ? K : M, ldb = tb == Trans::no ? N : K, ldc = N;
  std::vector<float> A = random_floats(std::size_t(ta == Trans::no ? M : K) * lda, "gemm16.A");
  std::vector<float> B = random_floats(std::size_t(tb == Trans::no ? K : N) * ldb, "gemm16.B");
  const auto C0 = random_floats(std::size_t(M) * ldc, "gemm16.C");
  std::vector<std::uint16_t> A16(A.size());
  be->round_to(rounded(A.data(), dtype, A16.data()), A.size());
  be->round_to(rounded(B.data(), dtype), B.size());
  std::vector<float> C = beta == 0.0f ? poisoned(C0.size()) : C0;
  be->gemm(dtype, ta, tb, M, N, K, 0.5f, Operand{A16.data(), dtype}, lda, fp32(B.data()), ldb, beta, C.data(), ldc);
  std::vector<double> want;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double dot = 0;
      for (int k = 0; k < K; ++k) dot += op_at(A, ta, lda, i, k) * op_at(B, tb, ldb, k, j);
      want.push_back(0.5 * dot + (beta == 0.0f ? 0.0 : beta * C0[std::size_t(i) * ldc + j]));
    }
  EXPECT_TRUE(all_close(C, want, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Fp16AndBf16, CpuGemm16,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16), ::testing::ValuesIn(gemm_cases())));

// Each operand is taken in the compute type: a 16-bit operand of an fp32 product widened (a module of
// precision.fp32_layers reading a 16-bit module's output), an fp32 operand of a 16-bit product rounded
// to nearest even (here not exact in the type: bf16 on this CPU's engine, fp16 on sgemm's path). The
// bits are those of the product given the converted values; a shape split into bands of rows.
TEST_F(CpuKernels, GemmTakesEachOperandInTheComputeType) {
  const int M = 301, N = 67, K = 150;
  const auto A = random_floats(std::size_t(M) * K, "convert.A"), B = random_floats(std::size_t(N) * K, "convert.B");
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<float> A_rounded = A, B_rounded = B, got(std::size_t(M) * N), want(got.size());
    std::vector<std::uint16_t> A16(A.size());
    be->round_to(rounded(A_rounded.data(), t, A16.data()), A.size());
    be->round_to(rounded(B_rounded.data(), t), B.size());
    // fp32 product, A stored in 16 bits: the fp32 product of its values.
    be->gemm(DType::f32, Trans::no, Trans::yes, M, N, K, 1.0f, Operand{A16.data(), t}, K, fp32(B.data()), K, 0.0f,
             got.data(), N);
    be->gemm(Trans::no, Trans::yes, M, N, K, 1.0f, A_rounded.data(), K, B.data(), K, 0.0f, want.data(), N);
    EXPECT_TRUE(all_equal(got, want));
    // 16-bit product, B in fp32 not exact in t: the product of B rounded to t, not of B as it is.
    be->gemm(t, Trans::no, Trans::yes, M, N, K, 1.0f, Operand{A16.data(), t}, K, fp32(B.data()), K, 0.0f,
             got.data(), N);
    be->gemm(t, Trans::no, Trans::yes, M, N, K, 1.0f, Operand{A16.data(), t}, K, fp32(B_rounded.data()), K, 0.0f,
             want.data(), N);
    EXPECT_TRUE(all_equal(got, want));
    EXPECT_FALSE(all_equal(B, B_rounded)) << "B exact in the type: the check would pass unrounded";
  }
}

TEST_F(CpuKernels, GemmRefusesAnOperandOfAnotherSixteenBitType) {
  std::vector<std::uint16_t> a(4);
  std::vector<float> b(4), c(4);
  EXPECT_THROW(be->gemm(DType::bf16, Trans::no, Trans::no, 2, 2, 2, 1.0f, Operand{a.data(), DType::f16}, 2,
                        fp32(b.data()), 2, 0.0f, c.data(), 2),
               Error);
}

// Conversions through the backend give the bits of core/half's scalar conversions.
TEST_F(CpuKernels, RoundPackAndUnpackGiveTheScalarConversions) {
  const auto x = random_floats(40000, "convert", -70000.0, 70000.0);  // overflows fp16 at the ends
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<float> r = x, back(x.size());
    std::vector<std::uint16_t> packed(x.size()), packed2(x.size());
    be->round_to(rounded(r.data(), t, packed.data()), r.size());
    be->pack(x.data(), {packed2.data(), t}, x.size());
    be->unpack({packed.data(), t}, back.data(), back.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint16_t want = t == DType::f16 ? float_to_half(x[i]) : float_to_bf16(x[i]);
      const float value = t == DType::f16 ? half_to_float(want) : bf16_to_float(want);
      ASSERT_EQ(packed[i], want) << x[i];
      ASSERT_EQ(packed2[i], want) << x[i];
      ASSERT_EQ(float_bits(r[i]), float_bits(value)) << x[i];
      ASSERT_EQ(float_bits(back[i]), float_bits(value)) << x[i];
    }
  }
}

// pack and unpack convert between fp32 and a stored type: fp32 is not one (a copy is `copy`), and
// round_to to fp32 leaves the values as they are.
TEST_F(CpuKernels, PackAndUnpackRefuseFp32AndRoundToFp32IsNothing) {
  std::vector<float> x = {1.0f + 1.0f / 1024, -3.0f}, y(2);
  std::vector<std::uint16_t> bits(2);
  EXPECT_THROW(be->pack(x.data(), {y.data(), DType::f32}, x.size()), Error);
  EXPECT_THROW(be->unpack(fp32(x.data()), y.data(), x.size()), Error);
  be->round_to(fp32_out(x.data()), x.size());
  EXPECT_EQ(x[0], 1.0f + 1.0f / 1024);
  be->round_to(rounded(x.data(), DType::bf16, bits.data()), x.size());
  EXPECT_EQ(x[0], 1.0f) << "bf16 keeps 8 bits of significand";
}

TEST_F(CpuKernels, GemmFlopsCountsTwoMNKPerProduct) {
  const auto A = random_floats(6 * 4, "flops.A"), B = random_floats(4 * 5, "flops.B");
  std::vector<float> C(6 * 5 * 3);
  EXPECT_EQ(be->gemm_flops(), 0.0);
  be->gemm(Trans::no, Trans::no, 6, 5, 4, 1.0f, A.data(), 4, B.data(), 5, 0.0f, C.data(), 5);
  EXPECT_EQ(be->gemm_flops(), 2.0 * 6 * 5 * 4);
}

// ---------------------------------------------------------------- elementwise and reductions

TEST_F(CpuKernels, FillRowsCopiesTheRowIntoEveryRow) {
  const int rows = 4, cols = 5;
  const auto row = random_floats(cols, "fill_rows");
  auto y = poisoned(std::size_t(rows) * cols);
  be->fill_rows(y.data(), row.data(), rows, cols);
  std::vector<float> want;
  for (int r = 0; r < rows; ++r) want.insert(want.end(), row.begin(), row.end());
  EXPECT_TRUE(all_equal(y, want));
}

TEST_F(CpuKernels, BiasGradAccumulatesColumnSumsAcrossColumnBands) {
  const int rows = 9, cols = 70;  // more than one 64-column band
  const auto dy = random_floats(std::size_t(rows) * cols, "bias_grad.dy");
  const auto db0 = random_floats(cols, "bias_grad.db");
  auto db = db0;
  be->bias_grad(fp32(dy.data()), db.data(), rows, cols);
  std::vector<double> want(cols);
  for (int c = 0; c < cols; ++c) {
    want[c] = db0[c];
    for (int r = 0; r < rows; ++r) want[c] += dy[std::size_t(r) * cols + c];
  }
  EXPECT_TRUE(all_close(db, want, 1e-6, 1e-6));
}

double gelu_reference(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_derivative_reference(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
}

TEST_F(CpuKernels, GeluForwardAndBackwardMatchTheErfFormula) {
  const std::size_t n = 4001;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = float(-8.0 + 16.0 * double(i) / double(n - 1));
  const auto dy = random_floats(n, "gelu.dy", 0.5, 2.0);
  auto y = poisoned(n), dx = poisoned(n);
  be->gelu_forward(x.data(), y.data(), n);
  be->gelu_backward(dy.data(), fp32(x.data()), dx.data(), n);
  // vmath::erf's absolute error (<= 3e-7) carries into 0.5 * x * erf, so the bound is relative
  // plus that absolute share: for x < 0 the result is a small difference of larger terms.
  for (std::size_t i = 0; i < n; ++i) {
    const double xi = x[i];
    const double want_y = gelu_reference(xi), want_dx = dy[i] * gelu_derivative_reference(xi);
    EXPECT_NEAR(y[i], want_y, 1e-6 * std::fabs(want_y) + 0.5 * std::fabs(xi) * 3e-7 + 1e-30) << "x = " << xi;
    EXPECT_NEAR(dx[i], want_dx, 1e-6 * std::fabs(want_dx) + dy[i] * (0.5 * 3e-7 + std::fabs(xi) * 1e-7) + 1e-30)
        << "x = " << xi;
  }
}

TEST(VectorMath, ExpRelativeErrorBelow4e7OverItsRange) {
  double worst = 0, where = 0;
  const int n = 200001;
  for (int i = 0; i < n; ++i) {
    const float x = float(-87.0 + 175.0 * double(i) / (n - 1));
    const double want = std::exp(double(x));
    const double rel = std::fabs(vmath::exp(x) - want) / want;
    if (rel > worst) worst = rel, where = x;
  }
  EXPECT_LE(worst, 4e-7) << "at x = " << where;
}

TEST(VectorMath, ErfAbsoluteErrorBelow3e7OverMinus6To6) {
  double worst = 0, where = 0;
  const int n = 120001;
  for (int i = 0; i < n; ++i) {
    const float x = float(-6.0 + 12.0 * double(i) / (n - 1));
    const double err = std::fabs(vmath::erf(x) - std::erf(double(x)));
    if (err > worst) worst = err, where = x;
  }
  EXPECT_LE(worst, 3e-7) << "at x = " << where;
}

TEST_F(CpuKernels, AbsMaxIsTheLargestMagnitude) {
  auto x = random_floats(1000, "abs_max");
  x[417] = -3.25f;
  EXPECT_EQ(be->abs_max(fp32(x.data()), x.size()), 3.25f);
}

TEST_F(CpuKernels, AbsMaxOfAllNegativeInputIsTheMostNegativeMagnitude) {
  auto x = random_floats(100, "abs_max.negative", -2.0, -0.5);
  x[3] = -2.5f;
  EXPECT_EQ(be->abs_max(fp32(x.data()), x.size()), 2.5f);
}

TEST_F(CpuKernels, AbsMaxOfPlusOrMinusInfinityIsInfinity) {
  for (float inf : {kInf, -kInf}) {
    auto x = random_floats(100, "abs_max.inf");
    x[50] = inf;
    EXPECT_EQ(be->abs_max(fp32(x.data()), x.size()), kInf) << inf;
  }
}

TEST_F(CpuKernels, AbsMaxIsNaNWhenANaNIsAnywhereEvenBesideInfinity) {
  // 70000 elements also take the OpenMP path.
  for (std::size_t n : {std::size_t(100), std::size_t(70000)})
    for (std::size_t at : {std::size_t(0), n / 2, n - 1}) {
      auto x = random_floats(n, "abs_max.nan");
      x[n / 3] = -kInf;
      x[at] = -kNaN;
      EXPECT_TRUE(std::isnan(be->abs_max(fp32(x.data()), n))) << "n " << n << " NaN at " << at;
    }
}

TEST_F(CpuKernels, AbsMaxOfNothingIsZero) {
  const float unused = 5.0f;
  EXPECT_EQ(be->abs_max(fp32(&unused), 0), 0.0f);
}

TEST_F(CpuKernels, AbsMaxIntoFoldsTheLargestMagnitudeAndKeepsNaN) {
  auto x = random_floats(1000, "abs_max_into");
  x[9] = -3.5f;
  float result = 0.0f;
  be->abs_max_into(fp32(x.data()), 500, &result);
  EXPECT_EQ(result, be->abs_max(fp32(x.data()), 500));
  be->abs_max_into(fp32(x.data()), x.size(), &result);
  EXPECT_EQ(result, 3.5f);
  result = 7.0f;
  be->abs_max_into(fp32(x.data()), x.size(), &result);
  EXPECT_EQ(result, 7.0f) << "a larger result already there stays";
  x[700] = kNaN;
  be->abs_max_into(fp32(x.data()), x.size(), &result);
  EXPECT_TRUE(std::isnan(result));
  be->abs_max_into(fp32(x.data()), 10, &result);
  EXPECT_TRUE(std::isnan(result)) << "a NaN result stays NaN";
}

// The 16-bit copy's |max| is that of the fp32 values rounded to the type (what layers.csv reported
// before the fused path kept only the copy): the same bits, overflow to inf and NaN included.
TEST_F(CpuKernels, AbsMaxOfSixteenBitPatternsGivesTheBitsOfTheirRoundedValues) {
  for (DType dtype : {DType::bf16, DType::f16})
    for (std::size_t n : {std::size_t(37), std::size_t(70001)}) {
      auto x = random_floats(n, "abs_max_16", -3.0, 3.0);
      x[n / 2] = dtype == DType::f16 ? 70000.0f : -2.5e38f;  // fp16 overflows to inf; bf16 stays finite
      std::vector<std::uint16_t> packed(n);
      be->round_to(rounded(x.data(), dtype, packed.data()), n);
      const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(n);
      EXPECT_EQ(be->abs_max(Operand{packed.data(), dtype}, n), be->abs_max(fp32(x.data()), n)) << what;
      EXPECT_EQ(be->abs_max(Operand{packed.data(), dtype}, n - 1), be->abs_max(fp32(x.data()), n - 1)) << what;
      float into16 = 0.5f, into32 = 0.5f;
      be->abs_max_into(Operand{packed.data(), dtype}, n, &into16);
      be->abs_max_into(fp32(x.data()), n, &into32);
      EXPECT_EQ(into16, into32) << what;
      x[3] = kNaN;
      be->round_to(rounded(x.data(), dtype, packed.data()), n);
      EXPECT_TRUE(std::isnan(be->abs_max(Operand{packed.data(), dtype}, n))) << what;
      be->abs_max_into(Operand{packed.data(), dtype}, n, &into16);
      EXPECT_TRUE(std::isnan(into16)) << what;
    }
  const float values[] = {0.5f, -4.0f};
  EXPECT_EQ(be->abs_max(fp32(values), 2), 4.0f) << "an fp32 operand is abs_max of its values";
}

TEST_F(CpuKernels, SumSquaresIntoAddsTheSameBitsAsSumSquares) {
  const auto x = random_floats(70000, "sum_squares_into", -3.0, 3.0);
  double result = 1.25;
  be->sum_squares_into(x.data(), x.size(), &result);
  EXPECT_EQ(result, 1.25 + be->sum_squares(x.data(), x.size()));
}

TEST_F(CpuKernels, TensorStatsManyGivesEachSpanTheBitsOfTensorStats) {
  auto x = random_floats(200000, "tensor_stats_many", -2.0, 2.0);
  x[5] = 0.0f;
  x[150000] = kInf;
  x[70001] = std::ldexp(1.0f, -30);
  const std::vector<Backend::Span> spans = {{0, 100}, {100, 0}, {100, 70000}, {70100, 129900}, {50, 10}};
  std::vector<Backend::TensorStats> many(spans.size());
  const float threshold = std::ldexp(1.0f, -24);
  be->tensor_stats_many(x.data(), spans.data(), int(spans.size()), threshold, many.data());
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const auto one = be->tensor_stats(x.data() + spans[i].offset, spans[i].size, threshold);
    if (std::isfinite(one.sum_squares)) {
      EXPECT_EQ(many[i].sum_squares, one.sum_squares) << "span " << i;
    }
    EXPECT_EQ(std::isfinite(many[i].sum_squares), std::isfinite(one.sum_squares)) << "span " << i;
    EXPECT_EQ(many[i].nonfinite, one.nonfinite) << "span " << i;
    EXPECT_EQ(many[i].nonzero, one.nonzero) << "span " << i;
    EXPECT_EQ(many[i].below, one.below) << "span " << i;
  }
  EXPECT_EQ(many[3].nonfinite, 1u);
  EXPECT_EQ(many[2].below, 1u);
}

TEST_F(CpuKernels, SumSquaresMatchesDoubleReference) {
  const auto x = random_floats(5000, "sum_squares", -3.0, 3.0);
  double want = 0;
  for (float v : x) want += double(v) * v;
  EXPECT_NEAR(be->sum_squares(x.data(), x.size()), want, 1e-12 * want);
}

TEST_F(CpuKernels, TensorStatsCountsNonzeroAndBelowThresholdWithSubnormalsAndTheExactThreshold) {
  const float threshold = std::ldexp(1.0f, -24);
  const float subnormal = std::numeric_limits<float>::denorm_min() * 7;
  // below: nonzero and strictly under the threshold; the threshold itself is not below.
  const std::vector<float> x = {0.0f, 1.5f, -2.0f, threshold, -threshold, std::ldexp(1.0f, -25), subnormal,
                                -subnormal, -0.0f, std::nextafter(threshold, 0.0f), 3.0f};
  const auto s = be->tensor_stats(x.data(), x.size(), threshold);
  double want_ss = 0;
  for (float v : x) want_ss += double(v) * v;
  EXPECT_DOUBLE_EQ(s.sum_squares, want_ss);
  EXPECT_EQ(s.nonfinite, 0u);
  EXPECT_EQ(s.nonzero, 9u);
  EXPECT_EQ(s.below, 4u);
}

TEST_F(CpuKernels, TensorStatsCountsInfinitiesAndNaNAsNonfiniteAndNotAsBelow) {
  auto x = random_floats(70000, "tensor_stats", 1.0, 2.0);  // all finite, none below
  x[10] = kInf;
  x[20000] = -kInf;
  x[69999] = kNaN;
  const auto s = be->tensor_stats(x.data(), x.size(), std::ldexp(1.0f, -24));
  EXPECT_EQ(s.nonfinite, 3u);
  EXPECT_EQ(s.below, 0u);
  EXPECT_FALSE(std::isfinite(s.sum_squares));
}

// ---------------------------------------------------------------- normalisation

TEST_F(CpuKernels, LayerNormForwardMatchesReference) {
  const int rows = 6, dim = 37;
  const float eps = 1e-5f;
  const auto x = random_floats(std::size_t(rows) * dim, "ln.x", 2.0, 5.0);  // mean far from 0
  const auto gamma = random_floats(dim, "ln.gamma", 0.5, 1.5), beta = random_floats(dim, "ln.beta");
  auto y = poisoned(x.size()), mean = poisoned(rows), rstd = poisoned(rows);
  be->layernorm_forward(x.data(), gamma.data(), beta.data(), fp32_out(y.data()), mean.data(), rstd.data(), rows, dim, eps);
  std::vector<double> want_y, want_mean, want_rstd;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + std::size_t(r) * dim;
    double mu = 0, var = 0;
    for (int i = 0; i < dim; ++i) mu += xr[i];
    mu /= dim;
    for (int i = 0; i < dim; ++i) var += (xr[i] - mu) * (xr[i] - mu);
    const double rs = 1.0 / std::sqrt(var / dim + eps);
    for (int i = 0; i < dim; ++i) want_y.push_back((xr[i] - mu) * rs * gamma[i] + beta[i]);
    want_mean.push_back(mu);
    want_rstd.push_back(rs);
  }
  EXPECT_TRUE(all_close(y, want_y, 2e-5, 2e-5));
  EXPECT_TRUE(all_close(mean, want_mean, 0, 1e-6));
  EXPECT_TRUE(all_close(rstd, want_rstd, 0, 2e-5));
}

// gelu_backward and layernorm_backward take x as a kept 16-bit copy (its patterns, read as they are)
// or as fp32 values: the same bits, in bf16 and fp16; so do the fused defaults built on them.
TEST_F(CpuKernels, GeluAndLayerNormBackwardRead16BitInputsAsTheirValues) {
  const int rows = 40, dim = 96;
  const std::size_t n = std::size_t(rows) * dim;
  const auto x0 = random_floats(n, "ln16.x", 2.0, 5.0), dy = random_floats(n, "ln16.dy");
  const auto gamma = random_floats(dim, "ln16.gamma", 0.5, 1.5), beta = random_floats(dim, "ln16.beta");
  for (const DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<float> x = x0, y(n), mean(rows), rstd(rows);
    std::vector<std::uint16_t> x_bits(n);
    be->round_to(rounded(x.data(), t, x_bits.data()), n);
    be->layernorm_forward(x.data(), gamma.data(), beta.data(), fp32_out(y.data()), mean.data(), rstd.data(), rows, dim, 1e-5f);
    std::vector<float> results[2];
    for (int k = 0; k < 2; ++k) {
      const Operand xin = k == 0 ? fp32(x.data()) : Operand{x_bits.data(), t};
      std::vector<float> gdx(n), gdx_rounded(n), ldx(n), dgamma(dim, 0.5f), dbeta(dim, 0.25f);
      std::vector<std::uint16_t> gdx16(n);
      be->gelu_backward(dy.data(), xin, gdx.data(), n);
      be->gelu_backward_round(dy.data(), xin, rounded(gdx_rounded.data(), t, gdx16.data()), n);
      be->layernorm_backward(dy.data(), xin, gamma.data(), mean.data(), rstd.data(), ldx.data(), dgamma.data(),
                             dbeta.data(), rows, dim);
      std::vector<float> rounded = gdx;
      std::vector<std::uint16_t> rounded16(n);
      be->round_to(avtrain::rounded(rounded.data(), t, rounded16.data()), n);
      EXPECT_EQ(std::memcmp(rounded.data(), gdx_rounded.data(), n * sizeof(float)), 0) << "gelu_backward_round";
      EXPECT_TRUE(rounded16 == gdx16) << "gelu_backward_round's patterns";
      for (const auto* part : {&gdx, &ldx, &dgamma, &dbeta}) results[k].insert(results[k].end(), part->begin(), part->end());
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)), 0);
  }
}

// The CPU backend fuses linear_forward, linear_gelu_forward, add_round and gelu_backward_round (bias,
// rounding and GELU on each band of the product's rows, or chunk by chunk): each must give the bits of
// the composed default (Backend::, the separate ops) in every type, with NaN, inf and overflow among
// the inputs, on products banded by rows and by columns, and must write every element (the outputs
// start as different poison on the two sides).
TEST_F(CpuKernels, FusedPassesGiveTheComposedBits) {
  struct Shape {
    int rows, in, out;
  };
  for (const DType t : {DType::f32, DType::bf16, DType::f16}) {
    for (const Shape s : {Shape{300, 40, 72}, Shape{1000, 128, 260}, Shape{50, 24, 90}, Shape{7, 5, 3}}) {
      for (const bool with_bias : {true, false}) {
        for (const bool x_16 : {true, false}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(s.rows) + " in " + std::to_string(s.in) +
                       " out " + std::to_string(s.out) + (with_bias ? " bias" : "") + (x_16 ? " x16" : " x32"));
          const std::size_t nx = std::size_t(s.rows) * s.in, nw = std::size_t(s.out) * s.in,
                            ny = std::size_t(s.rows) * s.out;
          std::vector<float> x = random_floats(nx, "fused.x", -3.0, 3.0), w = random_floats(nw, "fused.w");
          const auto bias = random_floats(s.out, "fused.bias");
          x[1] = kNaN;               // row 0: NaN throughout
          x[nx - 1] = 3e38f;         // the last row: inf and NaN
          if (s.rows > 2) x[s.in + 2] = 9000.0f;  // row 1: overflows fp16
          std::vector<std::uint16_t> x16(nx), w16(nw);
          be->round_to(rounded(x.data(), t == DType::f32 ? DType::bf16 : t, x16.data()), nx);
          be->round_to(rounded(w.data(), t == DType::f32 ? DType::bf16 : t, w16.data()), nw);
          const Operand xo = t != DType::f32 && x_16 ? Operand{x16.data(), t} : fp32(x.data());
          const Operand wo = t != DType::f32 ? Operand{w16.data(), t} : fp32(w.data());
          const float* b = with_bias ? bias.data() : nullptr;
          std::vector<float> y1(ny, kNaN), y2(ny, 0.0f), g1(ny, kNaN), g2(ny, 0.0f);
          std::vector<std::uint16_t> y1_16(ny, 0xffff), y2_16(ny, 0), g1_16(ny, 0xffff), g2_16(ny, 0);
          const bool sixteen = t != DType::f32;
          be->linear_forward(t, xo, wo, b, rounded(y1.data(), t, sixteen ? y1_16.data() : nullptr), s.rows, s.in, s.out);
          be->Backend::linear_forward(t, xo, wo, b, rounded(y2.data(), t, sixteen ? y2_16.data() : nullptr), s.rows, s.in,
                                      s.out);
          EXPECT_EQ(std::memcmp(y1.data(), y2.data(), ny * sizeof(float)), 0) << "linear_forward";
          if (sixteen) {
            EXPECT_TRUE(y1_16 == y2_16) << "linear_forward's patterns";
          }
          std::fill(y1.begin(), y1.end(), kNaN), std::fill(y2.begin(), y2.end(), 0.0f);
          std::fill(y1_16.begin(), y1_16.end(), 0xffff), std::fill(y2_16.begin(), y2_16.end(), 0);
          be->linear_gelu_forward(t, xo, wo, b, rounded(y1.data(), t, sixteen ? y1_16.data() : nullptr),
                                  rounded(g1.data(), t, sixteen ? g1_16.data() : nullptr), s.rows, s.in, s.out);
          be->Backend::linear_gelu_forward(t, xo, wo, b, rounded(y2.data(), t, sixteen ? y2_16.data() : nullptr),
                                           rounded(g2.data(), t, sixteen ? g2_16.data() : nullptr), s.rows, s.in, s.out);
          EXPECT_EQ(std::memcmp(y1.data(), y2.data(), ny * sizeof(float)), 0) << "linear_gelu_forward's f";
          EXPECT_EQ(std::memcmp(g1.data(), g2.data(), ny * sizeof(float)), 0) << "linear_gelu_forward's g";
          if (sixteen) {
            EXPECT_TRUE(y1_16 == y2_16) << "linear_gelu_forward's f patterns";
            EXPECT_TRUE(g1_16 == g2_16) << "linear_gelu_forward's g patterns";
          }
        }
      }
    }
    for (const std::size_t n : {std::size_t(1000), std::size_t(3 * 8192 + 77)}) {  // one thread; chunks on the threads
      for (const bool with16 : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " n " + std::to_string(n) + (with16 ? " with patterns" : ""));
        auto y = random_floats(n, "fused.add.y", -70000.0, 70000.0);
        const auto x = random_floats(n, "fused.add.x", -70000.0, 70000.0);
        y[3] = kNaN, y[n - 2] = kInf, y[n - 1] = 3.3e38f;
        std::vector<float> y1 = y, y2 = y;
        std::vector<std::uint16_t> p1(n, 0xffff), p2(n, 0);
        const bool out16 = with16 && t != DType::f32;
        be->add_round(rounded(y1.data(), t, out16 ? p1.data() : nullptr), x.data(), n);
        be->Backend::add_round(rounded(y2.data(), t, out16 ? p2.data() : nullptr), x.data(), n);
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), n * sizeof(float)), 0) << "add_round";
        if (out16) {
          EXPECT_TRUE(p1 == p2) << "add_round's patterns";
        }

        auto gx = random_floats(n, "fused.gelu.x", -6.0, 6.0);
        const auto dy = random_floats(n, "fused.gelu.dy", -1e5, 1e5);
        gx[5] = kNaN, gx[n - 1] = -kInf;
        std::vector<std::uint16_t> gx16(n);
        be->round_to(rounded(gx.data(), t == DType::f32 ? DType::bf16 : t, gx16.data()), n);
        for (const bool x_16 : {true, false}) {
          const Operand xo = t != DType::f32 && x_16 ? Operand{gx16.data(), t} : fp32(gx.data());
          std::vector<float> d1(n, kNaN), d2(n, 0.0f);
          std::fill(p1.begin(), p1.end(), 0xffff), std::fill(p2.begin(), p2.end(), 0);
          be->gelu_backward_round(dy.data(), xo, rounded(d1.data(), t, out16 ? p1.data() : nullptr), n);
          be->Backend::gelu_backward_round(dy.data(), xo, rounded(d2.data(), t, out16 ? p2.data() : nullptr), n);
          EXPECT_EQ(std::memcmp(d1.data(), d2.data(), n * sizeof(float)), 0) << "gelu_backward_round";
          if (out16) {
            EXPECT_TRUE(p1 == p2) << "gelu_backward_round's patterns";
          }
          std::vector<float> in_place = dy;  // dx may be dy
          be->gelu_backward_round(in_place.data(), xo, rounded(in_place.data(), t), n);
          EXPECT_EQ(std::memcmp(in_place.data(), d2.data(), n * sizeof(float)), 0) << "gelu_backward_round in place";
        }
      }
    }
  }
}

struct BatchNormReference {
  std::vector<double> y, mean, rstd, running_mean, running_var;
};

BatchNormReference batchnorm_reference(const std::vector<float>& x, const std::vector<std::uint8_t>& mask,
                                       const std::vector<float>& gamma, const std::vector<float>& beta,
                                       const std::vector<float>& rm0, const std::vector<float>& rv0, int rows,
                                       int ch, double eps, double momentum) {
  BatchNormReference ref;
  ref.y.assign(x.size(), 0.0);
  int count = 0;
  for (int r = 0; r < rows; ++r) count += mask[r];
  for (int c = 0; c < ch; ++c) {
    double mu = 0, ss = 0;
    for (int r = 0; r < rows; ++r)
      if (mask[r]) mu += x[std::size_t(r) * ch + c];
    mu /= count;
    for (int r = 0; r < rows; ++r)
      if (mask[r]) ss += (x[std::size_t(r) * ch + c] - mu) * (x[std::size_t(r) * ch + c] - mu);
    const double rs = 1.0 / std::sqrt(ss / count + eps);
    for (int r = 0; r < rows; ++r)
      if (mask[r]) ref.y[std::size_t(r) * ch + c] = (x[std::size_t(r) * ch + c] - mu) * rs * gamma[c] + beta[c];
    ref.mean.push_back(mu);
    ref.rstd.push_back(rs);
    ref.running_mean.push_back((1 - momentum) * rm0[c] + momentum * mu);
    ref.running_var.push_back((1 - momentum) * rv0[c] + momentum * ss / (count - 1));
  }
  return ref;
}

TEST_F(CpuKernels, BatchNormTrainUsesOnlyUnmaskedRowsZeroesMaskedRowsAndAddsBatchStatsToTheSums) {
  const int rows = 7, ch = 5;
  const float eps = 1e-5f;
  const std::vector<std::uint8_t> mask = {1, 0, 1, 1, 0, 1, 1};
  auto x = random_floats(std::size_t(rows) * ch, "bn.x", -2.0, 3.0);
  for (int r = 0; r < rows; ++r)
    if (!mask[r])
      for (int c = 0; c < ch; ++c) x[std::size_t(r) * ch + c] = 1000.0f;  // would shift any statistic it entered
  const auto gamma = random_floats(ch, "bn.gamma", 0.5, 1.5), beta = random_floats(ch, "bn.beta");
  const auto sums0 = random_floats(2 * std::size_t(ch), "bn.sums");
  auto sums = sums0;
  auto y = poisoned(x.size()), mean = poisoned(ch), rstd = poisoned(ch);
  be->batchnorm_forward_train(x.data(), mask.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                              sums.data(), rows, ch, eps);
  // momentum 1 from zero: the reference's "running" statistics are the batch's mean and unbiased variance
  const std::vector<float> zeros(ch, 0.0f);
  const auto ref = batchnorm_reference(x, mask, gamma, beta, zeros, zeros, rows, ch, eps, 1.0);
  EXPECT_TRUE(all_close(y, ref.y, 1e-5, 1e-5));
  for (int r = 0; r < rows; ++r)
    if (!mask[r]) {
      for (int c = 0; c < ch; ++c) EXPECT_EQ(y[std::size_t(r) * ch + c], 0.0f) << "masked row " << r;
    }
  EXPECT_TRUE(all_close(mean, ref.mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(rstd, ref.rstd, 0, 1e-5));
  std::vector<double> want_mean(ch), want_var(ch);
  const std::vector<float> got_mean(sums.begin(), sums.begin() + ch), got_var(sums.begin() + ch, sums.end());
  for (int c = 0; c < ch; ++c) {
    want_mean[c] = double(sums0[c]) + ref.running_mean[c];
    want_var[c] = double(sums0[ch + c]) + ref.running_var[c];
  }
  EXPECT_TRUE(all_close(got_mean, want_mean, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(got_var, want_var, 1e-6, 1e-5));
}

TEST_F(CpuKernels, BatchNormEvalUsesRunningStatsAndZeroesMaskedRows) {
  const int rows = 4, ch = 3;
  const float eps = 1e-5f;
  const std::vector<std::uint8_t> mask = {1, 1, 0, 1};
  const auto x = random_floats(std::size_t(rows) * ch, "bn_eval.x", -2.0, 2.0);
  const auto gamma = random_floats(ch, "bn_eval.gamma", 0.5, 1.5), beta = random_floats(ch, "bn_eval.beta");
  const auto rm = random_floats(ch, "bn_eval.rm"), rv = random_floats(ch, "bn_eval.rv", 0.5, 2.0);
  auto y = poisoned(x.size());
  be->batchnorm_forward_eval(x.data(), mask.data(), gamma.data(), beta.data(), rm.data(), rv.data(), y.data(), rows,
                             ch, eps);
  std::vector<double> want;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ch; ++c)
      want.push_back(mask[r] ? (x[std::size_t(r) * ch + c] - rm[c]) / std::sqrt(rv[c] + double(eps)) * gamma[c] + beta[c]
                             : 0.0);
  EXPECT_TRUE(all_close(y, want, 1e-6, 1e-5));
  for (int c = 0; c < ch; ++c) EXPECT_EQ(y[2 * ch + c], 0.0f);
}

// ---------------------------------------------------------------- fused attention

// Reference multi-head attention in double on qkv[B, L, 3, H, hd]: p[b,h,i,j], ctx[b,i,h*hd+e].
struct AttentionReference {
  int B, L, H, hd;
  std::vector<double> p, ctx, dqkv;
  std::size_t qkv_at(int b, int l, int s, int h, int e) const {
    return ((std::size_t(b) * L + l) * 3 + s) * std::size_t(H) * hd + std::size_t(h) * hd + e;
  }
  std::size_t p_at(int b, int h, int i, int j) const { return ((std::size_t(b) * H + h) * L + i) * L + j; }
  std::size_t ctx_at(int b, int l, int h, int e) const { return (std::size_t(b) * L + l) * H * hd + std::size_t(h) * hd + e; }

  void forward(const std::vector<float>& qkv, const std::vector<std::uint8_t>& mask) {
    p.assign(std::size_t(B) * H * L * L, 0.0);
    ctx.assign(std::size_t(B) * L * H * hd, 0.0);
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < L; ++i) {
          double sum = 0;
          std::vector<double> e(L, 0.0);
          for (int j = 0; j < L; ++j) {
            if (!mask[std::size_t(b) * L + j]) continue;
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += double(qkv[qkv_at(b, i, 0, h, d)]) * qkv[qkv_at(b, j, 1, h, d)];
            sum += e[j] = std::exp(dot * scale);
          }
          for (int j = 0; j < L; ++j) p[p_at(b, h, i, j)] = e[j] / sum;
          for (int d = 0; d < hd; ++d)
            for (int j = 0; j < L; ++j) ctx[ctx_at(b, i, h, d)] += p[p_at(b, h, i, j)] * qkv[qkv_at(b, j, 2, h, d)];
        }
  }

  void backward(const std::vector<float>& qkv, const std::vector<float>& dctx) {
    dqkv.assign(qkv.size(), 0.0);
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < L; ++i) {
          std::vector<double> dp(L, 0.0);
          double dot = 0;
          for (int j = 0; j < L; ++j) {
            for (int d = 0; d < hd; ++d) {
              dp[j] += double(dctx[ctx_at(b, i, h, d)]) * qkv[qkv_at(b, j, 2, h, d)];
              dqkv[qkv_at(b, j, 2, h, d)] += p[p_at(b, h, i, j)] * dctx[ctx_at(b, i, h, d)];
            }
            dot += dp[j] * p[p_at(b, h, i, j)];
          }
          for (int j = 0; j < L; ++j) {
            const double ds = p[p_at(b, h, i, j)] * (dp[j] - dot) * scale;
            for (int d = 0; d < hd; ++d) {
              dqkv[qkv_at(b, i, 0, h, d)] += ds * qkv[qkv_at(b, j, 1, h, d)];
              dqkv[qkv_at(b, j, 1, h, d)] += ds * qkv[qkv_at(b, i, 0, h, d)];
            }
          }
        }
  }
};

TEST_F(CpuKernels, AttentionForwardMatchesReferenceAndGivesMaskedKeysExactlyZero) {
  const int B = 3, L = 7, H = 2, hd = 4;
  const std::vector<std::uint8_t> mask = {1, 1, 0, 1, 0, 0, 1,  1, 1, 1, 1, 1, 1, 1,  0, 0, 0, 1, 0, 0, 0};
  const auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "attention.qkv", -2.0, 2.0);
  auto p = poisoned(std::size_t(B) * H * L * L), ctx = poisoned(std::size_t(B) * L * H * hd);
  be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), p.data(), nullptr, fp32_out(ctx.data()), B, L, H, hd);
  AttentionReference ref{B, L, H, hd, {}, {}, {}};
  ref.forward(qkv, mask);
  EXPECT_TRUE(all_close(p, ref.p, 1e-7, 2e-6));
  EXPECT_TRUE(all_close(ctx, ref.ctx, 1e-6, 2e-6));
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < L; ++j) {
      if (mask[std::size_t(b) * L + j]) continue;
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < L; ++i) EXPECT_EQ(p[ref.p_at(b, h, i, j)], 0.0f);
    }
  EXPECT_EQ(be->gemm_flops(), 4.0 * B * H * L * L * hd);
}

// Against the double reference across several blocks of query rows (L = 300: 3 blocks of up to 109).
TEST_F(CpuKernels, AttentionInBlocksOfRowsMatchesReference) {
  const int B = 2, L = 300, H = 2, hd = 4;
  std::vector<std::uint8_t> mask(std::size_t(B) * L, 1);
  for (int j = 250; j < L; ++j) mask[j] = 0;  // sample 0 padded
  const auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "attention_blocks.qkv", -2.0, 2.0);
  const auto dctx = random_floats(std::size_t(B) * L * H * hd, "attention_blocks.dctx");
  auto p = poisoned(std::size_t(B) * H * L * L), ctx = poisoned(dctx.size()), dqkv = poisoned(qkv.size());
  be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), p.data(), nullptr, fp32_out(ctx.data()), B, L, H, hd);
  be->attention_backward(DType::f32, fp32(qkv.data()), Backend::AttentionProbs::kept(fp32(p.data())), dctx.data(), fp32_out(dqkv.data()), B, L, H, hd);
  AttentionReference ref{B, L, H, hd, {}, {}, {}};
  ref.forward(qkv, mask);
  ref.backward(qkv, dctx);
  EXPECT_TRUE(all_close(p, ref.p, 1e-7, 2e-6));
  EXPECT_TRUE(all_close(ctx, ref.ctx, 1e-6, 2e-6));
  EXPECT_TRUE(all_close(dqkv, ref.dqkv, 1e-6, 1e-5));
}

TEST_F(CpuKernels, AttentionBackwardMatchesReference) {
  const int B = 2, L = 6, H = 3, hd = 4;
  const std::vector<std::uint8_t> mask = {1, 1, 1, 0, 1, 0,  1, 1, 1, 1, 1, 1};
  const auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "attention_backward.qkv", -2.0, 2.0);
  const auto dctx = random_floats(std::size_t(B) * L * H * hd, "attention_backward.dctx");
  auto p = poisoned(std::size_t(B) * H * L * L), ctx = poisoned(dctx.size()), dqkv = poisoned(qkv.size());
  be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), p.data(), nullptr, fp32_out(ctx.data()), B, L, H, hd);
  be->attention_backward(DType::f32, fp32(qkv.data()), Backend::AttentionProbs::kept(fp32(p.data())), dctx.data(), fp32_out(dqkv.data()), B, L, H, hd);
  AttentionReference ref{B, L, H, hd, {}, {}, {}};
  ref.forward(qkv, mask);
  ref.backward(qkv, dctx);
  EXPECT_TRUE(all_close(dqkv, ref.dqkv, 1e-6, 1e-5));
}

TEST_F(CpuKernels, AttentionInBf16TakesRoundedProbabilitiesIntoItsProducts) {
  const int B = 2, L = 9, H = 2, hd = 8;
  const std::vector<std::uint8_t> mask(std::size_t(B) * L, 1);
  auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "attention_bf16.qkv", -2.0, 2.0);
  be->round_to(rounded(qkv.data(), DType::bf16), qkv.size());  // exact in bf16, as the layers give it
  const auto dctx = random_floats(std::size_t(B) * L * H * hd, "attention_bf16.dctx");
  auto p32 = poisoned(std::size_t(B) * H * L * L), ctx32 = poisoned(dctx.size()), dqkv32 = poisoned(qkv.size());
  auto p16 = p32, ctx16 = ctx32, dqkv16 = dqkv32;
  be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), p32.data(), nullptr, fp32_out(ctx32.data()), B, L, H, hd);
  be->attention_forward(DType::bf16, fp32(qkv.data()), mask.data(), p16.data(), nullptr, fp32_out(ctx16.data()), B, L, H, hd);
  // The scores are the same product (q, k exact); p is then rounded, and P V takes the rounded p.
  auto rounded = p32;
  be->round_to(avtrain::rounded(rounded.data(), DType::bf16), rounded.size());
  EXPECT_EQ(p16, rounded);
  AttentionReference ref{B, L, H, hd, {}, {}, {}};
  ref.forward(qkv, mask);
  std::vector<double> want_ctx(ctx16.size(), 0.0);
  const int D = H * hd;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < L; ++i)
        for (int j = 0; j < L; ++j)
          for (int c = 0; c < hd; ++c)
            want_ctx[(std::size_t(b) * L + i) * D + h * hd + c] +=
                double(rounded[ref.p_at(b, h, i, j)]) * qkv[(std::size_t(b) * L + j) * 3 * D + 2 * D + h * hd + c];
  EXPECT_TRUE(all_close(ctx16, want_ctx, 1e-6, 2e-6));
  // Backward: dctx and dS rounded on their way in; close to fp32, and not the same bits.
  be->attention_backward(DType::f32, fp32(qkv.data()), Backend::AttentionProbs::kept(fp32(p32.data())), dctx.data(), fp32_out(dqkv32.data()), B, L, H, hd);
  be->attention_backward(DType::bf16, fp32(qkv.data()), Backend::AttentionProbs::kept(fp32(p16.data())), dctx.data(), fp32_out(dqkv16.data()), B, L, H, hd);
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < dqkv32.size(); ++i) {
    diff += (double(dqkv16[i]) - dqkv32[i]) * (double(dqkv16[i]) - dqkv32[i]);
    norm += double(dqkv32[i]) * dqkv32[i];
  }
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(std::sqrt(diff / norm), 2e-2);
  // The same operands handed over as their bf16 patterns (a layer's saved copies) give the same bits.
  std::vector<std::uint16_t> qkv_bits(qkv.size()), p_bits(p16.size());
  floats_to_bf16(qkv.data(), qkv_bits.data(), qkv.size());
  floats_to_bf16(p16.data(), p_bits.data(), p16.size());
  auto p_again = poisoned(p16.size()), ctx_again = poisoned(ctx16.size()), dqkv_again = poisoned(qkv.size());
  be->attention_forward(DType::bf16, {qkv_bits.data(), DType::bf16}, mask.data(), p_again.data(), nullptr, fp32_out(ctx_again.data()), B, L, H, hd);
  be->attention_backward(DType::bf16, {qkv_bits.data(), DType::bf16}, Backend::AttentionProbs::kept({p_bits.data(), DType::bf16}), dctx.data(), fp32_out(dqkv_again.data()), B, L, H, hd);
  EXPECT_EQ(p_again, p16);
  EXPECT_EQ(ctx_again, ctx16);
  EXPECT_EQ(dqkv_again, dqkv16);
}

// train.recompute: p not kept, recomputed in backward from q, k and forward's row statistics, gives
// the same bits as p kept, in each (products, kept type) pair the layers use: fp32, bf16, and fp16
// storage with fp32 products. L = 37 leaves SIMD remainders; sample 2 has one valid key, sample 1 none.
// L = 37 is one block of rows with SIMD remainders; L = 300 three blocks (109 rows each, the last
// partial).
TEST_F(CpuKernels, AttentionRecomputedFromRowStatisticsGivesTheSameBits) {
  for (const int L : {37, 300})
  for (const auto& [compute, kept_as] : {std::pair{DType::f32, DType::f32}, std::pair{DType::bf16, DType::bf16},
                                         std::pair{DType::f32, DType::f16}}) {
    const int B = 3, H = 2, hd = 8;
    std::vector<std::uint8_t> mask(std::size_t(B) * L, 1);
    for (int j = 0; j < L; ++j) mask[std::size_t(L) + j] = 0, mask[2 * std::size_t(L) + j] = j == 5;
    for (int j = 30; j < L; ++j) mask[j] = 0;
    SCOPED_TRACE(std::string("L ") + std::to_string(L) + ", products " + dtype_name(compute) + ", kept " +
                 dtype_name(kept_as));
    auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "attention_recompute.qkv", -3.0, 3.0);
    be->round_to(rounded(qkv.data(), compute), qkv.size());
    const auto dctx = random_floats(std::size_t(B) * L * H * hd, "attention_recompute.dctx");
    auto p = poisoned(std::size_t(B) * H * L * L), ctx = poisoned(dctx.size()), ctx_again = ctx;
    auto stats = poisoned(std::size_t(B) * H * L * 2);
    be->attention_forward(compute, fp32(qkv.data()), mask.data(), p.data(), nullptr, fp32_out(ctx.data()), B, L, H, hd);
    be->attention_forward(compute, fp32(qkv.data()), mask.data(), nullptr, stats.data(), fp32_out(ctx_again.data()), B, L, H, hd);
    EXPECT_EQ(ctx_again, ctx);
    // A row with no valid key: max -inf, 1 / sum 0.
    EXPECT_EQ(stats[(std::size_t(1) * H * L) * 2], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(stats[(std::size_t(1) * H * L) * 2 + 1], 0.0f);
    be->round_to(rounded(p.data(), kept_as), p.size());  // as the layer keeps it
    auto dqkv = poisoned(qkv.size()), dqkv_again = dqkv;
    be->attention_backward(compute, fp32(qkv.data()), Backend::AttentionProbs::kept(fp32(p.data())), dctx.data(), fp32_out(dqkv.data()), B, L, H, hd);
    const double flops_before = be->gemm_flops();
    be->attention_backward(compute, fp32(qkv.data()), Backend::AttentionProbs::recomputed(mask.data(), stats.data(), kept_as), dctx.data(), fp32_out(dqkv_again.data()), B, L, H, hd);
    EXPECT_EQ(dqkv_again, dqkv);
    EXPECT_EQ(be->gemm_flops() - flops_before, 10.0 * B * H * L * L * hd);  // the scores once more
  }
}

// Ops that write an Output: given one in a 16-bit type (with its copy, or copy_only), the values and
// the copy are the bits of the op into fp32 values then round_to with that copy; an fp32 Output is
// the values alone, unrounded. bias_grad of a 16-bit operand is bias_grad of its widened values.
TEST_F(CpuKernels, TypedOutputsGiveTheBitsOfTheFp32OpThenRoundTo) {
  const int rows = 40, dim = 96, B = 3, L = 37, H = 2, hd = 8;
  const std::size_t n = std::size_t(rows) * dim;
  const auto x = random_floats(n, "typed.x", -2.0, 2.0);
  const auto gamma = random_floats(dim, "typed.gamma", 0.5, 1.5), beta = random_floats(dim, "typed.beta");
  std::vector<std::uint8_t> mask(std::size_t(B) * L, 1);
  for (int j = 30; j < L; ++j) mask[j] = 0;
  const auto dctx = random_floats(std::size_t(B) * L * H * hd, "typed.dctx");
  for (const DType t : {DType::bf16, DType::f16})
    for (const bool only : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (only ? " copy_only" : " values and copy"));
      const auto typed = [&](float* values, std::uint16_t* copy) {
        return only ? copy_only(values, t, copy) : rounded(values, t, copy);
      };
      const auto reference = [&](std::vector<float>& values, std::vector<std::uint16_t>& copy) {
        be->round_to(rounded(values.data(), t, copy.data()), values.size());
      };
      // LayerNorm, its rounding included.
      std::vector<float> mean(rows), rstd(rows), y = poisoned(n), want = poisoned(n);
      std::vector<std::uint16_t> y16(n, 0x7fff), want16(n);
      be->layernorm_forward(x.data(), gamma.data(), beta.data(), typed(y.data(), y16.data()), mean.data(), rstd.data(),
                            rows, dim, 1e-5f);
      be->layernorm_forward(x.data(), gamma.data(), beta.data(), fp32_out(want.data()), mean.data(), rstd.data(),
                            rows, dim, 1e-5f);
      reference(want, want16);
      EXPECT_TRUE(y16 == want16) << "layernorm_forward's copy";
      EXPECT_EQ(y, want) << "layernorm_forward's values (the CPU writes them under copy_only too)";
      // Attention forward and backward, ctx and dqkv rounded by the op.
      auto qkv = random_floats(std::size_t(B) * L * 3 * H * hd, "typed.qkv", -3.0, 3.0);
      be->round_to(rounded(qkv.data(), t), qkv.size());
      auto stats = poisoned(std::size_t(B) * H * L * 2);
      std::vector<float> ctx = poisoned(dctx.size()), want_ctx = poisoned(dctx.size());
      std::vector<std::uint16_t> ctx16(ctx.size(), 0x7fff), want_ctx16(ctx.size());
      be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), nullptr, stats.data(),
                            typed(ctx.data(), ctx16.data()), B, L, H, hd);
      be->attention_forward(DType::f32, fp32(qkv.data()), mask.data(), nullptr, stats.data(),
                            fp32_out(want_ctx.data()), B, L, H, hd);
      reference(want_ctx, want_ctx16);
      EXPECT_TRUE(ctx16 == want_ctx16) << "attention_forward's copy";
      const auto probs = Backend::AttentionProbs::recomputed(mask.data(), stats.data(), DType::f32);
      std::vector<float> dqkv = poisoned(qkv.size()), want_dqkv = poisoned(qkv.size());
      std::vector<std::uint16_t> dqkv16(qkv.size(), 0x7fff), want_dqkv16(qkv.size());
      be->attention_backward(DType::f32, fp32(qkv.data()), probs, dctx.data(), typed(dqkv.data(), dqkv16.data()), B,
                             L, H, hd);
      be->attention_backward(DType::f32, fp32(qkv.data()), probs, dctx.data(), fp32_out(want_dqkv.data()), B, L, H,
                             hd);
      EXPECT_NE(std::memcmp(want_dqkv.data(), dqkv.data(), dqkv.size() * sizeof(float)), 0) << "fp32: not rounded";
      reference(want_dqkv, want_dqkv16);
      EXPECT_TRUE(dqkv16 == want_dqkv16) << "attention_backward's copy";
      // What a reader takes.
      const Output out = typed(y.data(), y16.data());
      EXPECT_EQ(out.result().data, only ? static_cast<const void*>(y16.data()) : static_cast<const void*>(y.data()));
      EXPECT_EQ(out.result().dtype, only ? t : DType::f32);
      // bias_grad of the copy: the bits of bias_grad of its values.
      std::vector<float> db16(dim, 0.25f), db32(dim, 0.25f);
      be->bias_grad(Operand{want16.data(), t}, db16.data(), rows, dim);
      be->bias_grad(fp32(want.data()), db32.data(), rows, dim);
      EXPECT_EQ(db16, db32) << "bias_grad of 16-bit patterns";
    }
}

// ---------------------------------------------------------------- audio front end and video

TEST_F(CpuKernels, FrameSignalWindowsOverlappingFrames) {
  const int B = 2, T = 4, win = 10, hop = 8;
  const std::int64_t A = 40;
  const auto audio = random_floats(std::size_t(B) * A, "frame.audio");
  const auto window = random_floats(win, "frame.window", 0.1, 1.0);
  auto frames = poisoned(std::size_t(B) * T * win);
  be->frame_signal(audio.data(), window.data(), frames.data(), B, A, T, win, hop);
  std::vector<double> want;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < win; ++i) want.push_back(double(audio[b * A + t * hop + i]) * window[i]);
  EXPECT_TRUE(all_close(frames, want, 0, 1e-7));
}

TEST_F(CpuKernels, PowerSpectrumIsRealSquaredPlusImaginarySquared) {
  const int rows = 3, nb = 5;
  const auto spec = random_floats(std::size_t(rows) * 2 * nb, "power");
  auto power = poisoned(std::size_t(rows) * nb);
  be->power_spectrum(spec.data(), power.data(), rows, nb);
  std::vector<double> want;
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < nb; ++k) {
      const double re = spec[r * 2 * nb + k], im = spec[r * 2 * nb + nb + k];
      want.push_back(re * re + im * im);
    }
  EXPECT_TRUE(all_close(power, want, 0, 1e-6));
}

TEST_F(CpuKernels, MaskedLogTakesLogOfValidRowsAndZeroesTheOthers) {
  const int rows = 4, cols = 5;
  const float eps = 1e-6f;
  const std::vector<std::uint8_t> mask = {1, 0, 1, 0};
  auto x = random_floats(std::size_t(rows) * cols, "masked_log", 1e-3, 2.0);
  const auto x0 = x;
  for (int c = 0; c < cols; ++c) x[1 * cols + c] = x[3 * cols + c] = kNaN;  // masked rows must be overwritten
  be->masked_log(x.data(), mask.data(), rows, cols, eps);
  std::vector<double> want;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want.push_back(mask[r] ? std::log(double(x0[r * cols + c]) + eps) : 0.0);
  EXPECT_TRUE(all_close(x, want, 1e-7, 1e-6));
}

TEST_F(CpuKernels, Im2colFollowsTheIndexFormulaWithPaddingOnBothSides) {
  const int B = 2, T = 7, C = 3, k = 3, stride = 2, pad = 1, To = 4;  // last window reaches t = 7
  const auto x = random_floats(std::size_t(B) * T * C, "im2col.x");
  auto col = poisoned(std::size_t(B) * To * C * k);
  be->im2col_1d(x.data(), col.data(), B, T, C, k, stride, pad, To);
  std::vector<float> want;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < To; ++t)
      for (int c = 0; c < C; ++c)
        for (int j = 0; j < k; ++j) {
          const int ti = t * stride + j - pad;
          want.push_back(ti >= 0 && ti < T ? x[(std::size_t(b) * T + ti) * C + c] : 0.0f);
        }
  EXPECT_TRUE(all_equal(col, want));
}

TEST_F(CpuKernels, Col2imIsTheAdjointOfIm2col) {
  const int B = 2, T = 9, C = 3, k = 4, stride = 2, pad = 2, To = 5;
  const auto x = random_floats(std::size_t(B) * T * C, "col2im.x");
  const auto c = random_floats(std::size_t(B) * To * C * k, "col2im.c");
  auto col = poisoned(c.size()), dx = poisoned(x.size());
  be->im2col_1d(x.data(), col.data(), B, T, C, k, stride, pad, To);
  be->col2im_1d(c.data(), dx.data(), B, T, C, k, stride, pad, To);
  double lhs = 0, rhs = 0, scale = 0;
  for (std::size_t i = 0; i < c.size(); ++i) lhs += double(col[i]) * c[i], scale += std::fabs(double(col[i]) * c[i]);
  for (std::size_t i = 0; i < x.size(); ++i) rhs += double(x[i]) * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-6 * scale);
  EXPECT_GT(scale, 1.0);  // a product of zeros would pass trivially
}

TEST_F(CpuKernels, VideoPatchesOrderTokensByTimeRowColumnAndValuesByDtDyDxChannel) {
  const int B = 2, F = 4, H = 4, W = 6, C = 2, tp = 2, p = 2;
  const int Nt = F / tp, Nh = H / p, Nw = W / p, P = tp * p * p * C;
  KeyedRandom rng(3, "video");
  std::vector<std::uint8_t> video(std::size_t(B) * F * H * W * C);
  for (auto& v : video) v = std::uint8_t(rng.below(256));
  video[0] = 0;
  video[1] = 255;
  auto patches = poisoned(std::size_t(B) * Nt * Nh * Nw * P);
  be->video_patches(video.data(), patches.data(), B, F, H, W, C, tp, p);
  std::vector<double> want;
  for (int b = 0; b < B; ++b)
    for (int it = 0; it < Nt; ++it)
      for (int ih = 0; ih < Nh; ++ih)
        for (int iw = 0; iw < Nw; ++iw)
          for (int dt = 0; dt < tp; ++dt)
            for (int dy = 0; dy < p; ++dy)
              for (int dx = 0; dx < p; ++dx)
                for (int c = 0; c < C; ++c) {
                  const std::size_t v =
                      ((((std::size_t(b) * F + it * tp + dt) * H + ih * p + dy) * W + iw * p + dx) * C) + c;
                  want.push_back(video[v] / 127.5 - 1.0);
                }
  EXPECT_TRUE(all_close(patches, want, 1e-6, 0));
}

// ---------------------------------------------------------------- token assembly

TEST_F(CpuKernels, MaskRowsZeroesExactlyTheMaskedRows) {
  const int rows = 4, dim = 3;
  const std::vector<std::uint8_t> mask = {0, 1, 1, 0};
  auto x = random_floats(std::size_t(rows) * dim, "mask_rows");
  x[0] = kNaN;  // a masked row is overwritten whatever it held
  auto want = x;
  for (int r : {0, 3})
    for (int c = 0; c < dim; ++c) want[r * dim + c] = 0.0f;
  be->mask_rows(x.data(), mask.data(), rows, dim);
  EXPECT_TRUE(all_equal(x, want));
}

// Context parallelism's row moves: y[r] = x[index[r]] (index -1: zeros, a row may be taken twice),
// and its inverse y[index[r]] = x[r] (index -1: dropped), which leaves y's other rows as they were.
TEST_F(CpuKernels, GatherRowsTakesTheIndexedRowsAndZeroesForMinusOne) {
  const int x_rows = 5, rows = 7, cols = 3;
  const std::vector<std::int32_t> index = {4, -1, 0, 2, 2, -1, 1};
  const auto x = random_floats(std::size_t(x_rows) * cols, "gather_rows");
  auto y = poisoned(std::size_t(rows) * cols);
  be->gather_rows(x.data(), index.data(), y.data(), rows, cols);
  std::vector<float> want;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) want.push_back(index[r] < 0 ? 0.0f : x[index[r] * cols + c]);
  EXPECT_TRUE(all_equal(y, want));
}

TEST_F(CpuKernels, ScatterRowsWritesTheIndexedRowsOnly) {
  const int rows = 5, y_rows = 8, cols = 3;
  const std::vector<std::int32_t> index = {6, -1, 0, 3, 7};
  const auto x = random_floats(std::size_t(rows) * cols, "scatter_rows.x");
  auto y = random_floats(std::size_t(y_rows) * cols, "scatter_rows.y");
  auto want = y;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      if (index[r] >= 0) want[index[r] * cols + c] = x[r * cols + c];
  be->scatter_rows(x.data(), index.data(), y.data(), rows, cols);
  EXPECT_TRUE(all_equal(y, want));
  // Gathered back by the same index, the rows come back (the dropped one as zeros).
  auto back = poisoned(std::size_t(rows) * cols);
  be->gather_rows(y.data(), index.data(), back.data(), rows, cols);
  auto x_dropped = x;
  for (int c = 0; c < cols; ++c) x_dropped[std::size_t(cols) + c] = 0.0f;
  EXPECT_TRUE(all_equal(back, x_dropped));
}

// x as [n0, n1] blocks: block (i, j) holds bytes that name i, j and the byte's place k, so the
// check reads where each block went from its contents. Blocks of one bf16 (2 bytes), odd sizes, floats.
TEST_F(CpuKernels, TransposeBlocksMovesBlockIJToJI) {
  const auto byte_of = [](int i, int j, std::size_t k) { return std::uint8_t(37 * i + 11 * j + 3 * k + 1); };
  for (std::size_t block : {std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(6), std::size_t(20)})
    for (auto [n0, n1] : {std::pair{3, 5}, std::pair{4, 1}, std::pair{1, 4}, std::pair{2, 2}}) {
      SCOPED_TRACE(std::to_string(n0) + " x " + std::to_string(n1) + " blocks of " + std::to_string(block) + " bytes");
      std::vector<std::uint8_t> x(std::size_t(n0) * n1 * block), y(x.size(), 0xff);
      for (int i = 0; i < n0; ++i)
        for (int j = 0; j < n1; ++j)
          for (std::size_t k = 0; k < block; ++k) x[(std::size_t(i) * n1 + j) * block + k] = byte_of(i, j, k);
      be->transpose_blocks(x.data(), y.data(), n0, n1, block);
      std::size_t at = 0;  // y in its own order: rows j of n0 blocks
      for (int j = 0; j < n1; ++j)
        for (int i = 0; i < n0; ++i)
          for (std::size_t k = 0; k < block; ++k, ++at) ASSERT_EQ(y[at], byte_of(i, j, k)) << "byte " << at;
      // Transposed back as [n1, n0], it is x again.
      std::vector<std::uint8_t> again(x.size(), 0xff);
      be->transpose_blocks(y.data(), again.data(), n1, n0, block);
      EXPECT_EQ(again, x);
    }
}

TEST_F(CpuKernels, EmbedForwardStacksAudioThenVideoAndAddsPositionAndModality) {
  const int B = 2, Ta = 3, L = 5, D = 4, Tv = L - Ta;
  const auto a = random_floats(std::size_t(B) * Ta * D, "embed.a"), v = random_floats(std::size_t(B) * Tv * D, "embed.v");
  const auto pos = random_floats(std::size_t(L) * D, "embed.pos"), mod = random_floats(2 * D, "embed.mod");
  auto x = poisoned(std::size_t(B) * L * D);
  be->embed_forward(a.data(), v.data(), pos.data(), mod.data(), x.data(), B, Ta, L, D);
  std::vector<double> want;
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < D; ++i) {
        const double src = l < Ta ? a[(b * Ta + l) * D + i] : v[(b * Tv + l - Ta) * D + i];
        want.push_back(src + pos[l * D + i] + mod[(l < Ta ? 0 : D) + i]);
      }
  EXPECT_TRUE(all_close(x, want, 1e-6, 1e-6));
}

TEST_F(CpuKernels, EmbedBackwardWritesTokenGradsAndAccumulatesPositionAndModalityGrads) {
  const int B = 2, Ta = 3, L = 5, D = 4, Tv = L - Ta;
  const auto dx = random_floats(std::size_t(B) * L * D, "embed_bw.dx");
  const auto dpos0 = random_floats(std::size_t(L) * D, "embed_bw.dpos"), dmod0 = random_floats(2 * D, "embed_bw.dmod");
  auto da = poisoned(std::size_t(B) * Ta * D), dv = poisoned(std::size_t(B) * Tv * D);
  auto dpos = dpos0, dmod = dmod0;
  be->embed_backward(dx.data(), da.data(), dv.data(), dpos.data(), dmod.data(), B, Ta, L, D);
  std::vector<float> want_da, want_dv;
  std::vector<double> want_dpos(dpos0.begin(), dpos0.end()), want_dmod(dmod0.begin(), dmod0.end());
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < D; ++i) {
        const float g = dx[(b * L + l) * D + i];
        (l < Ta ? want_da : want_dv).push_back(g);
        want_dpos[l * D + i] += g;
        want_dmod[(l < Ta ? 0 : D) + i] += g;
      }
  EXPECT_TRUE(all_equal(da, want_da));
  EXPECT_TRUE(all_equal(dv, want_dv));
  EXPECT_TRUE(all_close(dpos, want_dpos, 1e-6, 1e-6));
  EXPECT_TRUE(all_close(dmod, want_dmod, 1e-6, 1e-6));
}

// Batch 0: some tokens masked inside [begin, end); batch 1: all valid; batch 2: valid tokens only
// outside the range, so its mean is over nothing.
struct PoolCase {
  static constexpr int B = 3, L = 6, D = 3, begin = 1, end = 5;
  std::vector<std::uint8_t> mask = {1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1};
  int count(int b) const {
    int n = 0;
    for (int l = begin; l < end; ++l) n += mask[b * L + l];
    return n;
  }
};

TEST_F(CpuKernels, MaskedMeanPoolForwardAveragesValidTokensInTheRange) {
  const PoolCase pc;
  const int B = pc.B, L = pc.L, D = pc.D;
  const auto x = random_floats(std::size_t(B) * L * D, "pool.x");
  auto pooled = poisoned(std::size_t(B) * D);
  be->masked_mean_pool_forward(x.data(), pc.mask.data(), nullptr, pooled.data(), B, L, D, pc.begin, pc.end);
  std::vector<double> want(pooled.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int l = pc.begin; l < pc.end; ++l)
      if (pc.mask[b * L + l])
        for (int i = 0; i < D; ++i) want[b * D + i] += double(x[(b * L + l) * D + i]) / pc.count(b);
  EXPECT_TRUE(all_close(pooled, want, 1e-6, 1e-6));
  for (int i = 0; i < D; ++i) EXPECT_EQ(pooled[2 * D + i], 0.0f);
}

TEST_F(CpuKernels, MaskedMeanPoolBackwardSpreadsTheGradientOverValidTokensAndAccumulates) {
  const PoolCase pc;
  const int B = pc.B, L = pc.L, D = pc.D;
  const auto dpooled = random_floats(std::size_t(B) * D, "pool_bw.dpooled");
  const auto dx0 = random_floats(std::size_t(B) * L * D, "pool_bw.dx");
  auto dx = dx0;
  be->masked_mean_pool_backward(dpooled.data(), pc.mask.data(), nullptr, dx.data(), B, L, D, pc.begin, pc.end);
  std::vector<double> want(dx0.begin(), dx0.end());
  for (int b = 0; b < B; ++b)
    for (int l = pc.begin; l < pc.end; ++l)
      if (pc.mask[b * L + l])
        for (int i = 0; i < D; ++i) want[(b * L + l) * D + i] += double(dpooled[b * D + i]) / pc.count(b);
  EXPECT_TRUE(all_close(dx, want, 1e-6, 1e-6));
}

TEST_F(CpuKernels, ConcatColumnsAndSplitColumnsAreInverse) {
  const int B = 3, Da = 4, Db = 2;
  const auto a = random_floats(std::size_t(B) * Da, "concat.a"), b = random_floats(std::size_t(B) * Db, "concat.b");
  auto out = poisoned(std::size_t(B) * (Da + Db));
  be->concat_columns(a.data(), b.data(), out.data(), B, Da, Db);
  std::vector<float> want;
  for (int r = 0; r < B; ++r) {
    want.insert(want.end(), a.begin() + r * Da, a.begin() + (r + 1) * Da);
    want.insert(want.end(), b.begin() + r * Db, b.begin() + (r + 1) * Db);
  }
  EXPECT_TRUE(all_equal(out, want));
  auto a2 = poisoned(a.size()), b2 = poisoned(b.size());
  be->split_columns(out.data(), a2.data(), b2.data(), B, Da, Db);
  EXPECT_TRUE(all_equal(a2, a));
  EXPECT_TRUE(all_equal(b2, b));
}

// ---------------------------------------------------------------- losses

TEST_F(CpuKernels, CrossEntropyLossGradientAndCorrectCountMatchReference) {
  const int rows = 5, classes = 7;
  const float grad_scale = 2.5f;
  const auto logits = random_floats(std::size_t(rows) * classes, "ce.logits", -3.0, 3.0);
  // Rows 0 and 1 are labelled with their arg-max, the rest with another class: 2 correct.
  std::vector<std::int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) {
    const auto* row = logits.data() + r * classes;
    const int best = int(std::max_element(row, row + classes) - row);
    labels[r] = r < 2 ? best : (best + 1 + r) % classes;
  }
  auto dlogits = poisoned(logits.size());
  int correct = -1;
  const double loss = be->cross_entropy(logits.data(), labels.data(), dlogits.data(), rows, classes, grad_scale, &correct);
  double want_loss = 0;
  std::vector<double> want_grad;
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double(logits[r * classes + c]));
    want_loss += (std::log(sum) - logits[r * classes + labels[r]]) / rows;
    for (int c = 0; c < classes; ++c)
      want_grad.push_back(grad_scale * (std::exp(double(logits[r * classes + c])) / sum - (c == labels[r])) / rows);
  }
  EXPECT_NEAR(loss, want_loss, 1e-12 * want_loss);
  EXPECT_TRUE(all_close(dlogits, want_grad, 1e-8, 1e-6));
  EXPECT_EQ(correct, 2);
}

// Sigmoid binary cross-entropy: the mean over rows and classes, against finite differences of the
// loss itself and against the naive formula where it is exact; at logits of +-1e4 and +-100 the
// naive log(sigmoid) overflows, the stable form gives the limits (|x| for a wrong sign, 0 for right).
TEST_F(CpuKernels, BinaryCrossEntropyMatchesFiniteDifferencesAndIsStableForLargeLogits) {
  const int rows = 4, classes = 6;
  const float grad_scale = 1.5f;
  auto logits = random_floats(std::size_t(rows) * classes, "bce.logits", -4.0, 4.0);
  const auto mix = random_floats(logits.size(), "bce.targets", 0.0, 1.0);  // mixup's targets lie in [0, 1]
  std::vector<float> targets(mix.begin(), mix.end());
  auto dlogits = poisoned(logits.size());
  const double loss = be->binary_cross_entropy(logits.data(), targets.data(), dlogits.data(), rows, classes, grad_scale);
  double naive = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double p = 1.0 / (1.0 + std::exp(-double(logits[i]))), t = targets[i];
    naive += -(t * std::log(p) + (1 - t) * std::log(1 - p));
  }
  naive /= double(logits.size());
  EXPECT_NEAR(loss, naive, 1e-12);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i], h = 1e-2f;
    logits[i] = x + h;
    const double up = be->binary_cross_entropy(logits.data(), targets.data(), nullptr, rows, classes, 1.0f);
    logits[i] = x - h;
    const double down = be->binary_cross_entropy(logits.data(), targets.data(), nullptr, rows, classes, 1.0f);
    logits[i] = x;
    const double fd = grad_scale * (up - down) / (double(logits[i] + h) - double(logits[i] - h));
    EXPECT_NEAR(dlogits[i], fd, 1e-5 * std::abs(fd) + 1e-7) << "element " << i;
  }
  const std::vector<float> large{1e4f, -1e4f, 100.0f, -100.0f};
  const std::vector<float> truth{0.0f, 1.0f, 1.0f, 0.0f};
  std::vector<float> d(4);
  const double big = be->binary_cross_entropy(large.data(), truth.data(), d.data(), 1, 4, 1.0f);
  EXPECT_NEAR(big, (1e4 + 1e4 + std::log1p(std::exp(-100.0)) * 2) / 4, 1e-9);
  EXPECT_NEAR(d[0], 0.25, 1e-7);
  EXPECT_NEAR(d[1], -0.25, 1e-7);
  EXPECT_NEAR(d[2], 0.0, 1e-7);
  EXPECT_NEAR(d[3], 0.0, 1e-7);
}

TEST_F(CpuKernels, InfoNceLossMatchesSymmetricDoubleReference) {
  const int B = 4, D = 6;
  const float tau = 0.3f;
  const auto a = random_floats(std::size_t(B) * D, "nce.a"), b = random_floats(std::size_t(B) * D, "nce.b");
  std::vector<float> da(a.size(), 0.0f), db(b.size(), 0.0f);
  const double loss = be->info_nce(a.data(), b.data(), da.data(), db.data(), B, D, tau, 1.0f);
  auto normalised = [&](const std::vector<float>& x, int i, int k) {
    double n = 0;
    for (int j = 0; j < D; ++j) n += double(x[i * D + j]) * x[i * D + j];
    return x[i * D + k] / std::sqrt(n);
  };
  std::vector<double> S(std::size_t(B) * B);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < B; ++j) {
      double dot = 0;
      for (int k = 0; k < D; ++k) dot += normalised(a, i, k) * normalised(b, j, k);
      S[i * B + j] = dot / double(tau);
    }
  // 0.5 * (mean_i CE(S[i, :], i) + mean_j CE(S[:, j], j))
  double want = 0;
  for (int i = 0; i < B; ++i) {
    double row = 0, col = 0;
    for (int j = 0; j < B; ++j) row += std::exp(S[i * B + j]), col += std::exp(S[j * B + i]);
    want += 0.5 * ((std::log(row) - S[i * B + i]) + (std::log(col) - S[i * B + i])) / B;
  }
  EXPECT_NEAR(loss, want, 1e-10 * want);
}

// ---------------------------------------------------------------- optimizer

// PyTorch's AdamW: w -= lr*wd*w; m, v moments; w -= lr * mhat / (sqrt(vhat) + eps).
struct AdamWReference {
  std::vector<double> w, m, v;
  void step(const std::vector<float>& g, double lr, double b1, double b2, double eps, double wd, int t) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] -= lr * wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

TEST_F(CpuKernels, AdamWMatchesPyTorchDefinitionOverSeveralSteps) {
  const std::size_t n = 33;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  auto w = random_floats(n, "adamw.w");
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  AdamWReference ref{std::vector<double>(w.begin(), w.end()), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int t = 1; t <= 5; ++t) {
    const auto g = random_floats(n, "adamw.g" + std::to_string(t), -0.5, 0.5);
    be->adamw({w.data(), DType::f32}, g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t);
    ref.step(g, lr, b1, b2, eps, wd, t);
    // The update is ~lr; 1e-6 absolute resolves it to 1e-4 of itself.
    EXPECT_TRUE(all_close(w, ref.w, 1e-6, 0)) << "w after step " << t;
    EXPECT_TRUE(all_close(m, ref.m, 1e-8, 1e-6)) << "m after step " << t;
    EXPECT_TRUE(all_close(v, ref.v, 1e-10, 1e-5)) << "v after step " << t;
  }
}

// ---------------------------------------------------------------- log-mel front end

double hz_to_mel(double f) { return 2595.0 * std::log10(1.0 + f / 700.0); }
double mel_to_hz(double m) { return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0); }

// mel_bins + 2 HTK edges equally spaced in mel from 0 Hz to Nyquist.
std::vector<double> mel_edges(int mel_bins, int sample_rate) {
  std::vector<double> edges;
  for (int m = 0; m < mel_bins + 2; ++m) edges.push_back(mel_to_hz(hz_to_mel(sample_rate / 2.0) * m / (mel_bins + 1)));
  return edges;
}

TokenGeometry audio_geometry(int window, int hop, int frames) {
  TokenGeometry g;
  g.window = window;
  g.hop = hop;
  g.bins = window / 2 + 1;
  g.frames = frames;
  return g;
}

TEST(LogMelFrontend, FilterbankTrianglesPeakNearOneAtTheirCentreAndVanishOutside) {
  const int window = 64, mel_bins = 8, sample_rate = 4000;
  const TokenGeometry g = audio_geometry(window, 32, 1);
  const LogMelFrontend frontend(g, mel_bins, sample_rate);
  const auto edges = mel_edges(mel_bins, sample_rate);
  const double df = double(sample_rate) / window;
  for (int m = 0; m < mel_bins; ++m) {
    const double lo = edges[m], mid = edges[m + 1], hi = edges[m + 2];
    double peak = 0;
    for (int k = 0; k < g.bins; ++k) {
      const double f = k * df;
      const float w = frontend.filterbank()[std::size_t(k) * mel_bins + m];
      if (f <= lo || f >= hi) {
        EXPECT_EQ(w, 0.0f) << "filter " << m << " bin " << k << " outside its triangle";
      }
      EXPECT_NEAR(w, std::max(0.0, std::min((f - lo) / (mid - lo), (hi - f) / (hi - mid))), 1e-6)
          << "filter " << m << " bin " << k;
      peak = std::max(peak, double(w));
    }
    // The bin nearest the centre is at most df/2 away, so the peak is at least 1 - df / (2 * side).
    EXPECT_LE(peak, 1.0) << "filter " << m;
    EXPECT_GE(peak, 1.0 - df / (2.0 * std::min(mid - lo, hi - mid)) - 1e-6) << "filter " << m;
  }
}

TEST(LogMelFrontend, PureToneIsLoudestInTheMelBandCentredNearIt) {
  const int window = 256, hop = 128, frames = 4, mel_bins = 16, sample_rate = 16000;
  const TokenGeometry g = audio_geometry(window, hop, frames);
  LogMelFrontend frontend(g, mel_bins, sample_rate);
  auto be = make_cpu_backend();
  const auto edges = mel_edges(mel_bins, sample_rate);
  const std::int64_t A = window + std::int64_t(hop) * (frames - 1);
  const std::vector<std::uint8_t> frame_mask(frames, 1);
  for (int band : {3, 10}) {
    // A tone on the DFT bin nearest the band's centre: no leakage beyond the neighbouring bins.
    const double f = std::round(edges[band + 1] * window / sample_rate) * sample_rate / window;
    ASSERT_GT(f, edges[band]);
    ASSERT_LT(f, edges[band + 2]);
    std::vector<float> audio(A);
    for (std::int64_t i = 0; i < A; ++i) audio[i] = float(std::sin(2.0 * M_PI * f * double(i) / sample_rate));
    auto logmel = poisoned(std::size_t(frames) * mel_bins);
    frontend.forward(*be, audio.data(), A, frame_mask.data(), logmel.data(), 1);
    for (int t = 0; t < frames; ++t) {
      const float* row = logmel.data() + std::size_t(t) * mel_bins;
      EXPECT_EQ(std::max_element(row, row + mel_bins) - row, band) << "tone " << f << " Hz, frame " << t;
    }
  }
}

}  // namespace
}  // namespace avtrain
