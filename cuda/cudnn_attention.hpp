#pragma once
// cuDNN's fused scaled-dot-product attention (cudnn-frontend's sdpa and sdpa_backward graphs) as an
// engine of the fused path (device.fused 1, device.attention auto|cudnn): the graphs of one problem
// shape, built once and kept, and their execution. libcudnn is opened at run time
// (cudnn_library.hpp); a build without cuDNN's headers compiles the engine out
// (cudnn_attention_absent.cpp) and open() then says so.
//
// Layouts, all read and written in place through strides: q, k, v in qkv [B, L, 3, H, hd] (16-bit);
// O and dO as ctx [B, L, H * hd]; dq, dk, dv in qkv's layout; the key mask as an additive score bias
// (0 or masked_key_bias, in the compute type) of [B, 1, 1, L] broadcast over heads and queries, or, where
// cuDNN takes no such broadcast, [B, 1, L, L]; lse [B, H, L] fp32 (cuDNN's Stats: the natural log
// of each row's sum of exp(score)). The caller (cuda_cudnn_attention.cu) makes the bias, converts
// to and from the backend's fp32 and handles samples without a valid key.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"

namespace avtrain::cuda {

// A masked key's score bias as a 16-bit pattern of the compute type: -2^41 in bf16, -2^15 in fp16 --
// large and finite, not -inf. cuDNN's SDPA is not safe with -inf in the bias: a key tile whose every
// key is masked leaves a running row maximum of -inf, and the rescale exp(m_old - m_new) is then
// -inf - -inf = NaN (JAX's cuDNN SDPA uses these two values for that reason: "cuDNN has a bug for
// subtraction between two large negative value"); avtrain's [audio][video] keys give such tiles
// (a sample without audio). Finite, the product with log2(e) cuDNN's exp2 takes stays finite too,
// and a masked key's probability exp(s + bias - lse) is still exactly 0 in fp32 (below e^-104)
// unless its scaled score exceeds the row's lse by more than 2^15 - 104.
inline std::uint16_t masked_key_bias_bits(DType t) {
  return t == DType::bf16 ? std::uint16_t(0xD400) : std::uint16_t(0xF800);
}

struct SdpaShape {
  int B = 0, L = 0, H = 0, hd = 0;
  DType type = DType::bf16;  // bf16 or f16
  std::string name() const;  // "B 8 L 1049 H 16 hd 128 bf16"
};

class CudnnAttention {
 public:
  // libcudnn opened and a handle made on `stream`; null, with `why` (one line), where not.
  static std::unique_ptr<CudnnAttention> open(cudaStream_t stream, std::string& why);
  // Without a device: the shape's forward and backward graphs through the frontend's validate() for
  // that sm version (80, 90), with the bias [B, 1, 1, L], against the libcudnn that opens (its version
  // decides some checks). "" where they pass; else why (or why libcudnn did not open).
  static std::string validate(const SdpaShape& s, int sm_version);
  virtual ~CudnnAttention() = default;
  // "cuDNN 9.28.1 SDPA (/path/libcudnn.so.9)".
  virtual std::string description() const = 0;
  // Builds the forward and backward graphs of `s` the first time (later: the cached answer); false,
  // with `why`, where cuDNN does not take the shape. Nothing else is called for a shape not prepared.
  virtual bool prepare(const SdpaShape& s, std::string& why) = 0;
  // Rows of the bias the shape's graphs read: 1 ([B, 1, 1, L]) or L ([B, 1, L, L]).
  virtual int bias_rows(const SdpaShape& s) const = 0;
  virtual std::size_t forward_workspace(const SdpaShape& s) const = 0;
  virtual std::size_t backward_workspace(const SdpaShape& s) const = 0;
  virtual void forward(const SdpaShape& s, const void* qkv, const void* bias, void* o, float* lse,
                       void* workspace) = 0;
  virtual void backward(const SdpaShape& s, const void* qkv, const void* bias, const void* o, const void* dout,
                        const float* lse, void* dqkv, void* workspace) = 0;
};

}  // namespace avtrain::cuda
