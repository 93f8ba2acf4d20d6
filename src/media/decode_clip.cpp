#include <algorithm>
#include <cmath>

#include "media/audio_track.hpp"
#include "media/clip.hpp"
#include "media/video_track.hpp"

namespace avtrain::media {

DecodedClip decode_clip(const ClipSource& source, const ClipShape& shape, OnDamaged on_damaged) {
  if (!(source.start >= 0) || !std::isfinite(source.start)) throw MediaError("start must be a number >= 0");
  const double seconds = source.duration > 0 ? std::min(source.duration, shape.seconds) : shape.seconds;
  DecodedClip clip;
  const auto a = static_cast<std::size_t>(shape.audio_samples);
  if (shape.audio_int16) clip.audio_pcm.assign(a, 0);
  else clip.audio_float.assign(a, 0.0f);
  clip.video.assign(std::size_t(shape.frames) * shape.height * shape.width * shape.channels, 0);
  try {
    decode_video(source.path, source.start, seconds, shape, clip, on_damaged);
  } catch (const MediaError& e) {
    throw MediaError(std::string("video: ") + e.what());
  }
  const std::string& audio = source.audio_path.empty() ? source.path : source.audio_path;
  try {
    decode_audio(audio, source.start, seconds, shape, clip, on_damaged);
  } catch (const MediaError& e) {
    throw MediaError(std::string("audio") + (source.audio_path.empty() ? "" : " (" + audio + ")") + ": " + e.what());
  }
  // Float audio is stored finite and in [-1, 1] (docs/shard-format.md; the writer refuses anything
  // else): a decoder's overshoot is clipped, as the conversion to int16 saturates.
  for (float& v : clip.audio_float) v = std::isfinite(v) ? std::clamp(v, -1.0f, 1.0f) : 0.0f;
  return clip;
}

}  // namespace avtrain::media
