// bf16 products on oneDNN, forced on (AVTRAIN_ONEDNN=force) whatever the CPU: all four transpose
// combinations at odd sizes, leading dimensions wider than the rows, alpha != 1 and beta 0, 1, 0.5,
// against a double-precision product of the same bf16 values. On a CPU without bf16 units oneDNN
// 2.6 has no bf16 matmul, and the forced path unpacks the operands to fp32 for oneDNN's fp32
// matmul: the glue (strides, alpha, beta, cache) is tested there, oneDNN's bf16 kernel only on a
// CPU with AVX512-BF16 or AMX. Skipped when avtrain is built without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/onednn_gemm.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace avtrain {
namespace {

constexpr std::uint16_t kBf16NaN = 0x7fc0;
constexpr float kCPadding = 12345.0f;  // C's elements between rows: must come back untouched

struct Case {
  Trans ta, tb;
  int M, N, K;
  int lda_pad, ldb_pad, ldc_pad;  // leading dimension = stored columns + pad
  float alpha, beta;
};

std::string describe(const Case& c) {
  return std::string("ta=") + (c.ta == Trans::yes ? "T" : "N") + " tb=" + (c.tb == Trans::yes ? "T" : "N") +
         " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " pads=" + std::to_string(c.lda_pad) + "," + std::to_string(c.ldb_pad) + "," + std::to_string(c.ldc_pad) +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta);
}

// A row-major bf16 operand holding op(X)[rows, cols]; padding between stored rows is NaN, so
// reading it would show.
struct Bf16Matrix {
  std::vector<std::uint16_t> bits;
  int ld;
  Trans t;
  std::uint16_t at(int r, int c) const {  // op(X)[r, c]
    return t == Trans::yes ? bits[std::size_t(c) * ld + r] : bits[std::size_t(r) * ld + c];
  }
};

Bf16Matrix make_operand(Trans t, int rows, int cols, int pad, std::mt19937& rng) {
  const int stored_rows = t == Trans::yes ? cols : rows, stored_cols = t == Trans::yes ? rows : cols;
  Bf16Matrix x{std::vector<std::uint16_t>(std::size_t(stored_rows) * (stored_cols + pad), kBf16NaN), stored_cols + pad, t};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int r = 0; r < stored_rows; ++r)
    for (int c = 0; c < stored_cols; ++c) x.bits[std::size_t(r) * x.ld + c] = float_to_bf16(u(rng));
  return x;
}

// Runs one case and compares with the double-precision product: |C - ref| <= 1e-5 * (the same sum
// over absolute values), the error bound of an fp32-accumulated sum of exact bf16 products.
void check(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  const Bf16Matrix a = make_operand(c.ta, c.M, c.K, c.lda_pad, rng);
  const Bf16Matrix b = make_operand(c.tb, c.K, c.N, c.ldb_pad, rng);
  const int ldc = c.N + c.ldc_pad;
  std::vector<float> C(std::size_t(c.M) * ldc, kCPadding);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < c.N; ++j)  // beta == 0 must not read C: NaN there would show
      C[std::size_t(i) * ldc + j] = c.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : u(rng);
  const std::vector<float> C0 = C;

  cpu::onednn_gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, c.alpha, a.bits.data(), a.ld, b.bits.data(), b.ld, c.beta,
                        C.data(), ldc);

  int bad = 0;
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < c.N; ++j) {
      double sum = 0, magnitude = 0;
      for (int k = 0; k < c.K; ++k) {
        const double p = double(bf16_to_float(a.at(i, k))) * double(bf16_to_float(b.at(k, j)));
        sum += p;
        magnitude += std::fabs(p);
      }
      double ref = double(c.alpha) * sum, bound = std::fabs(double(c.alpha)) * magnitude;
      if (c.beta != 0.0f) {
        ref += double(c.beta) * C0[std::size_t(i) * ldc + j];
        bound += std::fabs(double(c.beta) * C0[std::size_t(i) * ldc + j]);
      }
      const float got = C[std::size_t(i) * ldc + j];
      if (!(std::fabs(got - ref) <= 1e-5 * bound) && ++bad <= 5)
        ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", reference " << ref << " (bound " << 1e-5 * bound
                      << ")";
    }
    for (int j = c.N; j < ldc; ++j)
      if (C[std::size_t(i) * ldc + j] != kCPadding && ++bad <= 5) ADD_FAILURE() << "C padding written at " << i << "," << j;
  }
  EXPECT_EQ(bad, 0);
}

class OneDnnGemm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { setenv("AVTRAIN_ONEDNN", "force", 1); }  // before the first call: decided once
  void SetUp() override {
#if AVTRAIN_HAVE_ONEDNN
    ASSERT_TRUE(cpu::onednn_bf16_enabled()) << cpu::onednn_description();
    RecordProperty("engine", cpu::onednn_description());
#else
    GTEST_SKIP() << cpu::onednn_description();
#endif
  }
};

constexpr Trans kTrans[] = {Trans::no, Trans::yes};

// The backend routes bf16 products here, in bands of C: an fp32 operand holding bf16 values is
// narrowed exactly; the result matches the widened sgemm of the same values, and does not depend
// on the thread count.
TEST_F(OneDnnGemm, BackendBandsGiveTheWidenedProduct) {
  auto be = make_cpu_backend();
  EXPECT_NE(be->gemm_engine(DType::bf16).find("oneDNN"), std::string::npos);
  const int M = 301, N = 67, K = 150;
  std::vector<float> A(std::size_t(M) * K), B(std::size_t(K) * N);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : A) v = u(rng);
  for (float& v : B) v = u(rng);
  std::vector<std::uint16_t> A16(A.size());
  be->round_to(rounded(A.data(), DType::bf16, A16.data()), A.size());
  be->round_to(rounded(B.data(), DType::bf16), B.size());
  std::vector<float> want(std::size_t(M) * N), one(want.size()), two(want.size());
  be->gemm(Trans::no, Trans::yes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, want.data(), N);  // fp32 sgemm
  for (auto [threads, out] : {std::pair{1, &one}, std::pair{2, &two}}) {
    be->set_threads(threads);
    be->gemm(DType::bf16, Trans::no, Trans::yes, M, N, K, 1.0f, Operand{A16.data(), DType::bf16}, K, fp32(B.data()),
             K, 0.0f, out->data(), N);
  }
  EXPECT_EQ(one, two);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(one[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
}

TEST_F(OneDnnGemm, DescriptionSaysForced) {
  const std::string d = cpu::onednn_description();
  EXPECT_EQ(d.rfind("oneDNN ", 0), 0u) << d;
  EXPECT_NE(d.find("forced"), std::string::npos) << d;
}

TEST_F(OneDnnGemm, AllTransposesOddSizesAlphaAndBeta) {
  std::uint32_t seed = 1;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (float beta : {0.0f, 1.0f, 0.5f})
        for (float alpha : {1.0f, -0.75f}) check({ta, tb, 37, 29, 53, 0, 0, 0, alpha, beta}, seed++);
}

TEST_F(OneDnnGemm, LeadingDimensionsWiderThanStoredRows) {
  std::uint32_t seed = 100;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (float beta : {0.0f, 1.0f, 0.5f}) check({ta, tb, 37, 29, 53, 11, 5, 3, 1.5f, beta}, seed++);
}

TEST_F(OneDnnGemm, ThinAndLongShapes) {
  std::uint32_t seed = 200;
  for (Trans ta : kTrans)
    for (Trans tb : kTrans) {
      check({ta, tb, 1, 67, 129, 1, 0, 2, 0.5f, 0.5f}, seed++);   // one row
      check({ta, tb, 45, 1, 7, 0, 3, 0, 2.0f, 1.0f}, seed++);     // one column
      check({ta, tb, 9, 13, 1, 2, 2, 1, -1.0f, 0.0f}, seed++);    // K = 1
      check({ta, tb, 64, 48, 96, 0, 0, 0, 1.0f, 0.0f}, seed++);   // multiples of the kernels' blocks
    }
}

// The same shape again, with other data and another alpha and beta: cached primitives must take
// the new pointers and must not be shared across (alpha, beta).
TEST_F(OneDnnGemm, RepeatedShapesWithNewDataAndScales) {
  for (int round = 0; round < 3; ++round) {
    check({Trans::no, Trans::yes, 37, 29, 53, 4, 0, 1, 0.25f, 0.5f}, 300 + round);
    check({Trans::no, Trans::yes, 37, 29, 53, 4, 0, 1, 3.0f, 1.0f}, 310 + round);
    check({Trans::no, Trans::yes, 37, 29, 53, 4, 0, 1, 0.25f, 0.0f}, 320 + round);
  }
}

// BLAS's quick returns: K == 0 or alpha == 0 gives beta * C without reading A or B.
TEST_F(OneDnnGemm, QuickReturnsDoNotReadOperands) {
  const std::vector<std::uint16_t> nan_a(6 * 4, kBf16NaN), nan_b(4 * 5, kBf16NaN);
  std::vector<float> C(6 * 5, 2.0f);
  cpu::onednn_gemm_bf16(Trans::no, Trans::no, 6, 5, 4, 0.0f, nan_a.data(), 4, nan_b.data(), 5, 0.5f, C.data(), 5);
  for (float x : C) ASSERT_EQ(x, 1.0f);
  cpu::onednn_gemm_bf16(Trans::no, Trans::no, 6, 5, 0, 1.0f, nan_a.data(), 1, nan_b.data(), 5, 0.0f, C.data(), 5);
  for (float x : C) ASSERT_EQ(x, 0.0f);
  cpu::onednn_gemm_bf16(Trans::no, Trans::no, 0, 5, 4, 1.0f, nullptr, 4, nullptr, 5, 0.0f, nullptr, 5);
}

TEST_F(OneDnnGemm, BadLeadingDimensionThrowsWithTheShape) {
  const std::vector<std::uint16_t> a(8 * 8), b(8 * 8);
  std::vector<float> C(8 * 8);
  try {
    cpu::onednn_gemm_bf16(Trans::yes, Trans::no, 8, 8, 8, 1.0f, a.data(), 7, b.data(), 8, 0.0f, C.data(), 8);
    FAIL() << "lda < M with A transposed was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("M=8 N=8 K=8 lda=7"), std::string::npos) << e.what();
  }
}

#if !AVTRAIN_HAVE_ONEDNN
TEST(OneDnnGemmNotBuilt, DisabledAndThrows) {
  EXPECT_FALSE(cpu::onednn_bf16_enabled());
  EXPECT_EQ(cpu::onednn_description(), "oneDNN not built");
  const std::vector<std::uint16_t> a(4), b(4);
  std::vector<float> C(4);
  EXPECT_THROW(cpu::onednn_gemm_bf16(Trans::no, Trans::no, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, C.data(), 2),
               Error);
}
#endif

}  // namespace
}  // namespace avtrain
