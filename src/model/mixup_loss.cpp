#include "model/mixup_loss.hpp"

namespace avtrain {

double mixup_cross_entropy(Backend& be, const float* logits, const std::int32_t* labels, const std::int32_t* mix_labels,
                           float lambda, float* dlogits, float* scratch, int rows, int classes, float grad_scale,
                           int* correct) {
  const std::size_t n = std::size_t(rows) * classes;
  float* d_mix = dlogits ? scratch : nullptr;
  const double own = be.cross_entropy(logits, labels, dlogits, rows, classes, grad_scale * lambda, correct);
  const double mixed = be.cross_entropy(logits, mix_labels, d_mix, rows, classes, grad_scale * (1.0f - lambda), nullptr);
  if (dlogits) be.add(dlogits, d_mix, n);
  return double(lambda) * own + (1.0 - double(lambda)) * mixed;
}

}  // namespace avtrain
