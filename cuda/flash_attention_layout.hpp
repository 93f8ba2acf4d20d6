#pragma once
// The own flash attention kernels' tiles and the shared memory a block of each asks for, in plain C++
// (the kernels in cuda_flash_attention.cu carve their memory from these layouts; the host decides from
// them whether the kernels can launch on a device at all, without a GPU in the tests).
//
// A kernel may use more than 48 KiB of dynamic shared memory a block only up to the device's opt-in
// limit (cudaDevAttrMaxSharedMemoryPerBlockOptin): 163 KiB on sm_80 and sm_87, 227 KiB on sm_90 and
// sm_100, but 99 KiB (101,376 B) on sm_86, sm_89 and sm_120. At head dimension 128 the forward asks for
// 112,960 B and the backward 106,304 B, more than those 99 KiB: there the own kernel cannot run.
#include <cstddef>
#include <string>

namespace avtrain::cuda::flash {

constexpr int kTile = 64;   // queries per block (forward, dQ) and keys per streamed tile; keys per block (dK, dV)
constexpr int kWarps = 4;   // 16 rows of the block's tile each
constexpr int kLdS = kTile + 4;  // fp32 score tiles, padded against bank conflicts
constexpr int kLdP = kTile + 8;  // 16-bit probability / dS tiles

// Shared memory of the forward kernel, in elements of 16 bits (every piece a multiple of 32 bytes).
template <int HD>
struct ForwardLayout {
  static constexpr int ldh = HD + 8, ldo = HD + 4;
  static constexpr int q = 0, k = q + kTile * ldh, v = k + kTile * ldh;
  static constexpr int s = v + kTile * ldh;              // per warp: 16 x kLdS fp32
  static constexpr int p = s + kWarps * 16 * kLdS * 2;   // per warp: 16 x kLdP 16-bit
  static constexpr int o = p + kWarps * 16 * kLdP;       // per warp: 16 x ldo fp32
  static constexpr int rows = o + kWarps * 16 * ldo * 2; // per warp: 16 fp32 (a per-row factor)
  static constexpr int mask = rows + kWarps * 16 * 2;    // kTile bytes
  static constexpr std::size_t bytes = std::size_t(mask) * 2 + kTile;
};

// Shared memory of the two backward kernels: the block's own 64 rows of two matrices (fixed), two
// streamed tiles, per-row numbers of the query rows, the key mask of the keys in play, and per warp
// an fp32 score tile and two 16-bit tiles (P, dS).
template <int HD>
struct BackwardLayout {
  static constexpr int ldh = HD + 8;
  static constexpr int own_a = 0, own_b = own_a + kTile * ldh;
  static constexpr int tile_a = own_b + kTile * ldh, tile_b = tile_a + kTile * ldh;
  static constexpr int s = tile_b + kTile * ldh;          // per warp: 16 x kLdS fp32
  static constexpr int p = s + kWarps * 16 * kLdS * 2;    // per warp: 16 x kLdP
  static constexpr int ds = p + kWarps * 16 * kLdP;       // per warp: 16 x kLdP
  static constexpr int numbers = ds + kWarps * 16 * kLdP; // 3 x kTile fp32: m, 1 / l, dot
  static constexpr int mask = numbers + 3 * kTile * 2;    // kTile bytes
  static constexpr std::size_t bytes = std::size_t(mask) * 2 + kTile;
};

// The head dimensions the own kernels are built for.
constexpr bool has_kernel(int head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

// The shared memory a block asks for at head_dim (forward; both backward kernels ask for the same),
// 0 where there is no kernel.
template <template <int> class Layout>
constexpr std::size_t layout_bytes(int head_dim) {
  switch (head_dim) {
    case 16: return Layout<16>::bytes;
    case 32: return Layout<32>::bytes;
    case 64: return Layout<64>::bytes;
    case 128: return Layout<128>::bytes;
    default: return 0;
  }
}
constexpr std::size_t forward_bytes(int head_dim) { return layout_bytes<ForwardLayout>(head_dim); }
constexpr std::size_t backward_bytes(int head_dim) { return layout_bytes<BackwardLayout>(head_dim); }

// Whether the own kernels run at head_dim on a device whose opt-in limit of shared memory a block is
// `optin_bytes`: a kernel exists and both directions fit.
constexpr bool fits(int head_dim, std::size_t optin_bytes) {
  return has_kernel(head_dim) && forward_bytes(head_dim) <= optin_bytes && backward_bytes(head_dim) <= optin_bytes;
}

// Why the own kernels do not run at head_dim on that device, in words for the log ("" where they do).
inline std::string why_not(int head_dim, std::size_t optin_bytes) {
  if (!has_kernel(head_dim))
    return "the own flash kernel has no head dimension " + std::to_string(head_dim) + " (16, 32, 64, 128)";
  if (fits(head_dim, optin_bytes)) return {};
  const std::size_t need = forward_bytes(head_dim) > backward_bytes(head_dim) ? forward_bytes(head_dim)
                                                                             : backward_bytes(head_dim);
  return "the own flash kernel at head dimension " + std::to_string(head_dim) + " needs " + std::to_string(need) +
         " B of shared memory a block, this GPU allows " + std::to_string(optin_bytes);
}

// Whether the fused path runs attention at head_dim: the own kernels have that head dimension and either
// fit the device or cuDNN's SDPA is at hand to run it (a shape cuDNN then refuses is an error that says
// why, since the layers keep no probabilities for the unfused path to fall back on).
constexpr bool fused_runs(int head_dim, std::size_t optin_bytes, bool cudnn_at_hand) {
  return has_kernel(head_dim) && (fits(head_dim, optin_bytes) || cudnn_at_hand);
}

}  // namespace avtrain::cuda::flash
