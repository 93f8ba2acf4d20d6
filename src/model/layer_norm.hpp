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
  // y rounded to the module's type, and its 16-bit patterns to y16 in the same pass when not null.
  void forward(Backend& be, const float* x, float* y, float* mean, float* rstd, int rows, std::uint16_t* y16 = nullptr);
  // The same where the caller reads only the 16-bit copy (Backend::writes_16bit_outputs_only): y16
  // written, y the op's scratch.
  void forward_16(Backend& be, const float* x, float* scratch, float* mean, float* rstd, int rows, std::uint16_t* y16);
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
