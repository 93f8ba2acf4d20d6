// fp16 and bf16 conversions: every one of the 65,536 bit patterns of each type, every rounding
// boundary between neighbouring values, the array (vectorised) paths against the scalar ones, and
// the scalar fp16 path against the CPU's own conversion instruction where there is one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/half.hpp"
#include "core/keyed_random.hpp"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace avtrain {
namespace {

bool is_nan_half(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_nan_bf16(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Independent decoding of a binary16 pattern, in double.
double half_value(std::uint16_t h) {
  const int sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(double(mantissa), -24);
  return sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

TEST(Half, EveryPatternDecodesToItsValueAndRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(std::uint16_t(h));
    if (is_nan_half(std::uint16_t(h))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(float_to_half(f), h | 0x200u) << "NaN stays NaN, made quiet: " << std::hex << h;
      continue;
    }
    ASSERT_EQ(double(f), half_value(std::uint16_t(h))) << std::hex << h;
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
}

TEST(Half, EveryBoundaryBetweenNeighboursRoundsToNearestEven) {
  // Positive finite halves in order; the midpoint of two neighbours is exact in fp32.
  for (std::uint32_t lo = 0; lo < 0x7c00u; ++lo) {
    const std::uint32_t hi = lo + 1;  // 0x7bff + 1 = 0x7c00 is +inf: the overflow boundary
    const double mid = hi == 0x7c00u ? 65520.0 : 0.5 * (half_value(std::uint16_t(lo)) + half_value(std::uint16_t(hi)));
    const float m = float(mid);
    ASSERT_EQ(double(m), mid);
    const std::uint32_t even = (lo & 1u) ? hi : lo;
    for (float sign : {1.0f, -1.0f}) {
      const std::uint32_t s = sign < 0 ? 0x8000u : 0u;
      ASSERT_EQ(float_to_half(sign * m), even | s) << "tie at " << mid;
      ASSERT_EQ(float_to_half(sign * std::nextafter(m, 0.0f)), lo | s) << "just below " << mid;
      ASSERT_EQ(float_to_half(sign * std::nextafter(m, INFINITY)), hi | s) << "just above " << mid;
    }
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(float_to_half(0.0f), 0x0000u);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00u);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00u);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00u);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001u);   // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000u);   // half of it: a tie, to even (zero)
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_TRUE(is_nan_half(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_nan_half(float_to_half(std::numeric_limits<float>::signaling_NaN())));
}

std::vector<float> probe_floats() {
  std::vector<float> v;
  KeyedRandom rng(3, "half-probe");
  for (int i = 0; i < 200000; ++i) v.push_back(bits_float(std::uint32_t(rng.next())));  // every class of float
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = half_to_float(std::uint16_t(h));
    v.push_back(f);
    v.push_back(std::nextafter(f, INFINITY));
    v.push_back(std::nextafter(f, -INFINITY));
  }
  return v;
}

TEST(Half, ArrayPathsGiveTheScalarBits) {
  const std::vector<float> in = probe_floats();
  std::vector<std::uint16_t> h(in.size());
  floats_to_half(in.data(), h.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(h[i], float_to_half(in[i])) << in[i];
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = std::uint16_t(i);
  std::vector<float> back(all.size());
  half_to_floats(all.data(), back.data(), all.size());
  for (std::uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(float_bits(back[i]), float_bits(half_to_float(all[i]))) << i;
}

#if defined(__F16C__)
TEST(Half, ScalarPathAgreesWithTheCpuInstruction) {
  for (float f : probe_floats()) {
    const auto hw = std::uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(float_to_half(f), hw) << f;
  }
  for (std::uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(float_bits(half_to_float(std::uint16_t(h))), float_bits(_cvtsh_ss(std::uint16_t(h)))) << h;
}
#endif

TEST(BFloat16, EveryPatternRoundTripsAndNaNStaysNaN) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(std::uint16_t(b));
    ASSERT_EQ(float_bits(f), b << 16);
    if (is_nan_bf16(std::uint16_t(b))) {
      EXPECT_EQ(float_to_bf16(f), b | 0x40u) << std::hex << b;
    } else {
      ASSERT_EQ(float_to_bf16(f), b) << std::hex << b;
    }
  }
}

TEST(BFloat16, EveryBoundaryBetweenNeighboursRoundsToNearestEven) {
  for (std::uint32_t lo = 0; lo < 0x7f80u; ++lo) {  // positive finite; lo + 1 = 0x7f80 is +inf
    const std::uint32_t tie = (lo << 16) | 0x8000u;  // exactly half-way to the next bf16
    const std::uint32_t even = (lo & 1u) ? lo + 1 : lo;
    for (std::uint32_t s : {0u, 0x80000000u}) {
      ASSERT_EQ(float_to_bf16(bits_float(tie | s)), even | (s >> 16)) << std::hex << lo;
      ASSERT_EQ(float_to_bf16(bits_float((tie - 1) | s)), lo | (s >> 16)) << std::hex << lo;
      ASSERT_EQ(float_to_bf16(bits_float((tie + 1) | s)), (lo + 1) | (s >> 16)) << std::hex << lo;
    }
  }
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds up to +inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

TEST(BFloat16, ArrayPathsGiveTheScalarBits) {
  const std::vector<float> in = probe_floats();
  std::vector<std::uint16_t> b(in.size());
  floats_to_bf16(in.data(), b.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(b[i], float_to_bf16(in[i])) << in[i];
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = std::uint16_t(i);
  std::vector<float> back(all.size());
  bf16_to_floats(all.data(), back.data(), all.size());
  for (std::uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(float_bits(back[i]), i << 16);
}

// Where the compiler targets AVX512-BF16 the array paths use vcvtneps2bf16, which flushes subnormal
// inputs to zero; the lanes it would flush are redone by the scalar rounding. Every position of a
// vector and the scalar tail get a subnormal (ties, the smallest, the largest, both signs) among
// normals, zeros, infinities and NaNs: floats_to_bf16 and round_to_bf16 (with and without the
// patterns) give float_to_bf16's bits.
TEST(BFloat16, ArrayPathsRoundSubnormalLanesLikeTheScalarPath) {
  const std::uint32_t subnormals[] = {0x00000001u, 0x00008000u, 0x00018000u, 0x00007fffu, 0x00008001u,
                                      0x007fffffu, 0x007f8000u, 0x00400000u, 0x0000ffffu};
  const std::uint32_t others[] = {0x3f800000u, 0x3f808000u, 0x00800000u, 0x7f800000u, 0x7fc00001u,
                                  0x7f800001u, 0x00000000u, 0x7f7fffffu, 0x3f818000u, 0x3f7fffffu};
  std::vector<float> in;
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t sub : subnormals)
      for (int lane = 0; lane < 16; ++lane)
        for (int k = 0; k < 16; ++k)
          in.push_back(bits_float(k == lane ? (sub | sign) : (others[(k + lane) % 10] ^ (k & 1 ? 0x80000000u : 0u))));
  for (std::uint32_t sub : subnormals) in.push_back(bits_float(sub));  // the tail: not a whole vector
  std::vector<std::uint16_t> packed(in.size()), rounded_packed(in.size());
  floats_to_bf16(in.data(), packed.data(), in.size());
  std::vector<float> rounded = in, rounded_alone = in;
  round_to_bf16(rounded.data(), rounded_packed.data(), in.size());
  round_to_bf16(rounded_alone.data(), nullptr, in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint16_t want = float_to_bf16(in[i]);
    ASSERT_EQ(packed[i], want) << std::hex << float_bits(in[i]) << " at " << std::dec << i;
    ASSERT_EQ(rounded_packed[i], want) << std::hex << float_bits(in[i]) << " at " << std::dec << i;
    ASSERT_EQ(float_bits(rounded[i]), std::uint32_t(want) << 16) << std::hex << float_bits(in[i]);
    ASSERT_EQ(float_bits(rounded_alone[i]), std::uint32_t(want) << 16) << std::hex << float_bits(in[i]);
  }
}

// Rounding in place (with and without the packed copy) gives the value of the scalar conversion.
TEST(RoundInPlace, MatchesTheScalarConversions) {
  const std::vector<float> in = probe_floats();
  for (bool with_packed : {false, true}) {
    std::vector<float> h = in, b = in;
    std::vector<std::uint16_t> hp(in.size()), bp(in.size());
    round_to_half(h.data(), with_packed ? hp.data() : nullptr, in.size());
    round_to_bf16(b.data(), with_packed ? bp.data() : nullptr, in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(float_bits(h[i]), float_bits(half_to_float(float_to_half(in[i])))) << in[i];
      ASSERT_EQ(float_bits(b[i]), float_bits(bf16_to_float(float_to_bf16(in[i])))) << in[i];
      if (with_packed) {
        ASSERT_EQ(hp[i], float_to_half(in[i])) << in[i];
        ASSERT_EQ(bp[i], float_to_bf16(in[i])) << in[i];
      }
    }
  }
}

}  // namespace
}  // namespace avtrain
