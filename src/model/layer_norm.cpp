#include "model/layer_norm.hpp"

namespace avtrain {

LayerNorm::LayerNorm(ParamStore& params, std::string module, int dim, DType dtype, float eps)
    : params_(params), module_(std::move(module)), dim_(dim), dtype_(dtype), eps_(eps) {
  gamma_ = params.add(module_, "weight", {dim}, Init::ones, 0, false);
  beta_ = params.add(module_, "bias", {dim}, Init::zeros, 0, false);
}

void LayerNorm::forward(Backend& be, const float* x, Output y, float* mean, float* rstd, int rows) {
  be.layernorm_forward(x, params_.value(gamma_), params_.value(beta_), y, mean, rstd, rows, dim_, eps_);
}

void LayerNorm::backward(Backend& be, Operand x, const float* dy, const float* mean, const float* rstd, float* dx,
                         int rows) {
  be.layernorm_backward(dy, x, params_.value(gamma_), mean, rstd, dx, params_.grad(gamma_),
                        params_.grad(beta_), rows, dim_);
  be.round_to(rounded(dx, dtype_), std::size_t(rows) * dim_);
}

}  // namespace avtrain
