#include "model/linear.hpp"

namespace avtrain {

Linear::Linear(ParamStore& params, std::string module, int in, int out, float init_std, bool bias)
    : params_(params), module_(std::move(module)), in_(in), out_(out) {
  weight_ = params.add(module_, "weight", {out, in}, Init::normal, init_std, true);
  if (bias) bias_ = params.add(module_, "bias", {out}, Init::zeros, 0, false);
}

void Linear::forward(Backend& be, const float* x, float* y, int rows) {
  // Start from the bias and accumulate (beta = 1): no separate pass to zero y or to add the bias.
  if (bias_ >= 0) be.fill_rows(y, params_.value(bias_), rows, out_);
  be.gemm(Trans::no, Trans::yes, rows, out_, in_, 1.0f, x, in_, params_.value(weight_), in_,
          bias_ >= 0 ? 1.0f : 0.0f, y, out_);
}

void Linear::backward(Backend& be, const float* x, const float* dy, float* dx, int rows) {
  be.gemm(Trans::yes, Trans::no, out_, in_, rows, 1.0f, dy, out_, x, in_, 1.0f, params_.grad(weight_), in_);
  if (bias_ >= 0) be.bias_grad(dy, params_.grad(bias_), rows, out_);
  if (dx) be.gemm(Trans::no, Trans::no, rows, in_, out_, 1.0f, dy, out_, params_.value(weight_), in_, 0.0f, dx, in_);
}

}  // namespace avtrain
