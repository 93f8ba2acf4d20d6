#pragma once
// Conv1d over time, channels last: x[B, T, C] -> y[B, To, out], by im2col and one matrix product.
// The weight is [out, C * k] in PyTorch's [out, C, k] order.
#include <string>

#include "backend/backend.hpp"
#include "core/buffer.hpp"
#include "model/linear.hpp"

namespace avtrain {

class Conv1d {
 public:
  Conv1d(ParamStore& params, std::string module, int in_channels, int out_channels, int kernel,
         int stride, int pad, float init_std, DType dtype);
  int output_length(int T) const { return (T + 2 * pad_ - kernel_) / stride_ + 1; }
  // col gets the im2col matrix [B * To, C * k] rounded to the module's type: the caller keeps it for
  // backward. y is rounded to the module's type.
  void forward(Backend& be, const float* x, Buffer& col, float* y, int B, int T);
  // Accumulates the weight and bias gradients; writes dx[B, T, C] when dx is not null.
  void backward(Backend& be, Operand col, const float* dy, float* dx, int B, int T);
  const std::string& module() const { return linear_.module(); }
  DType dtype() const { return linear_.dtype(); }
  int col_width() const { return in_ * kernel_; }

 private:
  Linear linear_;
  int in_, kernel_, stride_, pad_;
  Buffer dcol_;
};

}  // namespace avtrain
