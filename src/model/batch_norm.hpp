#pragma once
// BatchNorm1d over the channels of x[rows, ch], statistics over the real (masked-in) rows only,
// so padding changes nothing. Training: batch statistics; each micro-batch's mean and unbiased
// variance are summed, and once per step their mean over the global batch's micro-batches updates
// the running statistics (momentum 0.1, as PyTorch does per batch), so they do not depend on how
// the global batch is cut into micro-batches and replicas. Eval: running statistics. Statistics
// always in fp32; y and dx rounded to the module's type.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "model/param_store.hpp"

namespace avtrain {

class BatchNorm1d {
 public:
  BatchNorm1d(ParamStore& params, std::string module, int channels, DType dtype, float eps = 1e-5f,
              float momentum = 0.1f);
  // mean and rstd [ch] are saved for backward (training only).
  void forward(Backend& be, const float* x, const std::uint8_t* row_mask, float* y, float* mean,
               float* rstd, int rows, bool training);
  void backward(Backend& be, const float* x, const std::uint8_t* row_mask, const float* dy,
                const float* mean, const float* rstd, float* dx, int rows);
  // Folds the step's summed batch statistics into the running ones: `combine` adds a buffer over
  // the replicas (identity on one), `micro_batches` counts the global batch's micro-batches.
  void fold_running_stats(Backend& be, const std::function<void(float*, std::size_t)>& combine,
                          int micro_batches);
  const std::string& module() const { return module_; }
  DType dtype() const { return dtype_; }

 private:
  ParamStore& params_;
  std::string module_;
  int ch_;
  DType dtype_;
  float eps_, momentum_;
  ParamId gamma_, beta_, running_mean_, running_var_, stat_sums_;
};

}  // namespace avtrain
