// The rule that keeps the own flash kernels off a GPU whose shared memory a block cannot hold their
// tiles (cuda/flash_attention_layout.hpp): checked on each architecture's opt-in limit, without a GPU.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "flash_attention_layout.hpp"

namespace fl = avtrain::cuda::flash;

namespace {

// cudaDevAttrMaxSharedMemoryPerBlockOptin by compute capability (CUDA C++ Programming Guide, the table
// of technical specifications per compute capability: 163, 99, 227 KiB).
struct Arch {
  const char* sm;
  std::size_t optin;
};
constexpr std::size_t KiB = 1024;
constexpr Arch kArchs[] = {{"sm_80", 163 * KiB}, {"sm_86", 99 * KiB},  {"sm_87", 163 * KiB}, {"sm_89", 99 * KiB},
                           {"sm_90", 227 * KiB}, {"sm_100", 227 * KiB}, {"sm_120", 99 * KiB}};

bool small_shared(const Arch& a) { return a.optin < 100 * KiB; }

}  // namespace

TEST(FlashAttentionFit, TheLayoutsAskForTheBytesTheReviewCounted) {
  // Counted from the tiles by hand: 64-row q, k, v (forward) or four 64-row tiles (backward) of hd + 8
  // 16-bit columns, and per warp an fp32 score tile and 16-bit P (and dS) tiles.
  EXPECT_EQ(fl::forward_bytes(128), 112960u);
  EXPECT_EQ(fl::backward_bytes(128), 106304u);
  EXPECT_EQ(fl::forward_bytes(64), 72000u);
  EXPECT_EQ(fl::forward_bytes(48), 0u) << "no kernel at head dimension 48";
  // Every piece of the carved memory starts on 32 bytes (WMMA's loads need 256-bit alignment).
  EXPECT_EQ(fl::ForwardLayout<128>::o * 2 % 32, 0);
  EXPECT_EQ(fl::BackwardLayout<128>::numbers * 2 % 32, 0);
}

TEST(FlashAttentionFit, HeadDimension128FitsOnlyWhereABlockMayHoldMoreThan99KiB) {
  for (const Arch& a : kArchs) {
    for (int hd : {16, 32, 64}) EXPECT_TRUE(fl::fits(hd, a.optin)) << a.sm << " hd " << hd;
    EXPECT_EQ(fl::fits(128, a.optin), !small_shared(a)) << a.sm << " hd 128";
    EXPECT_FALSE(fl::fits(48, a.optin)) << a.sm << ": no kernel at head dimension 48";
  }
}

TEST(FlashAttentionFit, TheFusedPathTakesHeadDimension128OnA99KiBGpuOnlyWithCudnn) {
  for (const Arch& a : kArchs) {
    for (bool cudnn : {false, true}) {
      for (int hd : {16, 32, 64}) EXPECT_TRUE(fl::fused_runs(hd, a.optin, cudnn)) << a.sm << " hd " << hd;
      EXPECT_EQ(fl::fused_runs(128, a.optin, cudnn), cudnn || !small_shared(a))
          << a.sm << " hd 128, cuDNN " << (cudnn ? "at hand" : "absent");
      EXPECT_FALSE(fl::fused_runs(40, a.optin, cudnn)) << a.sm << ": hd 40 has no own kernel to fall back on";
    }
  }
}

TEST(FlashAttentionFit, WhyNotNamesTheBytesAskedAndAllowed) {
  EXPECT_EQ(fl::why_not(64, 99 * KiB), "");
  EXPECT_EQ(fl::why_not(128, 227 * KiB), "");
  EXPECT_EQ(fl::why_not(128, 99 * KiB),
            "the own flash kernel at head dimension 128 needs 112960 B of shared memory a block, this GPU allows "
            "101376");
  EXPECT_NE(fl::why_not(24, 227 * KiB).find("no head dimension 24"), std::string::npos);
}
