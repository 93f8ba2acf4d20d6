// The CUDA backend's FP8 side against the CPU backend's emulation (the oracle: core/fp8's conversions,
// themselves checked against CUDA's cuda_fp8.h by test_fp8_cuda_reference):
// - pack with a scale (the quantizing kernel) gives the CPU's codes bit for bit, for every bf16 pattern
//   widened, fp32 values over the whole range, ties, subnormals, saturation, infinities and NaN;
//   unpack (the dequantizing kernel) gives the CPU's values for every code;
// - gemm with fp8 operands (cuBLASLt's FP8 matmul) gives the CPU's emulated product up to the order of
//   the fp32 sums, for the linear's three products in their layouts (forward E4M3 x E4M3 as A B^T,
//   dgrad E5M2 x E4M3 as A B, wgrad E5M2 x E4M3 as A^T B), sizes off multiples of 16 in each of M, N
//   and K, padded leading dimensions (C's padding left alone), beta 0 (C poisoned) and beta 1; and
//   every product went through cuBLASLt;
// - E5M2 x E5M2 is refused; on a GPU older than sm_89 an FP8 product is refused in one line naming
//   the GPU and precision.mode (and the rest skipped).
// Exit 77 (CTest: skipped) where no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/fp8.hpp"
#include "core/keyed_random.hpp"
#include "cuda_backend.hpp"
#include "device_gate.hpp"
#include "device_query.hpp"

namespace avtrain {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::unique_ptr<Backend> g_cpu;
std::unique_ptr<cuda::CudaBackend> g_gpu;
std::string g_refusal;  // why this GPU takes no FP8 product ("" where it does)

// Device memory of n elements of T, freed on scope exit.
template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()), p_(static_cast<T*>(g_gpu->allocate(n_ * sizeof(T)))) {
    g_gpu->upload(p_, host.data(), n_ * sizeof(T));
  }
  ~Dev() { g_gpu->deallocate(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> download() const {
    std::vector<T> host(n_);
    g_gpu->download(host.data(), p_, n_ * sizeof(T));
    return host;
  }
  T* get() const { return p_; }

 private:
  std::size_t n_;
  T* p_;
};

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_refusal.empty()) GTEST_SKIP() << g_refusal;
  }
};

// Every bf16 pattern widened (65536), then fp32 values over the whole range, ties between fp8 codes,
// and the specials; scaled by `scale` inside pack.
std::vector<float> quantize_inputs() {
  std::vector<float> x;
  for (std::uint32_t p = 0; p < 65536; ++p) x.push_back(from_bits(p << 16));
  KeyedRandom rng(20261207, "fp8 inputs");
  for (int i = 0; i < 30000; ++i) {
    const float sign = rng.uniform() < 0.5 ? -1.0f : 1.0f;
    if (i % 3 == 0) x.push_back(sign * float(std::exp2(rng.uniform(-149.0, 127.9))));
    else if (i % 3 == 1) x.push_back(sign * float(std::exp2(rng.uniform(-20.0, 17.0))));
    else x.push_back(from_bits(std::uint32_t(rng.next())));
  }
  // Halfway between neighbouring codes of either format (exact in fp32): round to nearest even.
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (int v = 0; v < 0x7E; ++v) {
      const float a = fp8_to_float(f, std::uint8_t(v)), b = fp8_to_float(f, std::uint8_t(v + 1));
      if (std::isfinite(a) && std::isfinite(b)) x.insert(x.end(), {(a + b) / 2, -(a + b) / 2});
    }
  for (float s : {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, 448.0f, 464.0f, 57344.0f, 61440.0f, 1e30f, -1e30f})
    x.push_back(s);
  return x;
}

TEST_F(CudaFp8, PackWithAScaleGivesTheCpuCodesBitForBit) {
  const std::vector<float> x = quantize_inputs();
  const Dev<float> dx(x);
  for (DType t : {DType::e4m3, DType::e5m2})
    for (float scale : {1.0f, 20.0f, 0.375f, 3.1e-5f}) {
      std::vector<std::uint8_t> want(x.size());
      g_cpu->pack(x.data(), {want.data(), t, &scale}, x.size());
      const Dev<float> dscale({scale});
      const Dev<std::uint8_t> dcodes(std::vector<std::uint8_t>(x.size(), 0xA5));
      g_gpu->pack(dx.get(), {dcodes.get(), t, dscale.get()}, x.size());
      const std::vector<std::uint8_t> got = dcodes.download();
      std::size_t wrong = 0, first = 0;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (got[i] != want[i] && wrong++ == 0) first = i;
      EXPECT_EQ(wrong, 0u) << dtype_name(t) << " scale " << scale << ": first at " << first << " (x bits 0x" << std::hex
                           << bits_of(x[first]) << "): got 0x" << int(got[first]) << ", want 0x" << int(want[first]);
    }
}

// quantize (one pass on the GPU) against the CPU's: the same codes and the same statistics (amax and
// smallest non-zero bits, underflow and saturation counts), from fp32, bf16 and fp16 tensors, folded
// into statistics already held (an amax kept where larger, a minimum kept where smaller, counts added),
// NaN as the amax where the tensor holds one; no statistics asked, none written.
TEST_F(CudaFp8, QuantizeGivesTheCodesAndTheStatisticsOfTheCpu) {
  std::vector<float> x = quantize_inputs();
  std::vector<float> finite;
  for (float v : x)
    if (std::isfinite(v) && std::fabs(v) < 1e4f) finite.push_back(v);
  finite[3] = 1e-30f;  // underflows at either scale
  for (DType store : {DType::f32, DType::bf16, DType::f16})
    for (bool with_nan : {false, true})
      for (float start : {0.0f, 3.0e3f, 1.0e6f}) {
        std::vector<float> values = finite;
        if (with_nan) values[values.size() / 2] = kNaN;
        std::vector<std::uint16_t> bits16(values.size());
        if (store != DType::f32) g_cpu->pack(values.data(), {bits16.data(), store}, values.size());
        const Operand host = store == DType::f32 ? fp32(values.data()) : Operand{bits16.data(), store};
        const DType t = start == 0.0f ? DType::e4m3 : DType::e5m2;
        float scale = t == DType::e4m3 ? 0.5f : 8.0f;  // some values saturate in each
        std::vector<std::uint8_t> want(values.size());
        std::vector<float> scratch(values.size());
        const Fp8CastStats held{start, start == 0.0f ? 0.0f : 1e-3f, 7, 2};
        Fp8CastStats want_stats = held;
        g_cpu->quantize(host, {want.data(), t, &scale}, values.size(), &want_stats, scratch.data());
        ASSERT_GT(want_stats.saturated, held.saturated) << "the inputs saturate somewhere";

        const Dev<float> dvalues(values);
        const Dev<std::uint16_t> dbits(bits16);
        const Operand device = store == DType::f32 ? fp32(dvalues.get()) : Operand{dbits.get(), store};
        const Dev<float> dscale({scale}), dscratch(std::vector<float>(values.size(), kNaN));
        const Dev<Fp8CastStats> dstats({held});
        const Dev<std::uint8_t> dcodes(std::vector<std::uint8_t>(values.size(), 0xA5));
        g_gpu->quantize(device, {dcodes.get(), t, dscale.get()}, values.size(), dstats.get(), dscratch.get());
        const std::string what = std::string(dtype_name(store)) + " -> " + dtype_name(t) +
                                 (with_nan ? ", a NaN in it" : "") + ", amax from " + std::to_string(start);
        EXPECT_EQ(dcodes.download(), want) << what;
        const Fp8CastStats got = dstats.download()[0];
        if (std::isnan(want_stats.amax)) EXPECT_TRUE(std::isnan(got.amax)) << what << ": got " << got.amax;
        else EXPECT_EQ(bits_of(got.amax), bits_of(want_stats.amax)) << what << ": got " << got.amax;
        EXPECT_EQ(bits_of(got.min_nonzero), bits_of(want_stats.min_nonzero)) << what;
        EXPECT_EQ(got.underflow, want_stats.underflow) << what;
        EXPECT_EQ(got.saturated, want_stats.saturated) << what;
        // Without statistics: the same codes, nothing else.
        const Dev<std::uint8_t> again(std::vector<std::uint8_t>(values.size(), 0xA5));
        g_gpu->quantize(device, {again.get(), t, dscale.get()}, values.size(), nullptr, dscratch.get());
        EXPECT_EQ(again.download(), want) << what << ", no statistics";
      }
}

// Every code of each format, twice over, with a scale whose inverse is not a power of two.
TEST_F(CudaFp8, UnpackGivesTheCpuValuesForEveryCode) {
  std::vector<std::uint8_t> codes(512);
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = std::uint8_t(i);
  const Dev<std::uint8_t> dcodes(codes);
  for (DType t : {DType::e4m3, DType::e5m2})
    for (float scale : {1.0f, 3.0f}) {
      std::vector<float> want(codes.size());
      g_cpu->unpack({codes.data(), t, &scale}, want.data(), codes.size());
      const Dev<float> dscale({scale});
      const Dev<float> dx(std::vector<float>(codes.size(), from_bits(0xffffffffu)));
      g_gpu->unpack({dcodes.get(), t, dscale.get()}, dx.get(), codes.size());
      const std::vector<float> got = dx.download();
      for (std::size_t i = 0; i < codes.size(); ++i) {
        // A NaN code gives NaN on both (the GPU's multiply may return its canonical NaN).
        if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << dtype_name(t) << " code " << i;
        else EXPECT_EQ(bits_of(got[i]), bits_of(want[i])) << dtype_name(t) << " code " << i << " scale " << scale;
      }
    }
}

struct Fp8GemmCase {
  const char* name;
  Trans ta, tb;
  DType a_type, b_type;
  int M, N, K;
  int pad;  // added to every leading dimension
  float beta;
};

// Random operands quantized by the CPU with scales from their amax (as the delayed scaling would).
struct Quantized {
  std::vector<std::uint8_t> codes;
  float scale;
};
Quantized quantized(std::size_t n, const std::string& key, DType t, double spread) {
  KeyedRandom rng(20261207, key);
  std::vector<float> v(n);
  float amax = 0;
  for (float& x : v) {
    x = float(rng.normal() * std::exp(rng.uniform(-spread, spread)));
    amax = std::max(amax, std::fabs(x));
  }
  Quantized q{std::vector<std::uint8_t>(n), fp8_max(fp8_format(t)) / amax};
  g_cpu->pack(v.data(), {q.codes.data(), t, &q.scale}, n);
  return q;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return kInf;
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

class CudaFp8Gemm : public CudaFp8, public ::testing::WithParamInterface<Fp8GemmCase> {};

TEST_P(CudaFp8Gemm, MatchesTheCpuEmulationAndLeavesCsPaddingAlone) {
  const Fp8GemmCase c = GetParam();
  const int a_rows = c.ta == Trans::no ? c.M : c.K, a_cols = c.ta == Trans::no ? c.K : c.M;
  const int b_rows = c.tb == Trans::no ? c.K : c.N, b_cols = c.tb == Trans::no ? c.N : c.K;
  const int lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const Quantized A = quantized(std::size_t(a_rows) * lda, std::string(c.name) + ".A", c.a_type, 2.0);
  const Quantized B = quantized(std::size_t(b_rows) * ldb, std::string(c.name) + ".B", c.b_type, 2.0);
  std::vector<float> C0(std::size_t(c.M) * ldc);
  KeyedRandom rng(20261207, std::string(c.name) + ".C");
  for (float& v : C0) v = c.beta == 0.0f ? kNaN : float(rng.normal());
  const float alpha = 0.75f;

  std::vector<float> want = C0;
  g_cpu->gemm(DType::e4m3, c.ta, c.tb, c.M, c.N, c.K, alpha, {A.codes.data(), c.a_type, &A.scale}, lda,
              {B.codes.data(), c.b_type, &B.scale}, ldb, c.beta, want.data(), ldc);
  const Dev<std::uint8_t> dA(A.codes), dB(B.codes);
  const Dev<float> sa({A.scale}), sb({B.scale}), dC(C0);
  const long long before = g_gpu->fp8_products();
  g_gpu->gemm(DType::e4m3, c.ta, c.tb, c.M, c.N, c.K, alpha, {dA.get(), c.a_type, sa.get()}, lda,
              {dB.get(), c.b_type, sb.get()}, ldb, c.beta, dC.get(), ldc);
  const std::vector<float> got = dC.download();
  EXPECT_GT(g_gpu->fp8_products(), before) << "the product did not go through cuBLASLt's FP8 matmul";

  std::vector<float> got_block, want_block;
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < ldc; ++j) {
      const std::size_t e = std::size_t(i) * ldc + j;
      if (j < c.N) {
        got_block.push_back(got[e]);
        want_block.push_back(want[e]);
      } else {
        ASSERT_EQ(bits_of(got[e]), bits_of(C0[e])) << "padding of C written at (" << i << ", " << j << ")";
      }
    }
  // The same exact products summed in fp32 in another order, and the same factor: ~1e-7.
  EXPECT_LE(relative_l2(got_block, want_block), 1e-5);
}

const Fp8GemmCase kCases[] = {
    // The linear's products: forward y = x W^T, dgrad dx = dy W, wgrad dW = dy^T x.
    {"forward_aligned", Trans::no, Trans::yes, DType::e4m3, DType::e4m3, 64, 48, 80, 0, 0.0f},
    {"forward_rows_off_16", Trans::no, Trans::yes, DType::e4m3, DType::e4m3, 1049, 96, 64, 0, 0.0f},
    {"forward_beta1", Trans::no, Trans::yes, DType::e4m3, DType::e4m3, 37, 48, 64, 0, 1.0f},
    {"dgrad", Trans::no, Trans::no, DType::e5m2, DType::e4m3, 53, 64, 48, 0, 0.0f},
    {"dgrad_n_off_16", Trans::no, Trans::no, DType::e5m2, DType::e4m3, 37, 40, 48, 0, 0.0f},
    {"wgrad_k_off_16", Trans::yes, Trans::no, DType::e5m2, DType::e4m3, 48, 64, 1049, 0, 0.0f},
    {"wgrad_all_off_16", Trans::yes, Trans::no, DType::e5m2, DType::e4m3, 21, 35, 77, 0, 1.0f},
    // Padded leading dimensions (every operand copied; C's padding left alone).
    {"forward_padded", Trans::no, Trans::yes, DType::e4m3, DType::e4m3, 40, 32, 64, 5, 0.0f},
    {"transposes_padded", Trans::yes, Trans::yes, DType::e4m3, DType::e5m2, 33, 48, 96, 3, 1.0f},
    {"long_k", Trans::no, Trans::yes, DType::e4m3, DType::e4m3, 128, 256, 4096, 0, 0.0f},
};

INSTANTIATE_TEST_SUITE_P(TheLinearsProductsAndOddShapes, CudaFp8Gemm, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Fp8GemmCase>& info) { return std::string(info.param.name); });

TEST_F(CudaFp8, TheProductRunsTwiceToTheSameBits) {
  const int M = 1049, N = 64, K = 96;
  const Quantized A = quantized(std::size_t(M) * K, "twice.A", DType::e5m2, 1.0);
  const Quantized B = quantized(std::size_t(K) * N, "twice.B", DType::e4m3, 1.0);
  const Dev<std::uint8_t> dA(A.codes), dB(B.codes);
  const Dev<float> sa({A.scale}), sb({B.scale});
  auto run = [&] {
    const Dev<float> dC(std::vector<float>(std::size_t(M) * N, kNaN));
    g_gpu->gemm(DType::e5m2, Trans::no, Trans::no, M, N, K, 1.0f, {dA.get(), DType::e5m2, sa.get()}, K,
                {dB.get(), DType::e4m3, sb.get()}, N, 0.0f, dC.get(), N);
    return dC.download();
  };
  const std::vector<float> first = run(), second = run();
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

TEST_F(CudaFp8, E5m2TimesE5m2IsRefused) {
  const std::vector<std::uint8_t> zeros(16 * 16, 0);
  const Dev<std::uint8_t> dA(zeros), dB(zeros);
  const Dev<float> scale({1.0f}), dC(std::vector<float>(16 * 16, 0.0f));
  EXPECT_THROW(g_gpu->gemm(DType::e5m2, Trans::no, Trans::yes, 16, 16, 16, 1.0f, {dA.get(), DType::e5m2, scale.get()},
                           16, {dB.get(), DType::e5m2, scale.get()}, 16, 0.0f, dC.get(), 16),
               Error);
}

// Below sm_89: the product is refused in the one line of fp8_refusal (naming the GPU and the option).
TEST(CudaFp8OldGpu, AnFp8ProductIsRefusedInOneLineBelowSm89) {
  if (g_refusal.empty()) GTEST_SKIP() << "this GPU takes FP8 products";
  const std::vector<std::uint8_t> zeros(16 * 16, 0);
  const Dev<std::uint8_t> dA(zeros), dB(zeros);
  const Dev<float> scale({1.0f}), dC(std::vector<float>(16 * 16, 0.0f));
  try {
    g_gpu->gemm(DType::e4m3, Trans::no, Trans::yes, 16, 16, 16, 1.0f, {dA.get(), DType::e4m3, scale.get()}, 16,
                {dB.get(), DType::e4m3, scale.get()}, 16, 0.0f, dC.get(), 16);
    FAIL() << "an FP8 product ran below sm_89";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), g_refusal);
    EXPECT_NE(g_refusal.find("precision.mode"), std::string::npos);
  }
}

}  // namespace
}  // namespace avtrain

int main(int argc, char** argv) {
  // Skipped only without a device to see; any other CUDA error fails (cuda_device_check.cpp).
  if (const int code = avtrain::cuda::device_gate(avtrain::cuda::probe_devices()); code != 0) return code;
  ::testing::InitGoogleTest(&argc, argv);
  avtrain::g_cpu = avtrain::make_cpu_backend();
  avtrain::g_cpu->set_threads(int(std::max(1u, std::thread::hardware_concurrency())));
  avtrain::cuda::CudaOptions options;
  options.device = 0;
  avtrain::g_gpu = std::make_unique<avtrain::cuda::CudaBackend>(options);
  avtrain::g_refusal = avtrain::cuda::fp8_refusal(0);
  std::printf("%s: %s\n", avtrain::cuda::describe_device(0).c_str(),
              avtrain::g_refusal.empty() ? "FP8 products through cuBLASLt" : avtrain::g_refusal.c_str());
  const int rc = RUN_ALL_TESTS();
  avtrain::g_gpu.reset();
  avtrain::g_cpu.reset();
  return rc;
}
