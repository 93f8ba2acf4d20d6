#include "model/linear.hpp"

#include "core/error.hpp"

namespace avtrain {

Linear::Linear(ParamStore& params, std::string module, int in, int out, float init_std, DType dtype, bool bias)
    : params_(params), module_(std::move(module)), in_(in), out_(out), dtype_(dtype) {
  weight_ = params.add(module_, "weight", {out, in}, Init::normal, init_std, true);
  params.set_working_dtype(weight_, dtype);
  if (bias) bias_ = params.add(module_, "bias", {out}, Init::zeros, 0, false);
}

void Linear::forward(Backend& be, Operand x, Output y, int rows) {
  be.linear_forward(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, y, rows, in_,
                    out_);
}

void Linear::forward_gelu(Backend& be, Operand x, Output f, Output g, int rows) {
  be.linear_gelu_forward(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, f, g, rows,
                         in_, out_);
}

void Linear::backward(Backend& be, Operand x, Output dy, float* dx, int rows) {
  const bool copy = dy.copy.data && dtype_ != DType::f32;
  require(!dy.copy_only || copy, "internal: " + module_ + ": backward from 16-bit gradients in fp32");
  const Operand dy_in = copy ? dy.read_copy() : fp32(dy.values);
  if (dtype_ != DType::f32) {
    dw_.resize(std::size_t(out_) * in_);
    if (bias_ >= 0) db_.resize(out_);
  }
  be.linear_param_grads(dtype_, dy_in, dy.copy_only ? nullptr : dy.values, x, params_.grad(weight_),
                        bias_ >= 0 ? params_.grad(bias_) : nullptr, dw_.data(), db_.data(), rows, in_, out_);
  if (!dx) return;
  be.gemm(dtype_, Trans::no, Trans::no, rows, in_, out_, 1.0f, dy_in, out_, params_.operand(weight_), in_, 0.0f,
          dx, in_);
  be.round_to(rounded(dx, dtype_), std::size_t(rows) * in_);
}

}  // namespace avtrain
