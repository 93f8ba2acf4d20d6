#pragma once
// SpecAugment's masks applied to a log-mel on the backend (the masks are drawn on the host,
// data/augment.hpp). A masked value becomes the mean of its mel bin over the sample's valid frames:
// the paper masks to the mean (0 after per-bin normalisation), and this log-mel is not normalised
// (on the media demo its values lie between log(1e-6) = -13.8 for silence and about 5; 0 would
// paint loud bands). Built from ops every backend has: masked_mean_pool_forward gives the means,
// its backward with every frame selected broadcasts them (then scaled by Tf back to means),
// mask_rows over single elements keeps and drops, add joins.
#include <cstdint>
#include <vector>

#include "backend/backend.hpp"
#include "core/buffer.hpp"

namespace avtrain {

// logmel[B, T, M] where keep = 0 replaced by mean[b, m] over the frames with frame_mask[b, t] = 1.
// drop = !keep, all_frames[B, T] = 1; mean[B, M] and fill[B, T, M] are scratch. Device pointers.
void apply_spec_masks(Backend& be, float* logmel, const std::uint8_t* keep, const std::uint8_t* drop,
                      const std::uint8_t* frame_mask, const std::uint8_t* all_frames, float* mean, float* fill, int B,
                      int T, int M);

// The same with its masks and scratch held, from the host's keep mask.
class SpecMasking {
 public:
  void apply(Backend& be, float* logmel, const std::vector<std::uint8_t>& keep, const std::uint8_t* frame_mask, int B,
             int T, int M);

 private:
  std::vector<std::uint8_t> host_drop_, host_all_;
  Mask keep_, drop_, all_frames_;
  Buffer mean_, fill_;
};

}  // namespace avtrain
