#include "model/batch_norm.hpp"

namespace avtrain {

BatchNorm1d::BatchNorm1d(ParamStore& params, std::string module, int channels, DType dtype, float eps,
                         float momentum)
    : params_(params), module_(std::move(module)), ch_(channels), dtype_(dtype), eps_(eps), momentum_(momentum) {
  gamma_ = params.add(module_, "weight", {channels}, Init::ones, 0, false);
  beta_ = params.add(module_, "bias", {channels}, Init::zeros, 0, false);
  running_mean_ = params.add(module_, "running_mean", {channels}, Init::zeros, 0, false, false);
  running_var_ = params.add(module_, "running_var", {channels}, Init::ones, 0, false, false);
  stat_sums_ = params.add(module_, "batch_stat_sums", {2, channels}, Init::zeros, 0, false, false);
}

void BatchNorm1d::forward(Backend& be, const float* x, const std::uint8_t* row_mask, float* y, float* mean,
                          float* rstd, int rows, bool training) {
  if (training) {
    be.batchnorm_forward_train(x, row_mask, params_.value(gamma_), params_.value(beta_), y, mean, rstd,
                               params_.value(stat_sums_), rows, ch_, eps_);
  } else {
    be.batchnorm_forward_eval(x, row_mask, params_.value(gamma_), params_.value(beta_),
                              params_.value(running_mean_), params_.value(running_var_), y, rows, ch_, eps_);
  }
  be.round_to(rounded(y, dtype_), std::size_t(rows) * ch_);
}

void BatchNorm1d::fold_running_stats(Backend& be, const std::function<void(float*, std::size_t)>& combine,
                                     int micro_batches) {
  float* sums = params_.value(stat_sums_);
  const std::size_t ch = std::size_t(ch_);
  combine(sums, 2 * ch);
  be.scale(sums, 2 * ch, momentum_ / float(micro_batches));
  float* stats[2] = {params_.value(running_mean_), params_.value(running_var_)};
  for (std::size_t k = 0; k < 2; ++k) {
    be.scale(stats[k], ch, 1.0f - momentum_);
    be.add(stats[k], sums + k * ch, ch);
  }
  be.fill(sums, 2 * ch, 0.0f);
}

void BatchNorm1d::backward(Backend& be, const float* x, const std::uint8_t* row_mask, const float* dy,
                           const float* mean, const float* rstd, float* dx, int rows) {
  be.batchnorm_backward(dy, x, row_mask, params_.value(gamma_), mean, rstd, dx, params_.grad(gamma_),
                        params_.grad(beta_), rows, ch_);
  be.round_to(rounded(dx, dtype_), std::size_t(rows) * ch_);
}

}  // namespace avtrain
