#include "model/spec_masking.hpp"

namespace avtrain {

void apply_spec_masks(Backend& be, float* logmel, const std::uint8_t* keep, const std::uint8_t* drop,
                      const std::uint8_t* frame_mask, const std::uint8_t* all_frames, float* mean, float* fill, int B,
                      int T, int M) {
  const std::size_t n = std::size_t(B) * T * M;
  be.masked_mean_pool_forward(logmel, frame_mask, nullptr, mean, B, T, M, 0, T);
  be.fill(fill, n, 0.0f);
  be.masked_mean_pool_backward(mean, all_frames, nullptr, fill, B, T, M, 0, T);  // mean / T in every frame
  be.scale(fill, n, float(T));
  be.mask_rows(fill, drop, int(n), 1);
  be.mask_rows(logmel, keep, int(n), 1);
  be.add(logmel, fill, n);
}

void SpecMasking::apply(Backend& be, float* logmel, const std::vector<std::uint8_t>& keep,
                        const std::uint8_t* frame_mask, int B, int T, int M) {
  host_drop_.resize(keep.size());
  for (std::size_t i = 0; i < keep.size(); ++i) host_drop_[i] = !keep[i];
  host_all_.assign(std::size_t(B) * T, 1);
  keep_.upload(keep.data(), keep.size());
  drop_.upload(host_drop_.data(), host_drop_.size());
  all_frames_.upload(host_all_.data(), host_all_.size());
  mean_.resize(std::size_t(B) * M);
  fill_.resize(keep.size());
  apply_spec_masks(be, logmel, keep_.data(), drop_.data(), frame_mask, all_frames_.data(), mean_.data(), fill_.data(),
                   B, T, M);
}

}  // namespace avtrain
