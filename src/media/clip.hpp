#pragma once
// One clip to decode, the shape every clip of a pack comes out in, and the decoded result.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace avtrain::media {

// Where a clip comes from: video (and audio, unless audio_path names another file) from `path`,
// `duration` seconds from `start` (seconds from the beginning of the media; duration <= 0: as long as
// the pack's clip).
struct ClipSource {
  std::string path;
  std::string audio_path;  // empty: the audio of `path`
  double start = 0;
  double duration = 0;
};

// The shape of every clip: mono audio at sample_rate, `frames` frames at fps, scaled to cover
// height x width keeping the display aspect, then centre-cropped; channels 1 (grey) or 3 (RGB).
struct ClipShape {
  double seconds = 1;  // the clip's duration
  int sample_rate = 8000;
  std::int64_t audio_samples = 8000;  // A
  double fps = 8;
  int frames = 8, height = 32, width = 32, channels = 1;
  bool audio_int16 = true;  // else float32
};

// A stream's packets as the clip's decode went through them: `damaged` of them failed to decode and
// were skipped, the gap filled (audio: silence for their duration; video: the previous frame shown).
struct PacketCount {
  std::int64_t packets = 0;  // the stream's packets sent to the decoder
  std::int64_t damaged = 0;  // of those (and of the decoder's own errors), the ones that failed to decode
  std::string first_error;   // FFmpeg's text for the first ("Invalid data found when processing input")
};

// What a packet that fails to decode does: skip (counted in PacketCount, the gap filled) or fail
// (MediaError naming the packet's time, as --on-error fail wants).
enum class OnDamaged { skip, fail };

// A decoded clip in the shard's layout; zero past audio_len and video_len.
struct DecodedClip {
  std::vector<std::int16_t> audio_pcm;  // [A], when audio_int16
  std::vector<float> audio_float;       // [A], otherwise
  std::int32_t audio_len = 0;           // 1..A
  std::vector<std::uint8_t> video;      // [F, H, W, C]
  std::int32_t video_len = 0;           // 1..F
  PacketCount audio_packets, video_packets;
};

// Why a clip cannot be packed, in a few words for pack-report.csv ("no audio stream", ...).
class MediaError : public std::runtime_error {
 public:
  explicit MediaError(const std::string& reason) : std::runtime_error(reason) {}
};

// Decodes the clip with FFmpeg's libraries; throws MediaError. Thread-safe: each call has its own
// demuxers, decoders, resampler and scaler (single-threaded decoders, so the bytes do not depend on
// how many clips run at once). Damaged packets: see OnDamaged; the counts are in the clip.
DecodedClip decode_clip(const ClipSource& source, const ClipShape& shape, OnDamaged on_damaged = OnDamaged::skip);

// FFmpeg's own log lines off (the reasons go to the pack report instead); call once before decoding.
void quiet_ffmpeg_log();

}  // namespace avtrain::media
