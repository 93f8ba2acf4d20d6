#pragma once
// y[rows, out] = x[rows, in] W^T + b, W stored [out, in] as PyTorch does. The module computes in
// its type: products of its type's operands (W from the working copy) accumulated in fp32, the bias
// added in fp32, y and dx rounded to the type. dW and db of a micro-batch come out in the type too
// (as PyTorch autocast's do; this is where fp16 gradients underflow) and are added to the fp32 main
// grads; in fp32 they accumulate there directly.
#include <string>

#include "backend/backend.hpp"
#include "model/param_store.hpp"

namespace avtrain {

class Linear {
 public:
  Linear(ParamStore& params, std::string module, int in, int out, float init_std, DType dtype,
         bool bias = true);
  // x: values exact in the module's type; y: written, rounded to it (y's type: the module's), and its
  // copy in the same pass where y has one (a copy_only y: the copy alone is the result).
  void forward(Backend& be, Operand x, Output y, int rows);
  void forward(Backend& be, Operand x, float* y, int rows) { forward(be, x, rounded(y, dtype_), rows); }
  // forward, then g = GELU(f) rounded to the module's type (g's copy where it has one): one op, which
  // a backend may run as one pass after the product.
  void forward_gelu(Backend& be, Operand x, Output f, Output g, int rows);
  // Accumulates dW, db (Backend::linear_param_grads); writes dx (rounded to the module's type) when it
  // is not null. dy as the op that rounded it to the module's type left it: its values, and its copy
  // where it has one, which the products then read (as it is: no packing of dy for each); a copy_only
  // dy (16-bit types only): the products and the bias gradient read the copy alone (the bits of its
  // values).
  void backward(Backend& be, Operand x, Output dy, float* dx, int rows);
  void backward(Backend& be, Operand x, const float* dy, float* dx, int rows) {
    backward(be, x, fp32_out(const_cast<float*>(dy)), dx, rows);
  }
  const std::string& module() const { return module_; }
  DType dtype() const { return dtype_; }

 private:
  ParamStore& params_;
  std::string module_;
  int in_, out_;
  DType dtype_;
  ParamId weight_, bias_ = -1;
  Buffer dw_, db_;  // a micro-batch's dW, db in the module's type (16-bit types only)
};

}  // namespace avtrain
