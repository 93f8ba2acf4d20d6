#pragma once
// BatchNorm1d over the channels of x[rows, ch], statistics over the real (masked-in) rows only,
// so padding changes nothing. Training: batch statistics, running statistics updated
// (momentum 0.1, unbiased variance, as PyTorch). Eval: running statistics. Statistics always in
// fp32; y and dx rounded to the module's type.
#include <cstdint>
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
  const std::string& module() const { return module_; }
  DType dtype() const { return dtype_; }

 private:
  ParamStore& params_;
  std::string module_;
  int ch_;
  DType dtype_;
  float eps_, momentum_;
  ParamId gamma_, beta_, running_mean_, running_var_;
};

}  // namespace avtrain
