#include "model/conv1d.hpp"

namespace avtrain {

Conv1d::Conv1d(ParamStore& params, std::string module, int in_channels, int out_channels, int kernel,
               int stride, int pad, float init_std)
    : linear_(params, std::move(module), in_channels * kernel, out_channels, init_std),
      in_(in_channels), kernel_(kernel), stride_(stride), pad_(pad) {}

void Conv1d::forward(Backend& be, const float* x, float* col, float* y, int B, int T) {
  const int To = output_length(T);
  be.im2col_1d(x, col, B, T, in_, kernel_, stride_, pad_, To);
  linear_.forward(be, col, y, B * To);
}

void Conv1d::backward(Backend& be, const float* col, const float* dy, float* dx, int B, int T) {
  const int To = output_length(T);
  if (!dx) {
    linear_.backward(be, col, dy, nullptr, B * To);
    return;
  }
  dcol_.resize(std::size_t(B) * To * col_width());
  linear_.backward(be, col, dy, dcol_.data(), B * To);
  be.col2im_1d(dcol_.data(), dx, B, T, in_, kernel_, stride_, pad_, To);
}

}  // namespace avtrain
