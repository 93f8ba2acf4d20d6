#pragma once
// A clip's video: frames chosen by presentation time at the pack's fps, scaled to cover the frame
// keeping the display aspect, centre-cropped, as grey or RGB bytes (libswscale).
#include <string>

#include "media/clip.hpp"

namespace avtrain::media {

// Fills clip.video ([F, H, W, C], zero past the end) and clip.video_len with the frames shown at
// start + k / fps for k / fps < seconds, and clip.video_packets. Throws MediaError (no video stream,
// start past the end, ...). A damaged packet (OnDamaged::skip) is skipped: the frame before it is shown
// until the next one that decodes.
void decode_video(const std::string& path, double start, double seconds, const ClipShape& shape, DecodedClip& clip,
                  OnDamaged on_damaged);

}  // namespace avtrain::media
