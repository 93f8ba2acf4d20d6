#include "model/position_resize.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace avtrain {

namespace {

// Rows [0, n) of `out` (each `stride` rows apart, `width` wide) from rows [0, m) of `in`: linear
// interpolation with half-pixel centres, the sample of output row i at input position
// (i + 0.5) m / n - 0.5, clamped to the first and last rows.
void interpolate_rows(const float* in, int m, float* out, int n, int stride, int width) {
  const double scale = double(m) / double(n);
  for (int i = 0; i < n; ++i) {
    const double x = std::max(0.0, (i + 0.5) * scale - 0.5);
    const int i0 = std::min(int(x), m - 1);
    const int i1 = std::min(i0 + 1, m - 1);
    const double t = x - i0;
    const float* a = in + std::size_t(i0) * stride * width;
    const float* b = in + std::size_t(i1) * stride * width;
    float* o = out + std::size_t(i) * stride * width;
    for (int c = 0; c < width; ++c) o[c] = float((1.0 - t) * a[c] + t * b[c]);
  }
}

}  // namespace

std::vector<float> resize_positions(const std::vector<float>& pos, const PositionLayout& from, const PositionLayout& to,
                                    int width) {
  require(pos.size() == std::size_t(from.tokens()) * width, "internal: resize_positions of a tensor of another size");
  require(from.audio_tokens > 0 && to.audio_tokens > 0 && from.video_steps() > 0 && to.video_steps() > 0,
          std::string(kPositionalEmbedding) + ": no audio or no video tokens to interpolate between");
  require(from.video_tokens_per_step == to.video_tokens_per_step,
          std::string(kPositionalEmbedding) + ": the file's video grid has " + std::to_string(from.video_tokens_per_step) +
              " tokens per tubelet step, this model's " + std::to_string(to.video_tokens_per_step) +
              " (other frame sizes or model.patch): only the clip length may differ");
  std::vector<float> out(std::size_t(to.tokens()) * width);
  interpolate_rows(pos.data(), from.audio_tokens, out.data(), to.audio_tokens, 1, width);
  const int grid = to.video_tokens_per_step;
  const float* video_in = pos.data() + std::size_t(from.audio_tokens) * width;
  float* video_out = out.data() + std::size_t(to.audio_tokens) * width;
  for (int cell = 0; cell < grid; ++cell)
    interpolate_rows(video_in + std::size_t(cell) * width, from.video_steps(), video_out + std::size_t(cell) * width,
                     to.video_steps(), grid, width);
  return out;
}

std::string describe_resize(const PositionLayout& from, const PositionLayout& to) {
  std::string s;
  if (from.audio_tokens != to.audio_tokens)
    s = "audio " + std::to_string(from.audio_tokens) + " -> " + std::to_string(to.audio_tokens) + " tokens";
  if (from.video_tokens != to.video_tokens)
    s += (s.empty() ? "" : ", ") + std::string("video ") + std::to_string(from.video_tokens) + " -> " +
         std::to_string(to.video_tokens) + " tokens (" + std::to_string(from.video_steps()) + " -> " +
         std::to_string(to.video_steps()) + " tubelet steps of " + std::to_string(to.video_tokens_per_step) + ")";
  return s;
}

}  // namespace avtrain
