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
      adamw({t.copy, t.copy_type}, g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1, beta2, eps,
            t.weight_decay, step, {t.rounding, t.rounding_key, t.first});
      continue;
    }
    float* wt = w + t.offset;
    adamw({wt, DType::f32}, g + t.offset, m + t.offset, v + t.offset, t.size, lr, beta1, beta2, eps, t.weight_decay, step);
    if (!t.copy) continue;
    if (t.copy_type == DType::f32) copy(t.copy, wt, t.size * sizeof(float));
    else pack(wt, {t.copy, t.copy_type}, t.size);
  }
}

void Backend::linear_forward(DType type, Operand x, Operand w, const float* bias, Output y, int rows, int in,
                             int out) {
  // Start from the bias and accumulate (beta = 1): no separate pass to zero y or to add the bias.
  if (bias) fill_rows(y.values, bias, rows, out);
  gemm(type, Trans::no, Trans::yes, rows, out, in, 1.0f, x, in, w, in, bias ? 1.0f : 0.0f, y.values, out);
  round_to(y, std::size_t(rows) * out);
}

void Backend::add_round(Output y, const float* x, std::size_t n) {
  add(y.values, x, n);
  round_to(y, n);
}

void Backend::gelu_round(const float* x, Output y, std::size_t n) {
  gelu_forward(x, y.values, n);
  round_to(y, n);
}

void Backend::linear_gelu_forward(DType type, Operand x, Operand w, const float* bias, Output f, Output g, int rows,
                                  int in, int out) {
  f.copy_only = false;  // g is taken from f's values
  linear_forward(type, x, w, bias, f, rows, in, out);
  gelu_round(f.values, g, std::size_t(rows) * out);
}

void Backend::gelu_backward_round(const float* dy, Operand x, Output dx, std::size_t n) {
  gelu_backward(dy, x, dx.values, n);
  round_to(dx, n);
}

void Backend::accumulate_rounded(DType type, float* acc, float* x, std::size_t n) {
  round_to(rounded(x, type), n);
  add(acc, x, n);
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

}  // namespace avtrain
