// The fused path's attention on cuDNN's SDPA (cudnn_attention.hpp): what the backend's contract
// needs around the two cuDNN graphs.
//   - The key mask becomes an additive score bias (0 valid, masked_key_bias_bits masked: large and
//     finite, not -inf, see cudnn_attention.hpp) in the compute type, [B, 1, 1, L] or [B, 1, L, L]
//     (what cuDNN takes), so masked keys get probability exactly 0 for any mask, not only a prefix
//     (avtrain's keys are [audio prefix][video prefix]).
//   - A sample without a valid key: its bias is 0 everywhere, and its ctx,
//     row statistics and gradients are then set to the contract's 0, (-inf, 0) and 0.
//   - Row statistics: cuDNN keeps lse = m + log(sum exp(s - m)) per row; row_stats gets (lse, 1), the
//     pair equivalent to (m, 1 / sum) since exp(s - m) / sum = exp(s - lse): the own kernel's backward
//     reads either, and a backward on cuDNN takes lse back from it.
//   - Conversions: cuDNN reads and writes 16-bit; the backend's ctx, dctx and dqkv are fp32. What
//     remains: O widened to ctx (with the zeroing of empty samples), dctx narrowed to dO (as the own
//     kernel's backward does), dq/dk/dv widened to dqkv (with the zeroing); qkv is read where it is
//     (packed first only where it comes in fp32), forward's output as the layer kept it. Where the
//     layer keeps only the 16-bit copies (copy_only outputs of attention_forward and
//     attention_backward), cuDNN writes O
//     into ctx16 and dq/dk/dv into dqkv16 themselves (their layouts are the layers') and only the
//     empty samples are zeroed there: no widening pass, and no rounding pass after it in the layer.
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "core/half.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "cudnn_attention.hpp"
#include "flash_attention_layout.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

// One block per sample b: has_key[b] (whether any key is valid), and `rows` copies of the sample's key
// bias row.
__global__ void key_bias_kernel(const std::uint8_t* key_mask, int L, int rows, std::uint16_t masked,
                                std::uint16_t* bias, std::uint8_t* has_key) {
  const int b = blockIdx.x;
  const std::uint8_t* mask = key_mask + std::size_t(b) * L;
  int any = 0;
  for (int j = threadIdx.x; j < L; j += blockDim.x) any |= mask[j] != 0;
  any = __syncthreads_or(any);
  if (threadIdx.x == 0) has_key[b] = any ? 1 : 0;
  std::uint16_t* out = bias + std::size_t(b) * rows * L;
  for (std::size_t i = threadIdx.x; i < std::size_t(rows) * L; i += blockDim.x)
    out[i] = !any || mask[i % L] ? std::uint16_t(0) : masked;
}

// y = x widened from `type`, or 0 in the samples without a valid key (per_sample elements each).
__global__ void widen_kernel(const std::uint16_t* x, float* y, std::size_t n, std::size_t per_sample,
                             const std::uint8_t* has_key, bool bf16) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::uint16_t h = x[i];
    y[i] = has_key[i / per_sample] ? (bf16 ? bf16_to_float(h) : half_to_float(h)) : 0.0f;
  }
}

// x = 0 in the samples without a valid key (per_sample elements each); the others are not touched.
__global__ void zero_empty_kernel(std::uint16_t* x, std::size_t n, std::size_t per_sample, const std::uint8_t* has_key) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    if (!has_key[i / per_sample]) x[i] = 0;
}

// The engine's 16-bit output o16 [B, per_sample] to the caller: widened into out32 (zeros in the empty
// samples) where that is not null, else o16 is the caller's own copy: only its empty samples zeroed.
void deliver(cudaStream_t stream, std::uint16_t* o16, float* out32, std::size_t n, std::size_t per_sample,
             const std::uint8_t* has_key, bool bf16) {
  if (out32) widen_kernel<<<blocks_for(n), kThreads, 0, stream>>>(o16, out32, n, per_sample, has_key, bf16);
  else zero_empty_kernel<<<blocks_for(n), kThreads, 0, stream>>>(o16, n, per_sample, has_key);
  CUDA_CHECK_LAUNCH();
}

// row_stats [B, H, L, 2] = (lse, 1), or (-inf, 0) in a sample without a valid key.
__global__ void stats_out_kernel(const float* lse, float* row_stats, std::size_t n, std::size_t per_sample,
                                 const std::uint8_t* has_key) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const bool valid = has_key[i / per_sample];
    row_stats[2 * i] = valid ? lse[i] : -INFINITY;
    row_stats[2 * i + 1] = valid ? 1.0f : 0.0f;
  }
}

// lse back from row_stats; +inf in a sample without a valid key (exp(s - lse) = 0: no inf or NaN
// inside cuDNN; its gradients are zeroed after anyway).
__global__ void stats_in_kernel(const float* row_stats, float* lse, std::size_t n, std::size_t per_sample,
                                const std::uint8_t* has_key) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    lse[i] = has_key[i / per_sample] ? row_stats[2 * i] : INFINITY;
}

// Pieces carved from one scratch block, each 256-byte aligned.
class Carve {
 public:
  std::size_t add(std::size_t bytes) {
    const std::size_t at = total_;
    total_ += aligned(bytes);
    return at;
  }
  std::size_t total() const { return total_; }

 private:
  std::size_t total_ = 0;
};

}  // namespace

bool CudaBackend::cudnn_takes(DType compute, int B, int L, int H, int hd) {
  if (!cudnn_) return false;
  const SdpaShape s{B, L, H, hd, compute};
  std::string why;
  if (cudnn_->prepare(s, why)) return true;
  if (options_.attention == FusedAttentionEngine::cudnn)
    throw Error("--device.attention cudnn: " + cudnn_->description() + " does not take attention at " + s.name() +
                ": " + why);
  const std::string own_problem = flash::why_not(hd, shared_optin_bytes_);
  if (!own_problem.empty())
    throw Error("fused attention at " + s.name() + ": " + cudnn_->description() + " does not take it (" + why +
                ") and " + own_problem + ": run with --device.fused 0");
  const std::string said = s.name();
  if (cudnn_refusals_said_.insert(said).second && options_.rank == 0)
    std::fprintf(stderr, "[rank 0] cuDNN SDPA does not take attention at %s (%s): the own flash kernel runs it\n",
                 said.c_str(), why.c_str());
  return false;
}

std::string CudaBackend::attention_engine(DType compute, int head_dim) const {
  const bool asked = options_.fused && compute != DType::f32 && fused_attention_capable_;
  const std::string own_problem = flash::why_not(head_dim, shared_optin_bytes_);
  if (!fuses_attention(compute, head_dim)) {
    if (!asked || !flash::has_kernel(head_dim)) return "";
    return own_problem + (cudnn_problem_.empty() ? "" : "; no cuDNN: " + cudnn_problem_);
  }
  if (options_.attention == FusedAttentionEngine::own) return "own flash kernel, device.attention own";
  if (!cudnn_) return "own flash kernel; no cuDNN: " + cudnn_problem_;
  if (!own_problem.empty()) return cudnn_->description() + "; " + own_problem + ": cuDNN alone";
  return cudnn_->description() + (options_.attention == FusedAttentionEngine::automatic
                                      ? ", the own flash kernel at shapes it does not take"
                                      : "");
}

void CudaBackend::cudnn_forward(DType compute, Operand qkv, const std::uint8_t* key_mask, float* row_stats, float* ctx,
                                std::uint16_t* ctx16, int B, int L, int H, int hd) {
  const SdpaShape s{B, L, H, hd, compute};
  const std::size_t D = std::size_t(H) * hd, qkv_n = std::size_t(B) * L * 3 * D, ctx_n = std::size_t(B) * L * D;
  const std::size_t lse_n = std::size_t(B) * H * L;
  const int rows = cudnn_->bias_rows(s);
  Carve carve;
  const std::size_t at_bias = carve.add(std::size_t(B) * rows * L * 2), at_has = carve.add(B),
                    at_o = ctx16 ? 0 : carve.add(ctx_n * 2), at_lse = carve.add(lse_n * sizeof(float)),
                    at_qkv = qkv.dtype == DType::f32 ? carve.add(qkv_n * 2) : 0,
                    at_ws = carve.add(cudnn_->forward_workspace(s));
  char* buf = static_cast<char*>(scratch(carve.total()));
  auto* bias = reinterpret_cast<std::uint16_t*>(buf + at_bias);
  auto* has_key = reinterpret_cast<std::uint8_t*>(buf + at_has);
  auto* o16 = ctx16 ? ctx16 : reinterpret_cast<std::uint16_t*>(buf + at_o);
  auto* lse = reinterpret_cast<float*>(buf + at_lse);
  const void* qkv16 = qkv.data;
  if (qkv.dtype == DType::f32) {
    pack(static_cast<const float*>(qkv.data), {reinterpret_cast<std::uint16_t*>(buf + at_qkv), compute}, qkv_n);
    qkv16 = buf + at_qkv;
  }
  key_bias_kernel<<<B, kThreads, 0, stream_>>>(key_mask, L, rows, masked_key_bias_bits(compute), bias, has_key);
  CUDA_CHECK_LAUNCH();
  cudnn_->forward(s, qkv16, bias, o16, lse, buf + at_ws);
  deliver(stream_, o16, ctx16 ? nullptr : ctx, ctx_n, std::size_t(L) * D, has_key, compute == DType::bf16);
  if (row_stats) {
    stats_out_kernel<<<blocks_for(lse_n), kThreads, 0, stream_>>>(lse, row_stats, lse_n, std::size_t(H) * L, has_key);
    CUDA_CHECK_LAUNCH();
  }
}

void CudaBackend::cudnn_backward(DType compute, Operand qkv, const std::uint8_t* key_mask, const float* row_stats,
                                 Operand out, const float* dctx, float* dqkv, std::uint16_t* dqkv16_out, int B, int L,
                                 int H, int hd) {
  const SdpaShape s{B, L, H, hd, compute};
  const std::size_t D = std::size_t(H) * hd, qkv_n = std::size_t(B) * L * 3 * D, ctx_n = std::size_t(B) * L * D;
  const std::size_t lse_n = std::size_t(B) * H * L;
  const int rows = cudnn_->bias_rows(s);
  Carve carve;
  const std::size_t at_bias = carve.add(std::size_t(B) * rows * L * 2), at_has = carve.add(B),
                    at_do = carve.add(ctx_n * 2), at_lse = carve.add(lse_n * sizeof(float)),
                    at_dqkv = dqkv16_out ? 0 : carve.add(qkv_n * 2), at_qkv = qkv.dtype == DType::f32 ? carve.add(qkv_n * 2) : 0,
                    at_o = out.dtype == DType::f32 ? carve.add(ctx_n * 2) : 0,
                    at_ws = carve.add(cudnn_->backward_workspace(s));
  char* buf = static_cast<char*>(scratch(carve.total()));
  auto* bias = reinterpret_cast<std::uint16_t*>(buf + at_bias);
  auto* has_key = reinterpret_cast<std::uint8_t*>(buf + at_has);
  auto* do16 = reinterpret_cast<std::uint16_t*>(buf + at_do);
  auto* lse = reinterpret_cast<float*>(buf + at_lse);
  auto* dqkv16 = dqkv16_out ? dqkv16_out : reinterpret_cast<std::uint16_t*>(buf + at_dqkv);
  const void* qkv16 = qkv.data;
  if (qkv.dtype == DType::f32) {  // exact: q, k, v are values of the compute type
    pack(static_cast<const float*>(qkv.data), {reinterpret_cast<std::uint16_t*>(buf + at_qkv), compute}, qkv_n);
    qkv16 = buf + at_qkv;
  }
  const void* o16 = out.data;
  if (out.dtype == DType::f32) {  // rounded, as the layers' 16-bit copy of ctx would be
    pack(static_cast<const float*>(out.data), {reinterpret_cast<std::uint16_t*>(buf + at_o), compute}, ctx_n);
    o16 = buf + at_o;
  }
  key_bias_kernel<<<B, kThreads, 0, stream_>>>(key_mask, L, rows, masked_key_bias_bits(compute), bias, has_key);
  CUDA_CHECK_LAUNCH();
  stats_in_kernel<<<blocks_for(lse_n), kThreads, 0, stream_>>>(row_stats, lse, lse_n, std::size_t(H) * L, has_key);
  CUDA_CHECK_LAUNCH();
  pack(dctx, {do16, compute}, ctx_n);  // rounded, as the unfused products take it
  cudnn_->backward(s, qkv16, bias, o16, do16, lse, dqkv16, buf + at_ws);
  deliver(stream_, dqkv16, dqkv16_out ? nullptr : dqkv, qkv_n, std::size_t(L) * 3 * D, has_key, compute == DType::bf16);
}

}  // namespace avtrain::cuda
