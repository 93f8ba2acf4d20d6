// Stochastic rounding to bf16 (core/stochastic_round.hpp): only the two neighbours are ever chosen,
// a bf16 value never moves, the mean of many roundings is the value (within a statistical bound),
// NaN and inf are kept, and the keyed bits repeat and depend on (key, step, element) alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "core/half.hpp"
#include "core/keyed_random.hpp"
#include "core/stochastic_round.hpp"

namespace avtrain {
namespace {

// The bits of draw i of a test stream.
std::uint32_t bits(std::uint64_t i) { return rounding_bits(rounding_stream(rounding_key(5, "t"), 1), i); }

TEST(StochasticRound, ABf16ValueNeverMoves) {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = bf16_to_float(std::uint16_t(b));
    if (std::isnan(x)) continue;
    for (const std::uint32_t r : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, 0xffffffffu, bits(b)})
      ASSERT_EQ(float_to_bf16_stochastic(x, r), std::uint16_t(b)) << std::hex << b << " r " << r;
  }
}

TEST(StochasticRound, OnlyTheTwoNeighboursAreChosen) {
  KeyedRandom rng(3, "patterns");
  for (int k = 0; k < 200000; ++k) {
    const std::uint32_t x = std::uint32_t(rng.next());
    if ((x & 0x7fffffffu) >= 0x7f800000u) continue;  // finite values here
    const std::uint16_t down = std::uint16_t(x >> 16), got = float_to_bf16_stochastic(bits_float(x), bits(k));
    // Down: the bf16 truncated towards zero; up: the next one away from zero (a carry into inf is right).
    ASSERT_TRUE(got == down || got == std::uint16_t(down + 1)) << std::hex << x << " -> " << got;
    ASSERT_EQ(got & 0x8000u, x >> 31 << 15) << "the sign is kept: " << std::hex << x;
  }
  // Both neighbours of 1 + 2^-9 are reached; a neighbour is one bf16 ulp (2^-7) away.
  std::set<std::uint16_t> seen;
  for (int i = 0; i < 64; ++i) seen.insert(float_to_bf16_stochastic(1.0f + 0x1p-9f, bits(i)));
  EXPECT_EQ(seen, (std::set<std::uint16_t>{0x3f80, 0x3f81}));
}

TEST(StochasticRound, TheMeanOfManyRoundingsIsTheValue) {
  // For p = the value's distance from its lower neighbour in neighbour spacings, the rounded mean's
  // standard error is spacing * sqrt(p (1 - p) / N): allow 5 of them (and a 1e-9 floor for p = 0).
  constexpr int N = 200000;
  for (const float x : {1.0f + 0x1p-9f, 1.0f + 3 * 0x1p-10f, -0.3f, 1.2345678e-3f, 7.654321e20f, 1e-40f, -2.5e-39f}) {
    const std::uint32_t b = float_bits(x);
    const double lo = bf16_to_float(std::uint16_t(b >> 16)), hi = bf16_to_float(std::uint16_t((b >> 16) + 1));
    const double spacing = std::abs(hi - lo), p = std::abs(double(x) - lo) / spacing;
    double sum = 0;
    for (int i = 0; i < N; ++i) sum += bf16_to_float(float_to_bf16_stochastic(x, bits(i)));
    const double mean = sum / N, bound = 5 * spacing * std::sqrt(p * (1 - p) / N) + 1e-9 * spacing;
    EXPECT_NEAR(mean, double(x), bound) << x << ": p " << p;
    // Round to nearest is biased by the whole distance to the nearer neighbour.
    if (p > 0.1 && p < 0.4) EXPECT_GT(std::abs(double(bf16_to_float(float_to_bf16(x))) - x), 20 * bound) << x;
  }
}

TEST(StochasticRound, SmallUpdatesAccumulateWhereNearestCancelsThem) {
  // 1 + 1000 updates of 2^-10 (an eighth of bf16's spacing at 1): nearest rounds every one away,
  // stochastic rounding ends near 1 + 1000 * 2^-10 = 1.977 (the sum of unbiased steps).
  std::uint16_t nearest = float_to_bf16(1.0f), stochastic = nearest;
  const std::uint64_t key = rounding_key(1, "w");
  for (int step = 1; step <= 1000; ++step) {
    nearest = float_to_bf16(bf16_to_float(nearest) + 0x1p-10f);
    stochastic = round_to_bf16(bf16_to_float(stochastic) + 0x1p-10f, Rounding::stochastic,
                               rounding_stream(key, std::uint64_t(step)), 0);
  }
  EXPECT_EQ(bf16_to_float(nearest), 1.0f);
  // The sum of 1000 steps whose roundings add variance (2^-7)^2 / 4 at most each (spacing doubles
  // past 2: bounded by 4 standard deviations of the larger spacing).
  EXPECT_NEAR(bf16_to_float(stochastic), 1.0f + 1000 * 0x1p-10f, 4 * 0x1p-7f * std::sqrt(1000.0) / 2);
}

TEST(StochasticRound, NaNStaysNaNAndInfinityStays) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::uint32_t r : {0u, 0xffffu, 0x12345678u}) {
    EXPECT_EQ(float_to_bf16_stochastic(inf, r), 0x7f80u);
    EXPECT_EQ(float_to_bf16_stochastic(-inf, r), 0xff80u);
    for (const std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu, 0xff800001u}) {
      const std::uint16_t got = float_to_bf16_stochastic(bits_float(nan), r);
      EXPECT_TRUE(std::isnan(bf16_to_float(got))) << std::hex << nan;
      EXPECT_EQ(got, float_to_bf16(bits_float(nan))) << "NaN as nearest makes it: " << std::hex << nan;
    }
    // Past the largest bf16 (0x7f7f): inf of the value's own sign, or the largest; never the other sign.
    const float big = bits_float(0x7f7fffffu);
    EXPECT_TRUE(float_to_bf16_stochastic(big, r) == 0x7f80u || float_to_bf16_stochastic(big, r) == 0x7f7fu);
    EXPECT_TRUE(float_to_bf16_stochastic(-big, r) == 0xff80u || float_to_bf16_stochastic(-big, r) == 0xff7fu);
  }
  EXPECT_EQ(float_to_bf16_stochastic(-0.0f, 0xffffu), 0x8000u);
}

TEST(StochasticRound, TheBitsRepeatAndDependOnKeyStepAndElementAlone) {
  const std::uint64_t key = rounding_key(9, "blocks.0.mlp.fc1.weight");
  EXPECT_EQ(key, rounding_key(9, "blocks.0.mlp.fc1.weight"));
  int same_step = 0, same_element = 0, same_key = 0, same_seed = 0;
  for (std::uint64_t e = 0; e < 10000; ++e) {
    const std::uint32_t b = rounding_bits(rounding_stream(key, 4), e);
    EXPECT_EQ(b, rounding_bits(rounding_stream(key, 4), e));
    same_step += b == rounding_bits(rounding_stream(key, 5), e);
    same_element += b == rounding_bits(rounding_stream(key, 4), e + 1);
    same_key += b == rounding_bits(rounding_stream(rounding_key(9, "blocks.0.mlp.fc2.weight"), 4), e);
    same_seed += b == rounding_bits(rounding_stream(rounding_key(10, "blocks.0.mlp.fc1.weight"), 4), e);
  }
  // 32 random bits agree by chance with probability 2^-32.
  EXPECT_EQ(same_step, 0);
  EXPECT_EQ(same_element, 0);
  EXPECT_EQ(same_key, 0);
  EXPECT_EQ(same_seed, 0);
  // Rounding::nearest is float_to_bf16, whatever the stream.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-12f, Rounding::nearest, 123, 4), float_to_bf16(1.0f + 0x1p-8f + 0x1p-12f));
}

}  // namespace
}  // namespace avtrain
