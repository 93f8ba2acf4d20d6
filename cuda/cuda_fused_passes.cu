// The fused passes of the kernel interface (Backend::linear_forward, linear_gelu_forward, add_round,
// gelu_round, gelu_backward_round, accumulate_rounded) under device.fused: one pass over memory each
// where the layers' separate ops take two or three. Without device.fused, the defaults (the separate
// ops). Each element goes through the separate kernels' functions (elementwise_math.cuh), so
// add_round, gelu_round, gelu_backward_round and accumulate_rounded give their bits; linear_forward
// takes its product with beta 0 and adds the bias in the rounding pass (no fill_rows pass, no read of
// y by the product), which cuBLAS may sum in another order than the product with beta 1;
// linear_gelu_forward is that linear_forward with the GELU in the same pass (its bits).
// Where the layer reads only the 16-bit copies (copy_only outputs), linear_forward and
// linear_gelu_forward have cuBLASLt write the 16-bit output with its bias (no fp32 y at all), GELU
// read from that copy; linear_param_grads takes dW and db from one cuBLASLt product (BGRADB, no
// bias_grad kernel) in 16 bits, added to the main grads from those (cublaslt_matmul.hpp).
#include <cstdio>

#include "cuda_backend.hpp"
#include "cuda_check.hpp"
#include "elementwise_math.cuh"
#include "launch.cuh"

namespace avtrain::cuda {

namespace {

std::uint16_t* bits_of(const Output& y) { return static_cast<std::uint16_t*>(y.copy.data); }

// y[r, c] = round(y[r, c] + bias[c]) (bias may be null).
__global__ void bias_round_kernel(DType type, float* y, const float* bias, std::uint16_t* y16, std::size_t n,
                                  std::size_t cols) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = bias ? y[i] + bias[i % cols] : y[i];
    y[i] = round_in(type, v, y16 ? y16 + i : nullptr);
  }
}

// The same, and g = round(gelu(y)) (the MLP's first layer and its activation in one pass).
__global__ void bias_gelu_round_kernel(DType type, float* y, const float* bias, std::uint16_t* y16, DType g_type,
                                       float* g, std::uint16_t* g16, std::size_t n, std::size_t cols) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float v = round_in(type, bias ? y[i] + bias[i % cols] : y[i], y16 ? y16 + i : nullptr);
    y[i] = v;
    g[i] = round_in(g_type, gelu(v), g16 ? g16 + i : nullptr);
  }
}

__global__ void gelu_backward_round_kernel(DType type, const float* dy, Operand x, float* dx, std::uint16_t* dx16,
                                           std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    dx[i] = round_in(type, dy[i] * gelu_grad(value_at(x, i)), dx16 ? dx16 + i : nullptr);
}

__global__ void add_round_kernel(DType type, float* y, const float* x, std::uint16_t* y16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = round_in(type, y[i] + x[i], y16 ? y16 + i : nullptr);
}

__global__ void gelu_round_kernel(DType type, const float* x, float* y, std::uint16_t* y16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) y[i] = round_in(type, gelu(x[i]), y16 ? y16 + i : nullptr);
}

__global__ void accumulate_rounded_kernel(DType type, float* acc, const float* x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) acc[i] += round_in(type, x[i], nullptr);
}

// g = round(gelu(f)) from f's 16-bit copy (the product wrote f rounded): the bits of the pass above.
__global__ void gelu_16_kernel(DType type, const std::uint16_t* f16, std::uint16_t* g16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    round_in(type, gelu(value_at(Operand{f16, type}, i)), g16 + i);
}

// acc += x where x is already rounded (its 16-bit patterns): accumulate_rounded's bits.
__global__ void accumulate_16_kernel(DType type, float* acc, const std::uint16_t* x16, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) acc[i] += value_at(Operand{x16, type}, i);
}

const std::uint16_t* bits(Operand x) { return static_cast<const std::uint16_t*>(x.data); }

}  // namespace

// A copy_only y in the product's type: cuBLASLt writes its 16-bit copy with the bias (no fp32 y at all).
void CudaBackend::linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                                 int out) {
  if (y.copy_only) {
    if (writes_copies_alone(type) && y.copy.data && y.dtype() == type && x.dtype == type && w.dtype == type &&
        lt()->linear_forward(stream_, type, bits(x), bits(w), bias, bits_of(y), rows, in, out)) {
      gemm_flops_ += 2.0 * rows * in * out;
      return;
    }
    say_lt_refusal();
  }
  if (!options_.fused) return Backend::linear_forward(type, x, w, bias, y, rows, in, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, 0.0f, y.values, out);
  const std::size_t n = std::size_t(rows) * out;
  if (n == 0 || (!bias && y.dtype() == DType::f32)) return;
  bias_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y.dtype(), y.values, bias, bits_of(y), n,
                                                             std::size_t(out));
  CUDA_CHECK_LAUNCH();
}

// f and g copy_only in the product's type: f's copy from cuBLASLt, g's read from it.
void CudaBackend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g,
                                      int rows, int in, int out) {
  if (f.copy_only && g.copy_only) {
    if (writes_copies_alone(type) && f.copy.data && g.copy.data && f.dtype() == type && g.dtype() == type &&
        x.dtype == type && w.dtype == type &&
        lt()->linear_forward(stream_, type, bits(x), bits(w), bias, bits_of(f), rows, in, out)) {
      gemm_flops_ += 2.0 * rows * in * out;
      const std::size_t n = std::size_t(rows) * out;
      gelu_16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, bits_of(f), bits_of(g), n);
      CUDA_CHECK_LAUNCH();
      return;
    }
    say_lt_refusal();
  }
  if (!options_.fused) return Backend::linear_gelu_forward(type, x, w, bias, f, g, rows, in, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, 0.0f, f.values, out);
  const std::size_t n = std::size_t(rows) * out;
  if (n == 0) return;
  bias_gelu_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(f.dtype(), f.values, bias, bits_of(f), g.dtype(),
                                                                  g.values, bits_of(g), n, std::size_t(out));
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n) {
  if (!options_.fused) return Backend::gelu_backward_round(dy, x, dx, n);
  if (n == 0) return;
  gelu_backward_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(dx.dtype(), dy, x, dx.values, bits_of(dx), n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::add_round(Output y, const float* x, std::size_t n) {
  if (!options_.fused) return Backend::add_round(y, x, n);
  if (n == 0) return;
  add_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y.dtype(), y.values, x, bits_of(y), n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::gelu_round(const float* x, Output y, std::size_t n) {
  if (!options_.fused) return Backend::gelu_round(x, y, n);
  if (n == 0) return;
  gelu_round_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(y.dtype(), x, y.values, bits_of(y), n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::accumulate_rounded(DType type, float* acc, float* x, std::size_t n) {
  if (!options_.fused) return Backend::accumulate_rounded(type, acc, x, n);
  if (n == 0) return;
  accumulate_rounded_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, acc, x, n);
  CUDA_CHECK_LAUNCH();
}

// ---- cuBLASLt epilogues (cublaslt_matmul.hpp). Each falls back to the passes above (or the default's
// separate ops) where cuBLASLt refuses a shape, an operand is not stored in the product's type, or
// device.fused is off.

LtMatmul* CudaBackend::lt() {
  if (!lt_) return nullptr;
  if (!lt_workspace_) {
    lt_workspace_ = allocate(LtMatmul::kWorkspaceBytes);
    lt_->set_workspace(lt_workspace_, LtMatmul::kWorkspaceBytes);
  }
  return lt_.get();
}

void CudaBackend::say_lt_refusal() {
  if (!lt_ || lt_->refusals() == lt_refusals_seen_) return;  // a plan refused before: said then
  lt_refusals_seen_ = lt_->refusals();
  if (lt_refusals_said_.insert(lt_->last_refusal()).second && options_.rank == 0)
    std::fprintf(stderr, "[rank 0] cuBLASLt takes no epilogue product for the %s: the separate passes run it\n",
                 lt_->last_refusal().c_str());
}

long long CudaBackend::lt_products() const { return lt_ ? lt_->products() : 0; }
std::string CudaBackend::lt_refusal() const { return lt_ ? lt_->last_refusal() : "device.fused is off or the GPU is older than sm_80"; }

bool CudaBackend::writes_copies_alone(DType type) const { return options_.fused && lt_ && type != DType::f32; }

// dW and db in the module's type from one product (BGRADB), written as 16-bit patterns into the
// scratch the layer gives (half of dw_scratch's bytes, half of db_scratch's), then added to the main
// grads: acc += round(x) as accumulate_rounded, reading 2 bytes an element where it read 4.
void CudaBackend::linear_param_grads(DType type, Operand dy, const float* dy_values, Operand x, float* dw, float* db,
                                     float* dw_scratch, float* db_scratch, int rows, int in, int out) {
  if (writes_copies_alone(type) && dy.dtype == type && x.dtype == type) {
    auto* dw16 = reinterpret_cast<std::uint16_t*>(dw_scratch);
    auto* db16 = db ? reinterpret_cast<std::uint16_t*>(db_scratch) : nullptr;
    if (lt()->weight_grad(stream_, type, bits(dy), bits(x), dw16, db16, rows, in, out)) {
      gemm_flops_ += 2.0 * rows * in * out;
      const std::size_t n = std::size_t(out) * in;
      accumulate_16_kernel<<<blocks_for(n), kThreads, 0, stream_>>>(type, dw, dw16, n);
      CUDA_CHECK_LAUNCH();
      if (db) {
        accumulate_16_kernel<<<blocks_for(std::size_t(out)), kThreads, 0, stream_>>>(type, db, db16, std::size_t(out));
        CUDA_CHECK_LAUNCH();
      }
      return;
    }
    say_lt_refusal();
  }
  Backend::linear_param_grads(type, dy, dy_values, x, dw, db, dw_scratch, db_scratch, rows, in, out);
}

}  // namespace avtrain::cuda
