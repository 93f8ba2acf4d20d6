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
         int stride, int pad, float init_std);
  int output_length(int T) const { return (T + 2 * pad_ - kernel_) / stride_ + 1; }
  // col must hold B * To * C * k floats and is kept for backward.
  void forward(Backend& be, const float* x, float* col, float* y, int B, int T);
  // Accumulates the weight and bias gradients; writes dx[B, T, C] when dx is not null.
  void backward(Backend& be, const float* col, const float* dy, float* dx, int B, int T);
  const std::string& module() const { return linear_.module(); }
  int col_width() const { return in_ * kernel_; }

 private:
  Linear linear_;
  int in_, kernel_, stride_, pad_;
  Buffer dcol_;
};

}  // namespace avtrain
