// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments; the CPU's formula
// and order of operations. Without fp32 masters (in-place tensors, adamw_bf16) the bf16 weights are
// read widened and written back rounded as the CPU rounds them (core/stochastic_round.hpp: the same
// keyed bits). adamw_tensors (device.fused): every tensor of an update in a few launches
// (multi-tensor apply), the gradient factor and the working copies in the same pass, the gate (factor,
// skip) read on the device; update_gate decides it there from the gradients' statistics.
#include <cmath>

#include "backend/update_gate.hpp"
#include "core/half.hpp"
#include "core/stochastic_round.hpp"
#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

struct AdamWConstants {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, bc1, bc2, eps;
};

AdamWConstants constants(float lr, float beta1, float beta2, float eps, int step) {
  // On the host as the CPU computes them, so the corrections are the same floats.
  return {lr, beta1, beta2, 1.0f - beta1, 1.0f - beta2, 1.0f - std::pow(beta1, float(step)),
          1.0f - std::pow(beta2, float(step)), eps};
}

// One element's update (both kernels: the same expression, the same bits): m, v updated, w returned.
__device__ __forceinline__ float adamw_element(float wi, float gi, float& m, float& v, const AdamWConstants& c,
                                               float weight_decay) {
  const float mi = c.beta1 * m + c.one_minus_beta1 * gi;
  const float vi = c.beta2 * v + c.one_minus_beta2 * gi * gi;
  m = mi;
  v = vi;
  const float mhat = mi / c.bc1, vhat = vi / c.bc2;
  return wi - c.lr * (mhat / (sqrtf(vhat) + c.eps) + weight_decay * wi);
}

// One thread: the host's expression (backend/update_gate.hpp), its bits.
__global__ void update_gate_kernel(const Backend::TensorStats* stats, Backend::UpdateRule rule, float* gate) {
  decide_update(stats, rule, gate);
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, std::size_t n, AdamWConstants c,
                             float weight_decay) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) w[i] = adamw_element(w[i], g[i], m[i], v[i], c, weight_decay);
}

__global__ void adamw_bf16_kernel(std::uint16_t* w, const float* g, float* m, float* v, std::size_t n, AdamWConstants c,
                                  float weight_decay, Rounding rounding, std::uint64_t stream, std::size_t first) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    w[i] = round_to_bf16(adamw_element(bf16_to_float(w[i]), g[i], m[i], v[i], c, weight_decay), rounding, stream,
                         first + i);
}

// Up to kTensorsPerLaunch tensors of one update, by value in the kernel's parameters (under 4 KiB):
// each is cut into chunks of kChunk elements, a block per chunk.
constexpr int kTensorsPerLaunch = 48;
constexpr int kChunk = 4096;
struct TensorBatch {
  int count;
  unsigned block_start[kTensorsPerLaunch + 1];  // the first block of each tensor; [count]: all blocks
  unsigned long long offset[kTensorsPerLaunch], size[kTensorsPerLaunch];
  void* copy[kTensorsPerLaunch];
  float weight_decay[kTensorsPerLaunch];
  DType copy_type[kTensorsPerLaunch];
  bool in_place[kTensorsPerLaunch];
  Rounding rounding[kTensorsPerLaunch];
  unsigned long long stream[kTensorsPerLaunch], first[kTensorsPerLaunch];  // in-place bf16: the rounding bits' keys
};

__global__ void adamw_tensors_kernel(float* w, float* g, float* m, float* v, TensorBatch batch, AdamWConstants c,
                                     const float* gate) {
  if (gate[1] != 0.0f) return;  // a skipped step: nothing is written
  const float grad_factor = gate[0];
  int t = 0;
  while (t + 1 < batch.count && blockIdx.x >= batch.block_start[t + 1]) ++t;
  const std::size_t first = std::size_t(blockIdx.x - batch.block_start[t]) * kChunk;
  const std::size_t end = std::min<std::size_t>(batch.size[t], first + kChunk);
  const std::size_t at = batch.offset[t];
  const float wd = batch.weight_decay[t];
  const DType type = batch.copy_type[t];
  void* copy = batch.copy[t];
  for (std::size_t i = first + threadIdx.x; i < end; i += blockDim.x) {
    float gi = g[at + i];
    if (grad_factor != 1.0f) {  // as scale() leaves them
      gi *= grad_factor;
      g[at + i] = gi;
    }
    if (batch.in_place[t]) {  // no fp32 master: the copy is the weights
      if (type == DType::f32) {
        float& wi = static_cast<float*>(copy)[i];
        wi = adamw_element(wi, gi, m[at + i], v[at + i], c, wd);
      } else {
        std::uint16_t& wi = static_cast<std::uint16_t*>(copy)[i];
        wi = round_to_bf16(adamw_element(bf16_to_float(wi), gi, m[at + i], v[at + i], c, wd), batch.rounding[t],
                           batch.stream[t], batch.first[t] + i);
      }
      continue;
    }
    const float wi = adamw_element(w[at + i], gi, m[at + i], v[at + i], c, wd);
    w[at + i] = wi;
    if (!copy) continue;
    if (type == DType::f32) static_cast<float*>(copy)[i] = wi;
    else static_cast<std::uint16_t*>(copy)[i] = type == DType::bf16 ? float_to_bf16(wi) : float_to_half(wi);
  }
}

}  // namespace

void CudaBackend::adamw(float* w, const float* g, float* m, float* v, std::size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int step) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(w, g, m, v, n, constants(lr, beta1, beta2, eps, step),
                                                         weight_decay);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::adamw_bf16(std::uint16_t* w, const float* g, float* m, float* v, std::size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int step, Rounding rounding,
                             std::uint64_t rounding_key, std::size_t first) {
  if (n == 0) return;
  adamw_bf16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(w, g, m, v, n, constants(lr, beta1, beta2, eps, step),
                                                              weight_decay, rounding,
                                                              rounding_stream(rounding_key, std::uint64_t(step)), first);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                                float beta1, float beta2, float eps, const float* gate, int step) {
  if (!options_.fused) {
    Backend::adamw_tensors(w, g, m, v, tensors, count, lr, beta1, beta2, eps, gate, step);
    return;
  }
  const AdamWConstants c = constants(lr, beta1, beta2, eps, step);
  TensorBatch batch{};
  const auto launch = [&] {
    if (batch.count == 0) return;
    adamw_tensors_kernel<<<batch.block_start[batch.count], kThreads, 0, stream_>>>(w, g, m, v, batch, c, gate);
    CUDA_CHECK_LAUNCH();
    batch = TensorBatch{};
  };
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.size == 0) continue;
    const int k = batch.count;
    batch.offset[k] = t.offset;
    batch.size[k] = t.size;
    batch.copy[k] = t.copy;
    batch.weight_decay[k] = t.weight_decay;
    batch.copy_type[k] = t.copy_type;
    batch.in_place[k] = t.in_place;
    batch.rounding[k] = t.rounding;
    batch.stream[k] = rounding_stream(t.rounding_key, std::uint64_t(step));
    batch.first[k] = t.first;
    batch.block_start[k + 1] = batch.block_start[k] + unsigned((t.size + kChunk - 1) / kChunk);
    ++batch.count;
    // A launch per full batch, or before the block count could pass what a grid holds.
    if (batch.count == kTensorsPerLaunch || batch.block_start[batch.count] > (1u << 30)) launch();
  }
  launch();
}

void CudaBackend::update_gate(const TensorStats* stats, const UpdateRule& rule, float* gate) {
  update_gate_kernel<<<1, 1, 0, stream_>>>(stats, rule, gate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace avtrain::cuda
