#pragma once
// y[rows, out] = x[rows, in] W^T + b, W stored [out, in] as PyTorch does.
#include <string>

#include "backend/backend.hpp"
#include "model/param_store.hpp"

namespace avtrain {

class Linear {
 public:
  Linear(ParamStore& params, std::string module, int in, int out, float init_std, bool bias = true);
  void forward(Backend& be, const float* x, float* y, int rows);
  // Accumulates dW, db; writes dx when it is not null.
  void backward(Backend& be, const float* x, const float* dy, float* dx, int rows);
  const std::string& module() const { return module_; }

 private:
  ParamStore& params_;
  std::string module_;
  int in_, out_;
  ParamId weight_, bias_ = -1;
};

}  // namespace avtrain
