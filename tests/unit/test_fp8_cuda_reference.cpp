// The E4M3 and E5M2 conversions against CUDA's own (cuda_fp8.hpp, compiled here as host code): the
// reference the GPU side converts with (__NV_SATFINITE, round to nearest even). Every fp8 pattern's
// value, and fp32 -> fp8 for every midpoint between neighbours and its fp32 neighbours, and for every
// 97th fp32 pattern (44 million, all exponents, NaNs and infinities).
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/fp8.hpp"

namespace avtrain {
namespace {

__nv_fp8_interpretation_t cuda_format(Fp8Format f) { return f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2; }

std::uint8_t cuda_encode(Fp8Format f, float x) {
  return std::uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, cuda_format(f)));
}

// CUDA decodes fp8 to fp16 (exact: both formats fit in it); our half_to_float widens that exactly.
float cuda_decode(Fp8Format f, std::uint8_t v) {
  return half_to_float(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(v), cuda_format(f)).x);
}

class Fp8AgainstCuda : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8AgainstCuda, EveryPatternDecodesAlike) {
  const Fp8Format f = GetParam();
  for (int p = 0; p < 256; ++p) {
    const float ours = fp8_to_float(f, std::uint8_t(p)), theirs = cuda_decode(f, std::uint8_t(p));
    if (std::isnan(theirs)) {
      ASSERT_TRUE(std::isnan(ours)) << std::hex << p;
      continue;
    }
    ASSERT_EQ(float_bits(ours), float_bits(theirs)) << std::hex << p;
  }
}

TEST_P(Fp8AgainstCuda, EveryMidpointAndItsNeighboursEncodeAlike) {
  const Fp8Format f = GetParam();
  const int largest = f == Fp8Format::e4m3 ? 0x7E : 0x7B;
  for (int lo = 0; lo <= largest; ++lo) {
    const float a = fp8_to_float(f, std::uint8_t(lo));
    const float b = lo < largest ? fp8_to_float(f, std::uint8_t(lo + 1)) : 2 * a;
    const float mid = 0.5f * (a + b);
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
      for (float s : {x, -x}) ASSERT_EQ(float_to_fp8(f, s), cuda_encode(f, s)) << s;
  }
}

TEST_P(Fp8AgainstCuda, SampledFp32PatternsEncodeAlike) {
  const Fp8Format f = GetParam();
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 97) {
    const float x = bits_float(std::uint32_t(bits));
    const std::uint8_t ours = float_to_fp8(f, x), theirs = cuda_encode(f, x);
    ASSERT_EQ(ours, theirs) << "fp32 0x" << std::hex << bits << " (" << x << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8AgainstCuda, ::testing::Values(Fp8Format::e4m3, Fp8Format::e5m2),
                         [](const auto& info) { return std::string(enum_name(info.param)); });

}  // namespace
}  // namespace avtrain
