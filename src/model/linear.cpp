#include "model/linear.hpp"

#include "core/error.hpp"

namespace avtrain {

Linear::Linear(ParamStore& params, std::string module, int in, int out, float init_std, DType dtype, bool bias)
    : params_(params), module_(std::move(module)), in_(in), out_(out), dtype_(dtype) {
  weight_ = params.add(module_, "weight", {out, in}, Init::normal, init_std, true);
  params.set_working_dtype(weight_, dtype);
  if (bias) bias_ = params.add(module_, "bias", {out}, Init::zeros, 0, false);
}

void Linear::use_fp8(Fp8LinearScaling* fp8) {
  require(fp8 == nullptr || dtype_ == DType::bf16 || dtype_ == DType::f16,
          "internal: " + module_ + ": FP8 products in a module of " + dtype_name(dtype_));
  fp8_ = fp8;
}

std::pair<Operand, Operand> Linear::quantize_forward(Backend& be, Operand x, int rows, SavedTensor* keep_x8) {
  using Role = Fp8LinearScaling::Role;
  Mask& x_codes = keep_x8 ? keep_x8->fp8_codes() : x8_;
  const Operand x8 = fp8_->quantize(be, Role::x, x, std::size_t(rows) * in_, x_codes, fp8_scratch_, true);
  const Operand w8 =
      fp8_->quantize(be, Role::w, params_.operand(weight_), std::size_t(out_) * in_, w8_, fp8_scratch_, true);
  if (!keep_x8) return {x8, w8};
  keep_x8->kept_fp8(x8.dtype, fp8_->scale_in_use(Role::x));
  return {keep_x8->operand(), w8};
}

void Linear::forward(Backend& be, Operand x, Output y, int rows, SavedTensor* keep_x8) {
  require(!keep_x8 || fp8_, "internal: " + module_ + ": an E4M3 copy of x kept by a module without FP8 products");
  if (fp8_) {
    const auto [x8, w8] = quantize_forward(be, x, rows, keep_x8);
    be.linear_forward(DType::e4m3, x8, w8, bias_ >= 0 ? params_.value(bias_) : nullptr, y, rows, in_, out_);
    return;
  }
  be.linear_forward(dtype_, x, params_.operand(weight_), bias_ >= 0 ? params_.value(bias_) : nullptr, y, rows, in_,
                    out_);
}

void Linear::forward_gelu(Backend& be, Operand x, Output f, Output g, int rows, SavedTensor* keep_x8) {
  require(!keep_x8 || fp8_, "internal: " + module_ + ": an E4M3 copy of x kept by a module without FP8 products");
  if (fp8_) {
    const auto [x8, w8] = quantize_forward(be, x, rows, keep_x8);
    be.linear_gelu_forward(DType::e4m3, x8, w8, bias_ >= 0 ? params_.value(bias_) : nullptr, f, g, rows, in_, out_);
    return;
  }
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
  if (fp8_) {
    backward_fp8(be, x, dy_in, dy.copy_only ? nullptr : dy.values, dx, rows);
    return;
  }
  be.linear_param_grads(dtype_, dy_in, dy.copy_only ? nullptr : dy.values, x, params_.grad(weight_),
                        bias_ >= 0 ? params_.grad(bias_) : nullptr, dw_.data(), db_.data(), rows, in_, out_);
  if (!dx) return;
  be.gemm(dtype_, Trans::no, Trans::no, rows, in_, out_, 1.0f, dy_in, out_, params_.operand(weight_), in_, 0.0f,
          dx, in_);
  be.round_to(rounded(dx, dtype_), std::size_t(rows) * in_);
}

// wgrad dW = dy8^T x8 and dgrad dx = dy8 W8 (E5M2 x E4M3), x8 forward's kept copy or x quantized
// again; then as the 16-bit module's: dW and db
// (from dy's bf16 values, not from dy8: the bias takes no product) rounded and added to the main grads.
void Linear::backward_fp8(Backend& be, Operand x, Operand dy, const float* dy_values, float* dx, int rows) {
  const Operand dy8 =
      fp8_->quantize(be, Fp8LinearScaling::Role::dy, dy, std::size_t(rows) * out_, dy8_, fp8_scratch_, true);
  const Operand x8 = x.dtype == DType::e4m3  // forward's kept copy
                        ? x
                        : fp8_->quantize(be, Fp8LinearScaling::Role::x, x, std::size_t(rows) * in_, x8_, fp8_scratch_, false);
  be.gemm(DType::e5m2, Trans::yes, Trans::no, out_, in_, rows, 1.0f, dy8, out_, x8, in_, 0.0f, dw_.data(), in_);
  be.accumulate_rounded(dtype_, params_.grad(weight_), dw_.data(), std::size_t(out_) * in_);
  if (bias_ >= 0) {
    be.zero(db_.data(), std::size_t(out_) * sizeof(float));
    be.bias_grad(dy_values ? fp32(dy_values) : dy, db_.data(), rows, out_);
    be.accumulate_rounded(dtype_, params_.grad(bias_), db_.data(), std::size_t(out_));
  }
  if (!dx) return;
  const Operand w8 = fp8_->quantize(be, Fp8LinearScaling::Role::w, params_.operand(weight_), std::size_t(out_) * in_,
                                    w8_, fp8_scratch_, false);
  be.gemm(DType::e5m2, Trans::no, Trans::no, rows, in_, out_, 1.0f, dy8, out_, w8, in_, 0.0f, dx, in_);
  be.round_to(rounded(dx, dtype_), std::size_t(rows) * in_);
}

}  // namespace avtrain
