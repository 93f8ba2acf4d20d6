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
  // x: values exact in the module's type; y: written, rounded to it, and its 16-bit patterns to
  // y16 in the same pass when that is not null (16-bit types).
  void forward(Backend& be, Operand x, float* y, int rows, std::uint16_t* y16 = nullptr);
  // forward, then g = GELU(y) rounded to the module's type (patterns to g16 when not null): one op,
  // which a backend may run as one pass after the product.
  void forward_gelu(Backend& be, Operand x, float* y, std::uint16_t* y16, float* g, std::uint16_t* g16, int rows);
  // The same, where the caller reads only the 16-bit copies (Backend::writes_16bit_outputs_only): y16
  // (f16 and g16) written, the fp32 buffers the op's scratch.
  void forward_16(Backend& be, Operand x, float* scratch, std::uint16_t* y16, int rows);
  void forward_gelu_16(Backend& be, Operand x, float* f_scratch, std::uint16_t* f16, float* g_scratch,
                       std::uint16_t* g16, int rows);
  // Accumulates dW, db (Backend::linear_param_grads); writes dx (rounded to the module's type) when it is not null. dy's values
  // must be exact in the module's type; dy16, when not null, holds their 16-bit patterns, which the
  // products then read (as they are: no packing of dy for each).
  void backward(Backend& be, Operand x, const float* dy, float* dx, int rows, const std::uint16_t* dy16 = nullptr);
  // The same where dy's 16-bit patterns alone were written (fused attention's dqkv16; 16-bit types only):
  // the products and the bias gradient read dy16 (the bits of backward given its values too).
  void backward_16(Backend& be, Operand x, const std::uint16_t* dy16, float* dx, int rows);
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
