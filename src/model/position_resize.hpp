#pragma once
// The positional embedding of a model trained on clips of another length, fitted to this model's
// tokens as AST does for other clip lengths: its rows are the audio tokens in time order, then the
// video tokens in (tubelet step, row, column) order (AVInput lays them out so); the audio rows are
// interpolated linearly over time, the video rows over tubelet steps at each (row, column), as
// torch.nn.functional.interpolate(mode="linear", align_corners=False) does.
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace avtrain {

// The parameter that holds the positional embedding, [tokens, width] (AVInput registers it).
inline constexpr const char* kPositionalEmbedding = "embed.pos";

// How the rows of a positional embedding split by modality.
struct PositionLayout {
  int audio_tokens = 0;
  int video_tokens = 0;
  int video_tokens_per_step = 0;  // the video grid: (H / patch) (W / patch)
  int tokens() const { return audio_tokens + video_tokens; }
  int video_steps() const { return video_tokens_per_step ? video_tokens / video_tokens_per_step : 0; }
  bool operator==(const PositionLayout&) const = default;
  static PositionLayout of(const TokenGeometry& g) {
    return {g.audio_tokens, g.video_tokens, g.tokens_per_tubelet_step};
  }
};

// pos [from.tokens(), width] (row-major) as [to.tokens(), width]. A video grid of another size (other
// frame sizes or patches) cannot be fitted by time alone: an Error.
std::vector<float> resize_positions(const std::vector<float>& pos, const PositionLayout& from, const PositionLayout& to,
                                    int width);

// "audio 32 -> 16 tokens, video 64 -> 32 tokens (4 -> 2 tubelet steps)", naming only what changes.
std::string describe_resize(const PositionLayout& from, const PositionLayout& to);

}  // namespace avtrain
