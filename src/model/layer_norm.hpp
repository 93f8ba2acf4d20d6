#pragma once
// LayerNorm over the last dimension; statistics in fp32 (saved for backward by the caller), y and dx
// rounded to the module's type.
#include <string>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "model/param_store.hpp"

namespace avtrain {

class LayerNorm {
 public:
  LayerNorm(ParamStore& params, std::string module, int dim, DType dtype, float eps = 1e-5f);
  // y rounded to the module's type (y's type), and its copy in the same pass where y has one (a
  // copy_only y: the copy alone is the result).
  void forward(Backend& be, const float* x, Output y, float* mean, float* rstd, int rows);
  void forward(Backend& be, const float* x, float* y, float* mean, float* rstd, int rows) {
    forward(be, x, rounded(y, dtype_), mean, rstd, rows);
  }
  // x as forward read it: fp32 values, or a kept 16-bit copy (read as it is).
  void backward(Backend& be, Operand x, const float* dy, const float* mean, const float* rstd, float* dx, int rows);
  const std::string& module() const { return module_; }
  DType dtype() const { return dtype_; }

 private:
  ParamStore& params_;
  std::string module_;
  int dim_;
  DType dtype_;
  float eps_;
  ParamId gamma_, beta_;
};

}  // namespace avtrain
