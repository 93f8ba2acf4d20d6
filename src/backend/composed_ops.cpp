// The Backend ops that have a default: each the composition of the separate ops, so a backend that
// does not fuse them gives those ops' bits.
#include "backend/backend.hpp"

namespace avtrain {

void Backend::adamw_tensors(float* w, float* g, float* m, float* v, const AdamWTensor* tensors, int count, float lr,
                            float beta1, float beta2, float eps, float grad_factor, int step) {
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& t = tensors[i];
    if (t.size == 0) continue;
    float* wt = w + t.offset;
    if (grad_factor != 1.0f) scale(g + t.offset, t.size, grad_factor);
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

}  // namespace avtrain
