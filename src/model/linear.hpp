#pragma once
// y[rows, out] = x[rows, in] W^T + b, W stored [out, in] as PyTorch does. The module computes in
// its type: products of its type's operands (W from the working copy) accumulated in fp32, the bias
// added in fp32, y and dx rounded to the type. dW and db of a micro-batch come out in the type too
// (as PyTorch autocast's do; this is where fp16 gradients underflow) and are added to the fp32 main
// grads; in fp32 they accumulate there directly.
// Under precision.mode fp8 a bf16 module given an Fp8LinearScaling takes its three products in FP8:
// x and W quantized to E4M3 forward, dy to E5M2 backward, dgrad dy8 x W8 and wgrad dy8^T x x8, each
// product's output in fp32 and then as the bf16 module's (bias added in fp32, y and dx rounded to
// bf16, dW and db rounded to bf16 and added to the main grads). x8 is the E4M3 copy forward made, kept
// by the caller (forward's keep_x8: 1 byte an element in place of the 16-bit x) and handed to backward
// as x; a 16-bit x is quantized again (as W is) with the scale forward used: the same codes.
#include <string>
#include <utility>

#include "backend/backend.hpp"
#include "model/fp8_linear_scaling.hpp"
#include "model/param_store.hpp"
#include "model/saved_tensor.hpp"

namespace avtrain {

class Linear {
 public:
  Linear(ParamStore& params, std::string module, int in, int out, float init_std, DType dtype,
         bool bias = true);
  // x: values exact in the module's type; y: written, rounded to it (y's type: the module's), and its
  // copy in the same pass where y has one (a copy_only y: the copy alone is the result). `keep_x8`
  // (FP8 modules only): x's E4M3 codes and scale are kept there, for backward (see above).
  void forward(Backend& be, Operand x, Output y, int rows, SavedTensor* keep_x8 = nullptr);
  void forward(Backend& be, Operand x, float* y, int rows, SavedTensor* keep_x8 = nullptr) {
    forward(be, x, rounded(y, dtype_), rows, keep_x8);
  }
  // forward, then g = GELU(f) rounded to the module's type (g's copy where it has one): one op, which
  // a backend may run as one pass after the product.
  void forward_gelu(Backend& be, Operand x, Output f, Output g, int rows, SavedTensor* keep_x8 = nullptr);
  // Accumulates dW, db (Backend::linear_param_grads); writes dx (rounded to the module's type) when it
  // is not null; x as forward took it, or its E4M3 copy that forward kept (an FP8 module). dy as the
  // op that rounded it to the module's type left it: its values, and its copy
  // where it has one, which the products then read (as it is: no packing of dy for each); a copy_only
  // dy (16-bit types only): the products and the bias gradient read the copy alone (the bits of its
  // values).
  void backward(Backend& be, Operand x, Output dy, float* dx, int rows);
  void backward(Backend& be, Operand x, const float* dy, float* dx, int rows) {
    backward(be, x, fp32_out(const_cast<float*>(dy)), dx, rows);
  }
  const std::string& module() const { return module_; }
  DType dtype() const { return dtype_; }
  // The products in FP8 with `fp8`'s scales (owned by the caller, kept while the module runs); only
  // a 16-bit module's (its activations and gradients stay in its type). Null: products in the type.
  void use_fp8(Fp8LinearScaling* fp8);
  Fp8LinearScaling* fp8() const { return fp8_; }

 private:
  // The FP8 forward's operands (x8 kept in `keep_x8` when given).
  std::pair<Operand, Operand> quantize_forward(Backend& be, Operand x, int rows, SavedTensor* keep_x8);
  void backward_fp8(Backend& be, Operand x, Operand dy, const float* dy_values, float* dx, int rows);

  ParamStore& params_;
  std::string module_;
  int in_, out_;
  DType dtype_;
  ParamId weight_, bias_ = -1;
  Buffer dw_, db_;  // a micro-batch's dW, db in the module's type (16-bit types only)
  Fp8LinearScaling* fp8_ = nullptr;
  Mask x8_, w8_, dy8_;  // the FP8 products' operands (scratch of one op)
  Buffer fp8_scratch_;  // a 16-bit tensor's values on their way to fp8
};

}  // namespace avtrain
