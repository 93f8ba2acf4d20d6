#pragma once
// How parallel.cp cuts a sample's tokens: [audio | video] with padding in each segment, each segment
// cut on its own so that every part holds the same slots for it:
//   a part: [audio_slots | video_slots], audio_slots = ceil(Ta / parts), video_slots = ceil(Nv / parts)
// Part r holds the valid tokens [r n / parts, (r + 1) n / parts) of each segment (n of them valid in the
// sample): contiguous, and the valid tokens of a sample balanced across the parts to within one a
// segment whatever its padding. Slots left over are fillers: zero rows, masked as keys, outside the
// pools. Tokens keep their global index (their embeddings are added before the cut).
// The gathered order (what attention sees after the all-to-all) is the parts one after the other.
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"

namespace avtrain {

struct TokenParts {
  int parts = 1, part = 0;
  int Ta = 0, Nv = 0;                  // the whole sequence's segments (L = Ta + Nv)
  int audio_slots = 0, video_slots = 0;

  static TokenParts of(const TokenGeometry& g, int parts, int part);
  int tokens() const { return audio_slots + video_slots; }  // Lp
  int gathered_tokens() const { return parts * tokens(); }

  // For a micro-batch of samples with these valid token counts, on the host:
  struct Cut {
    std::vector<std::int32_t> rows;   // [B, Lp] the row of x[B, L, D] each slot holds; -1: a filler
    std::vector<std::uint8_t> mask;   // [B, Lp] 1 for a valid token of this part
    std::vector<std::uint8_t> keys;   // [B, parts x Lp] the key mask in the gathered order
    std::vector<float> counts;        // [2, B] the valid audio, then video, tokens of each sample (all parts)
  };
  Cut cut(const std::vector<int>& valid_audio, const std::vector<int>& valid_video) const;
};

}  // namespace avtrain
