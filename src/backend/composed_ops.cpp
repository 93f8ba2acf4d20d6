// The Backend ops that have a default: each the composition of the separate ops, so a backend that
// does not fuse them gives those ops' bits.
#include "backend/backend.hpp"

#include "core/error.hpp"

namespace avtrain {

void Backend::adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                            float beta1, float beta2, float eps, const float* gate, int step) {
  float host_gate[2];
  download(host_gate, gate, sizeof host_gate);
  if (host_gate[1] != 0.0f) return;  // a skipped step
  const float grad_factor = host_gate[0];
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.size == 0) continue;
    if (grad_factor != 1.0f) scale(g + t.offset, t.size, grad_factor);
    if (t.in_place) {
      if (t.copy_type == DType::f32)
        adamw(static_cast<float*>(t.copy), g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1, beta2, eps,
              t.weight_decay, step);
      else
        adamw_bf16(static_cast<std::uint16_t*>(t.copy), g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1,
                   beta2, eps, t.weight_decay, step, t.rounding, t.rounding_key, t.first);
      continue;
    }
    float* wt = w + t.offset;
    adamw(wt, g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1, beta2, eps, t.weight_decay, step);
    if (!t.copy) continue;
    if (t.copy_type == DType::f32) copy(t.copy, wt, t.size * sizeof(float));
    else pack(t.copy_type, wt, static_cast<std::uint16_t*>(t.copy), t.size);
  }
}

void Backend::linear_forward(DType type, Operand x, Operand w, const float* bias, float* y, std::uint16_t* y16,
                             int rows, int in, int out) {
  // Start from the bias and accumulate (beta = 1): no separate pass to zero y or to add the bias.
  if (bias) fill_rows(y, bias, rows, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, y, out);
  round_to(type, y, y16, std::size_t(rows) * out);
}

void Backend::add_round(DType type, float* y, const float* x, std::uint16_t* y16, std::size_t n) {
  add(y, x, n);
  round_to(type, y, y16, n);
}

void Backend::gelu_round(DType type, const float* x, float* y, std::uint16_t* y16, std::size_t n) {
  gelu_forward(x, y, n);
  round_to(type, y, y16, n);
}

void Backend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, float* f, std::uint16_t* f16,
                                  float* g, std::uint16_t* g16, int rows, int in, int out) {
  linear_forward(type, x, w, bias, f, f16, rows, in, out);
  gelu_round(type, f, g, g16, std::size_t(rows) * out);
}

void Backend::gelu_backward_round(DType type, const float* dy, Operand x, float* dx, std::uint16_t* dx16,
                                  std::size_t n) {
  gelu_backward(dy, x, dx, n);
  round_to(type, dx, dx16, n);
}

void Backend::accumulate_rounded(DType type, float* acc, float* x, std::size_t n) {
  round_to(type, x, nullptr, n);
  add(acc, x, n);
}

void Backend::linear_forward_16(DType type, Operand x, Operand w, const float* bias, float* y, std::uint16_t* y16,
                                int rows, int in, int out) {
  linear_forward(type, x, w, bias, y, y16, rows, in, out);
}

void Backend::linear_gelu_forward_16(DType type, Operand x, Operand w, const float* bias, float* f,
                                     std::uint16_t* f16, float* g, std::uint16_t* g16, int rows, int in, int out) {
  linear_gelu_forward(type, x, w, bias, f, f16, g, g16, rows, in, out);
}

void Backend::layernorm_forward_16(DType type, const float* x, const float* gamma, const float* beta, float* y,
                                   std::uint16_t* y16, float* mean, float* rstd, int rows, int dim, float eps) {
  layernorm_forward(x, gamma, beta, y, mean, rstd, rows, dim, eps);
  round_to(type, y, y16, std::size_t(rows) * dim);
}

void Backend::linear_param_grads(DType type, Operand dy, const float* dy_values, Operand x, float* dw, float* db,
                                 float* dw_scratch, float* db_scratch, int rows, int in, int out) {
  // dy's values for the bias: dy_values, or dy's own patterns where they alone were written.
  const Operand dy_sum = dy_values ? fp32(dy_values) : dy;
  if (type == DType::f32) {
    gemm(type, Trans::yes, Trans::no, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
    if (db) bias_grad(dy_sum, db, rows, out);
    return;
  }
  gemm(type, Trans::yes, Trans::no, out, in, rows, 1.0f, dy, out, x, in, 0.0f, dw_scratch, in);
  accumulate_rounded(type, dw, dw_scratch, std::size_t(out) * in);
  if (!db) return;
  zero(db_scratch, std::size_t(out) * sizeof(float));
  bias_grad(dy_sum, db_scratch, rows, out);
  accumulate_rounded(type, db, db_scratch, std::size_t(out));
}

void Backend::attention_forward_16(DType compute, Operand qkv, const std::uint8_t* key_mask, float* row_stats,
                                   float* ctx, std::uint16_t* ctx16, int B, int L, int H, int hd) {
  require(compute != DType::f32, "internal: attention_forward_16 in fp32");
  attention_forward(compute, qkv, key_mask, nullptr, row_stats, ctx, B, L, H, hd);
  round_to(compute, ctx, ctx16, std::size_t(B) * L * H * hd);
}

void Backend::attention_backward_16(DType compute, Operand qkv, const AttentionProbs& probs, const float* dctx,
                                    float* dqkv, std::uint16_t* dqkv16, int B, int L, int H, int hd) {
  require(compute != DType::f32, "internal: attention_backward_16 in fp32");
  attention_backward(compute, qkv, probs, dctx, dqkv, B, L, H, hd);
  round_to(compute, dqkv, dqkv16, std::size_t(B) * L * 3 * H * hd);
}

void Backend::bias_grad(Operand dy, float* dbias, int rows, int cols) {
  if (dy.dtype == DType::f32) return bias_grad(static_cast<const float*>(dy.data), dbias, rows, cols);
  bias_grad_16(dy.dtype, static_cast<const std::uint16_t*>(dy.data), dbias, rows, cols);
}

float Backend::abs_max(Operand x, std::size_t n) {
  if (x.dtype == DType::f32) return abs_max(static_cast<const float*>(x.data), n);
  return abs_max_16(x.dtype, static_cast<const std::uint16_t*>(x.data), n);
}

void Backend::abs_max_into(Operand x, std::size_t n, float* result) {
  if (x.dtype == DType::f32) return abs_max_into(static_cast<const float*>(x.data), n, result);
  abs_max_into_16(x.dtype, static_cast<const std::uint16_t*>(x.data), n, result);
}

}  // namespace avtrain
