#include "model/conv1d.hpp"

namespace avtrain {

Conv1d::Conv1d(ParamStore& params, std::string module, int in_channels, int out_channels, int kernel,
               int stride, int pad, float init_std, DType dtype)
    : linear_(params, std::move(module), in_channels * kernel, out_channels, init_std, dtype),
      in_(in_channels), kernel_(kernel), stride_(stride), pad_(pad) {}

void Conv1d::forward(Backend& be, const float* x, Buffer& col, float* y, int B, int T) {
  const int To = output_length(T);
  col.resize(std::size_t(B) * To * col_width());
  be.im2col_1d(x, col.data(), B, T, in_, kernel_, stride_, pad_, To);
  be.round_to(rounded(col.data(), dtype()), col.size());
  linear_.forward(be, fp32(col.data()), y, B * To);
}

void Conv1d::backward(Backend& be, Operand col, const float* dy, float* dx, int B, int T) {
  const int To = output_length(T);
  if (!dx) {
    linear_.backward(be, col, dy, nullptr, B * To);
    return;
  }
  dcol_.resize(std::size_t(B) * To * col_width());
  linear_.backward(be, col, dy, dcol_.data(), B * To);
  be.col2im_1d(dcol_.data(), dx, B, T, in_, kernel_, stride_, pad_, To);
  be.round_to(rounded(dx, dtype()), std::size_t(B) * T * in_);
}

}  // namespace avtrain
