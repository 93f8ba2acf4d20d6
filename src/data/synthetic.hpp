#pragma once
// Writes a synthetic shard set that only a model using both modalities can solve:
// label = audio_tone_class * motion_classes + video_motion_class. Multi-label (format v2): each sample's
// set is {audio_tone_class, tone_classes + video_motion_class}, tone_classes + motion_classes classes.
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain::data {

struct SynthOptions {
  std::string out_dir;
  int shards = 4;
  std::int64_t samples_per_shard = 512;
  std::uint64_t seed = 1;
  int sample_rate = 8000;
  std::int64_t audio_samples = 8000;  // A
  int frames = 8, height = 32, width = 32, channels = 1;
  double fps = 8.0;
  int tone_classes = 4;
  int motion_classes = 4;
  double noise = 0.1;        // noise amplitude relative to the signal
  bool float_audio = false;  // int16 PCM by default
  bool gzip = true;
  int gzip_level = 4;  // deflate level 1..9
  int zstd_level = 0;  // > 0: zstd at this level (1..22) in place of deflate
  bool multi_label = false;  // format v2: the tone class and the motion class, each a label
};

// Writes out_dir/shard-00000.h5 ... (out_dir is created if missing); the same options give the same bytes.
// Throws Error for options that cannot make a solvable set (docs/shard-format.md lists the limits).
void write_synthetic(const SynthOptions& options);

// The tone of each tone class in Hz: equally spaced on the mel scale from 200 Hz to min(3000, 0.375 * sample_rate).
std::vector<double> tone_frequencies(int tone_classes, int sample_rate);

// The direction of each motion class (0..7) in pixels per step; x grows to the right, y downwards.
// 0 right, 1 left, 2 down, 3 up, 4 down-right, 5 up-left, 6 down-left, 7 up-right.
struct MotionDirection {
  int dx = 0;
  int dy = 0;
};
MotionDirection motion_direction(int motion_class);
constexpr int kMaxMotionClasses = 8;

}  // namespace avtrain::data
