#include "model/token_parts.hpp"

#include "core/error.hpp"

namespace avtrain {

TokenParts TokenParts::of(const TokenGeometry& g, int parts, int part) {
  require(parts >= 1 && part >= 0 && part < parts, "internal: part " + std::to_string(part) + " of " +
                                                       std::to_string(parts) + " tokens");
  TokenParts t;
  t.parts = parts;
  t.part = part;
  t.Ta = g.audio_tokens;
  t.Nv = g.video_tokens;
  t.audio_slots = (g.audio_tokens + parts - 1) / parts;
  t.video_slots = (g.video_tokens + parts - 1) / parts;
  return t;
}

TokenParts::Cut TokenParts::cut(const std::vector<int>& valid_audio, const std::vector<int>& valid_video) const {
  const int B = int(valid_audio.size()), Lp = tokens(), L = Ta + Nv;
  Cut c;
  c.rows.assign(std::size_t(B) * Lp, -1);
  c.mask.assign(std::size_t(B) * Lp, 0);
  c.keys.assign(std::size_t(B) * parts * Lp, 0);
  c.counts.assign(std::size_t(2) * B, 0.0f);
  for (int b = 0; b < B; ++b) {
    c.counts[std::size_t(b)] = float(valid_audio[std::size_t(b)]);
    c.counts[std::size_t(B + b)] = float(valid_video[std::size_t(b)]);
    // Segment s of part r: its valid tokens [r n / parts, (r + 1) n / parts) into its slots.
    const auto place = [&](int r, int n, int first_token, int first_slot, bool mine) {
      const int lo = int(std::int64_t(r) * n / parts), hi = int(std::int64_t(r + 1) * n / parts);
      for (int t = lo; t < hi; ++t) {
        const int slot = first_slot + t - lo;
        c.keys[(std::size_t(b) * parts + r) * Lp + slot] = 1;
        if (!mine) continue;
        c.rows[std::size_t(b) * Lp + slot] = std::int32_t(std::int64_t(b) * L + first_token + t);
        c.mask[std::size_t(b) * Lp + slot] = 1;
      }
    };
    for (int r = 0; r < parts; ++r) {
      place(r, valid_audio[std::size_t(b)], 0, 0, r == part);
      place(r, valid_video[std::size_t(b)], Ta, audio_slots, r == part);
    }
  }
  return c;
}

}  // namespace avtrain
