// E4M3 and E5M2 conversions: every one of the 256 patterns of each format against a table computed
// here from the format's definition; every rounding boundary between neighbouring values (the midpoint
// and the fp32 values either side of it), the saturation boundary, NaN, signed zero; 17 million fp32
// patterns spread over all exponents, and 4 million random ones, against a slow reference that picks
// the nearest of the 256 values (ties to the even pattern); and the array paths against the scalar.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp8.hpp"
#include "core/keyed_random.hpp"

namespace avtrain {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A format as its definition states it, independent of the code under test.
struct Definition {
  Fp8Format format;
  int exponent_bits, mantissa_bits, bias;
  bool ieee_specials;  // true: the top exponent is inf/NaN (E5M2); false: only S.1111.111 is NaN (E4M3fn)
};
void PrintTo(const Definition& d, std::ostream* out) { *out << enum_name(d.format); }
constexpr Definition kE4M3{Fp8Format::e4m3, 4, 3, 7, false};
constexpr Definition kE5M2{Fp8Format::e5m2, 5, 2, 15, true};

double defined_value(const Definition& d, int pattern) {
  const double sign = pattern & 0x80 ? -1.0 : 1.0;
  const int exponent = (pattern >> d.mantissa_bits) & ((1 << d.exponent_bits) - 1);
  const int mantissa = pattern & ((1 << d.mantissa_bits) - 1);
  const int top = (1 << d.exponent_bits) - 1;
  if (d.ieee_specials && exponent == top) return mantissa ? kNaN : sign * INFINITY;
  if (!d.ieee_specials && exponent == top && mantissa == (1 << d.mantissa_bits) - 1) return kNaN;
  const double fraction = double(mantissa) / double(1 << d.mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - d.bias);
  return sign * std::ldexp(1.0 + fraction, exponent - d.bias);
}

// The non-negative finite patterns, in increasing order of value (for both formats the codes
// 0x00 .. largest order as their values do; checked in the test that uses them).
std::vector<int> positive_finite_patterns(const Definition& d) {
  std::vector<int> codes;
  for (int p = 0; p < 128; ++p)
    if (std::isfinite(defined_value(d, p))) codes.push_back(p);
  return codes;
}

// The slow reference: the finite pattern nearest to x, the even pattern of a tie, saturating (a
// value beyond the largest is nearest to the largest); NaN gives 0x7F.
std::uint8_t nearest_pattern(const Definition& d, const std::vector<int>& codes, float x) {
  if (std::isnan(x)) return kFp8NaN;
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (std::isinf(a)) return std::uint8_t(codes.back() | sign);
  auto above = std::lower_bound(codes.begin(), codes.end(), a,
                                [&](int code, double v) { return defined_value(d, code) < v; });
  if (above == codes.end()) return std::uint8_t(codes.back() | sign);
  if (above == codes.begin()) return std::uint8_t(*above | sign);
  const int hi = *above, lo = *(above - 1);
  const double to_lo = a - defined_value(d, lo), to_hi = defined_value(d, hi) - a;
  const int chosen = to_lo < to_hi ? lo : to_hi < to_lo ? hi : (lo % 2 == 0 ? lo : hi);
  return std::uint8_t(chosen | sign);
}

std::uint8_t encode(const Definition& d, float x) { return float_to_fp8(d.format, x); }
float decode(const Definition& d, std::uint8_t v) { return fp8_to_float(d.format, v); }

class Fp8 : public ::testing::TestWithParam<Definition> {};

TEST_P(Fp8, EveryPatternDecodesToItsDefinedValueAndRoundTrips) {
  const Definition d = GetParam();
  int nans = 0;
  for (int p = 0; p < 256; ++p) {
    const double want = defined_value(d, p);
    const float got = decode(d, std::uint8_t(p));
    if (std::isnan(want)) {
      ++nans;
      ASSERT_TRUE(std::isnan(got)) << std::hex << p;
      EXPECT_EQ(encode(d, got), kFp8NaN) << std::hex << p;
      continue;
    }
    ASSERT_EQ(double(got), want) << std::hex << p;
    ASSERT_EQ(std::signbit(got), (p & 0x80) != 0) << std::hex << p;  // -0 decodes to -0
    if (std::isinf(want)) continue;  // E5M2's inf saturates (next test)
    ASSERT_EQ(encode(d, got), p) << std::hex << p;
  }
  EXPECT_EQ(nans, d.ieee_specials ? 6 : 2);
  EXPECT_TRUE(std::isnan(defined_value(d, kFp8NaN)));  // the pattern NaN converts to is NaN in both
}

TEST_P(Fp8, LargestSmallestAndTheNamedConstants) {
  const Definition d = GetParam();
  const std::vector<int> codes = positive_finite_patterns(d);
  EXPECT_EQ(double(fp8_max(d.format)), defined_value(d, codes.back()));
  EXPECT_EQ(codes.back(), d.ieee_specials ? 0x7B : 0x7E);
  EXPECT_EQ(fp8_max(Fp8Format::e4m3), 448.0f);
  EXPECT_EQ(fp8_max(Fp8Format::e5m2), 57344.0f);
  const double smallest = defined_value(d, 1);
  EXPECT_EQ(smallest, d.ieee_specials ? 0x1p-16 : 0x1p-9);
  EXPECT_EQ(decode(d, 1), float(smallest));
  for (std::size_t i = 1; i < codes.size(); ++i)
    ASSERT_LT(defined_value(d, codes[i - 1]), defined_value(d, codes[i])) << "the codes order as their values";
}

TEST_P(Fp8, EveryBoundaryBetweenNeighboursRoundsToNearestEven) {
  const Definition d = GetParam();
  const std::vector<int> codes = positive_finite_patterns(d);
  for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
    const int lo = codes[i], hi = codes[i + 1];
    const double mid = 0.5 * (defined_value(d, lo) + defined_value(d, hi));
    const float m = float(mid);
    ASSERT_EQ(double(m), mid);
    const int even = lo % 2 == 0 ? lo : hi;
    for (int sign : {0, 0x80}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(encode(d, s * m), even | sign) << "tie at " << mid;
      ASSERT_EQ(encode(d, s * std::nextafter(m, 0.0f)), lo | sign) << "just below " << mid;
      ASSERT_EQ(encode(d, s * std::nextafter(m, INFINITY)), hi | sign) << "just above " << mid;
      ASSERT_EQ(encode(d, s * float(defined_value(d, lo))), lo | sign);
    }
  }
}

// Saturation (__NV_SATFINITE): beyond the largest finite value, up to and including +-inf, is
// +-largest — in E4M3 the next step up would be the NaN pattern, in E5M2 inf.
TEST_P(Fp8, BeyondTheLargestSaturatesAndNaNStaysNaN) {
  const Definition d = GetParam();
  const int largest = d.ieee_specials ? 0x7B : 0x7E;
  const float max = fp8_max(d.format);
  const float half_step_up = d.ieee_specials ? 61440.0f : 464.0f;  // the midpoint to the next binade step
  for (float x : {std::nextafter(max, INFINITY), std::nextafter(half_step_up, 0.0f), half_step_up,
                  std::nextafter(half_step_up, INFINITY), 2 * max, 1e30f, std::numeric_limits<float>::max(),
                  INFINITY}) {
    EXPECT_EQ(encode(d, x), largest) << x;
    EXPECT_EQ(encode(d, -x), largest | 0x80) << -x;
  }
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::signaling_NaN(), bits_float(0x7F800001u), bits_float(0xFFFFFFFFu)};
  for (float x : nans) EXPECT_EQ(encode(d, x), kFp8NaN) << std::hex << float_bits(x);
}

TEST_P(Fp8, SignedZeroAndTheSmallestValues) {
  const Definition d = GetParam();
  const float smallest = decode(d, 1);
  EXPECT_EQ(encode(d, 0.0f), 0x00);
  EXPECT_EQ(encode(d, -0.0f), 0x80);
  EXPECT_EQ(encode(d, std::numeric_limits<float>::denorm_min()), 0x00);   // fp32 subnormal
  EXPECT_EQ(encode(d, -std::numeric_limits<float>::min()), 0x80);         // the smallest fp32 normal
  EXPECT_EQ(encode(d, 0.5f * smallest), 0x00);                            // a tie: to the even zero
  EXPECT_EQ(encode(d, -0.5f * smallest), 0x80);
  EXPECT_EQ(encode(d, std::nextafter(0.5f * smallest, 1.0f)), 0x01);
  EXPECT_EQ(encode(d, 1.5f * smallest), 0x02);                            // a tie: to the even 2
  EXPECT_EQ(encode(d, 2.5f * smallest), 0x02);
  EXPECT_TRUE(std::signbit(decode(d, 0x80)));
  EXPECT_EQ(decode(d, 0x80), 0.0f);
}

// Every 251st fp32 pattern (17 million, all exponents and signs, NaNs and infinities included) and 4
// million random ones against the slow reference.
TEST_P(Fp8, SampledFp32PatternsMatchTheNearestValueReference) {
  const Definition d = GetParam();
  const std::vector<int> codes = positive_finite_patterns(d);
  std::uint64_t checked = 0;
  auto check = [&](std::uint32_t bits) {
    const float x = bits_float(bits);
    const std::uint8_t want = nearest_pattern(d, codes, x), got = encode(d, x);
    ++checked;
    if (got != want) {
      ADD_FAILURE() << "fp32 0x" << std::hex << bits << " (" << x << "): got 0x" << int(got) << ", want 0x"
                    << int(want);
      return false;
    }
    return true;
  };
  for (std::uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 251)
    if (!check(std::uint32_t(bits))) return;
  KeyedRandom random(43, "fp8 patterns");
  for (int i = 0; i < (1 << 22); ++i)
    if (!check(std::uint32_t(random.next()))) return;
  EXPECT_GT(checked, 21'000'000u);
}

TEST_P(Fp8, ArrayPathsGiveTheScalarBits) {
  const Definition d = GetParam();
  KeyedRandom random(7, "fp8 arrays");
  std::vector<float> x(1003);
  for (float& v : x) v = float(random.normal() * 100.0);
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = std::numeric_limits<float>::quiet_NaN(), x[3] = -0.0f, x[4] = 1e-12f;
  for (const float scale : {1.0f, 3.0f, 0.013f, 1024.0f}) {
    std::vector<std::uint8_t> q(x.size());
    quantize_fp8(d.format, x.data(), scale, q.data(), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], encode(d, x[i] * scale)) << i;
  }
  std::vector<std::uint8_t> all(256 + 5);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = std::uint8_t(i);
  for (const float factor : {1.0f, 0.25f, 1.0f / 3.0f}) {
    std::vector<float> y(all.size());
    dequantize_fp8(d.format, all.data(), factor, y.data(), all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = decode(d, all[i]) * factor;
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(y[i])) << i;
      else
        ASSERT_EQ(float_bits(y[i]), float_bits(want)) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8, ::testing::Values(kE4M3, kE5M2),
                         [](const auto& info) { return std::string(enum_name(info.param.format)); });

TEST(AbsMax, LargestMagnitudeAndNaNAndEmpty) {
  const std::vector<float> x = {1.0f, -7.5f, 3.0f, -0.0f, 2.0f};
  EXPECT_EQ(abs_max(x.data(), x.size()), 7.5f);
  EXPECT_EQ(abs_max(x.data(), 0), 0.0f);
  std::vector<float> big(1000, 0.5f);
  big[617] = -INFINITY;
  EXPECT_EQ(abs_max(big.data(), big.size()), INFINITY);
  big[300] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(abs_max(big.data(), big.size())));
  big[300] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(abs_max(big.data(), big.size())));
}

}  // namespace
}  // namespace avtrain
