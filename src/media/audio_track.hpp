#pragma once
// A clip's audio: decoded, mixed down to mono and resampled with libswresample.
#include <string>

#include "media/clip.hpp"

namespace avtrain::media {

// Fills clip.audio_* ([A], zero past the end) and clip.audio_len with `seconds` of the audio of
// `path` from `start`, and clip.audio_packets. Throws MediaError (no audio stream, start past the end,
// ...). A damaged packet (OnDamaged::skip) leaves silence for its duration.
void decode_audio(const std::string& path, double start, double seconds, const ClipShape& shape, DecodedClip& clip,
                  OnDamaged on_damaged);

}  // namespace avtrain::media
