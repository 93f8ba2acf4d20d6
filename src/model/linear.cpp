#include "model/linear.hpp"

#include "core/error.hpp"

namespace avtrain {

Linear::Linear(ParamStore& params, std::string module, int in, int out, float init_std, DType dtype, bool bias)
    : params_(params), module_(std::move(module)), in_(in), out_(out), dtype_(dtype) {
  weight_ = params.add(module_, "weight", {out, in}, Init::normal, init_std, true);
  params.set_working_dtype(weight_, dtype);
  if (bias) bias_ = params.add(module_, "bias", {out}, Init::zeros, 0, false);
}

void Linear::forward(Backend& be, Operand x, float* y, int rows, std::uint16_t* y16) {
  be.linear_forward(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, y, y16, rows,
                    in_, out_);
}

void Linear::forward_gelu(Backend& be, Operand x, float* y, std::uint16_t* y16, float* g, std::uint16_t* g16,
                          int rows) {
  be.linear_gelu_forward(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, y, y16, g,
                         g16, rows, in_, out_);
}

void Linear::forward_16(Backend& be, Operand x, float* scratch, std::uint16_t* y16, int rows) {
  be.linear_forward_16(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, scratch, y16,
                       rows, in_, out_);
}

void Linear::forward_gelu_16(Backend& be, Operand x, float* f_scratch, std::uint16_t* f16, float* g_scratch,
                             std::uint16_t* g16, int rows) {
  be.linear_gelu_forward_16(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr,
                            f_scratch, f16, g_scratch, g16, rows, in_, out_);
}

void Linear::backward_16(Backend& be, Operand x, const std::uint16_t* dy16, float* dx, int rows) {
  require(dtype_ != DType::f32 && dy16, "internal: " + module_ + ": backward from 16-bit gradients in fp32");
  backward(be, x, nullptr, dx, rows, dy16);
}

void Linear::backward(Backend& be, Operand x, const float* dy, float* dx, int rows, const std::uint16_t* dy16) {
  const Operand dy_in = dy16 && dtype_ != DType::f32 ? Operand{dy16, dtype_} : fp32(dy);
  if (dtype_ != DType::f32) {
    dw_.resize(std::size_t(out_) * in_);
    if (bias_ >= 0) db_.resize(out_);
  }
  be.linear_param_grads(dtype_, dy_in, dy, x, params_.grad(weight_), bias_ >= 0 ? params_.grad(bias_) : nullptr,
                        dw_.data(), db_.data(), rows, in_, out_);
  if (!dx) return;
  be.gemm(dtype_, Trans::no, Trans::no, rows, in_, out_, 1.0f, dy_in, out_, params_.operand(weight_), in_, 0.0f,
          dx, in_);
  be.round_to(dtype_, dx, nullptr, std::size_t(rows) * in_);
}

}  // namespace avtrain
