#include "data/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <sstream>

#include "core/error.hpp"
#include "core/keyed_random.hpp"
#include "data/shard_writer.hpp"

namespace avtrain::data {

namespace {

constexpr double kLowestTone = 200.0;     // Hz
constexpr double kHighestTone = 3000.0;   // Hz, or 0.375 * sample_rate when that is lower
constexpr int kMaxToneClasses = 64;
constexpr double kBackground = 24.0;      // grey level of the dark background
constexpr double kSquare = 200.0;         // grey level of the moving square
constexpr double kPixelNoisePerNoise = 100.0;  // pixel noise std in grey levels = noise * this
constexpr std::size_t kBlockBytes = std::size_t{16} << 20;  // samples generated and written together

double hz_to_mel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

int square_size(const SynthOptions& o) { return std::clamp(std::min(o.height, o.width) / 4, 2, 8); }

std::int64_t half_up(std::int64_t n) { return (n + 1) / 2; }

void require_option(bool ok, const std::string& what) {
  if (!ok) throw Error("synthetic shards: " + what);
}

void check_options(const SynthOptions& o) {
  require_option(!o.out_dir.empty(), "no output directory (--out)");
  require_option(o.shards >= 1, "shards (--shards) must be at least 1");
  require_option(o.samples_per_shard >= 1, "samples per shard (--samples) must be at least 1");
  require_option(o.sample_rate >= 1000, "sample rate (--sample-rate) must be at least 1000 Hz");
  require_option(o.audio_samples >= 1 && o.audio_samples <= INT32_MAX, "audio samples (--audio-samples) must be in 1..2^31-1");
  require_option(o.frames >= 1, "frames (--frames) must be at least 1");
  require_option(o.height >= 4 && o.width >= 4, "height and width (--height, --width) must be at least 4");
  require_option(o.channels == 1 || o.channels == 3, "channels (--channels) must be 1 or 3");
  require_option(std::isfinite(o.fps) && o.fps > 0, "fps (--fps) must be a positive number");
  require_option(o.tone_classes >= 1 && o.tone_classes <= kMaxToneClasses, "tone classes (--tones) must be in 1..64");
  require_option(o.motion_classes >= 1 && o.motion_classes <= kMaxMotionClasses, "motion classes (--motions) must be in 1..8");
  require_option(std::isfinite(o.noise) && o.noise >= 0, "noise (--noise) must be a number >= 0");
  const int room = std::min(o.height, o.width) - square_size(o);
  require_option(room >= o.frames - 1, "a " + std::to_string(square_size(o)) + " px square moving 1 px per frame over " +
                                           std::to_string(o.frames) + " frames needs height and width of at least " +
                                           std::to_string(o.frames - 1 + square_size(o)));
}

// Generates sample `row` of the block; every random draw is keyed by (seed, global index) alone.
void generate_sample(const SynthOptions& o, const std::vector<double>& tones, std::int64_t global_index,
                     SampleBlock& block, std::int64_t row) {
  KeyedRandom random(o.seed, static_cast<std::uint64_t>(global_index));
  const auto tone = static_cast<int>(random.integer(0, o.tone_classes - 1));
  const auto motion = static_cast<int>(random.integer(0, o.motion_classes - 1));
  if (o.multi_label) {
    const std::size_t classes = static_cast<std::size_t>(o.tone_classes + o.motion_classes);
    block.labels[row * classes + static_cast<std::size_t>(tone)] = 1;
    block.labels[row * classes + static_cast<std::size_t>(o.tone_classes + motion)] = 1;
  } else {
    block.label[row] = tone * o.motion_classes + motion;
  }

  // Audio: amplitude * sin(2 pi f t / rate + phase) + noise * amplitude * N(0, 1), clipped to [-1, 1].
  const double phase = random.uniform(0.0, 2.0 * std::numbers::pi);
  const double amplitude = random.uniform(0.3, 0.8);
  const std::int64_t audio_len = random.integer(half_up(o.audio_samples), o.audio_samples);
  block.audio_len[row] = static_cast<std::int32_t>(audio_len);
  const double step = 2.0 * std::numbers::pi * tones[tone] / o.sample_rate;
  const auto audio_row = static_cast<std::size_t>(o.audio_samples);
  for (std::int64_t t = 0; t < o.audio_samples; ++t) {
    double x = 0;
    if (t < audio_len) {
      x = amplitude * std::sin(step * static_cast<double>(t) + phase) + o.noise * amplitude * random.normal();
      x = std::clamp(x, -1.0, 1.0);
    }
    const std::size_t at = row * audio_row + static_cast<std::size_t>(t);
    if (o.float_audio) {
      block.audio_float[at] = static_cast<float>(x);
    } else {
      block.audio_pcm[at] = static_cast<std::int16_t>(std::lround(x * 32767.0));
    }
  }

  // Video: a bright square moving `speed` px per frame in the class's direction, inside the frame throughout.
  const MotionDirection direction = motion_direction(motion);
  const int side = square_size(o);
  const int room = std::min(o.height, o.width) - side;
  const std::int64_t max_speed = o.frames > 1 ? room / (o.frames - 1) : 3;
  const std::int64_t speed = std::min<std::int64_t>(random.integer(2, 3), max_speed);
  const std::int64_t travel_x = direction.dx * speed * (o.frames - 1);
  const std::int64_t travel_y = direction.dy * speed * (o.frames - 1);
  const std::int64_t x0 = random.integer(std::max<std::int64_t>(0, -travel_x), o.width - side - std::max<std::int64_t>(0, travel_x));
  const std::int64_t y0 = random.integer(std::max<std::int64_t>(0, -travel_y), o.height - side - std::max<std::int64_t>(0, travel_y));
  const std::int64_t video_len = random.integer(half_up(o.frames), o.frames);
  block.video_len[row] = static_cast<std::int32_t>(video_len);
  const double pixel_noise = o.noise * kPixelNoisePerNoise;
  const std::size_t frame_pixels = static_cast<std::size_t>(o.height) * o.width * o.channels;
  std::uint8_t* video = block.video.data() + row * frame_pixels * o.frames;
  for (std::int64_t f = 0; f < video_len; ++f) {
    const std::int64_t x = x0 + direction.dx * speed * f;
    const std::int64_t y = y0 + direction.dy * speed * f;
    for (int i = 0; i < o.height; ++i) {
      for (int j = 0; j < o.width; ++j) {
        const bool inside = i >= y && i < y + side && j >= x && j < x + side;
        const double value = (inside ? kSquare : kBackground) + pixel_noise * random.normal();
        const auto grey = static_cast<std::uint8_t>(std::clamp(std::lround(value), 0L, 255L));
        std::fill_n(video + (static_cast<std::size_t>(f) * o.height * o.width + static_cast<std::size_t>(i) * o.width + j) * o.channels,
                    o.channels, grey);
      }
    }
  }
  // Frames past video_len stay zero: the block is zero-filled.
}

SampleBlock empty_block(const SynthOptions& o, std::int64_t count) {
  const auto n = static_cast<std::size_t>(count);
  const auto audio = n * static_cast<std::size_t>(o.audio_samples);
  SampleBlock block;
  block.count = count;
  (o.float_audio ? block.audio_float.resize(audio) : block.audio_pcm.resize(audio));
  block.audio_len.resize(n);
  block.video.assign(n * static_cast<std::size_t>(o.frames) * o.height * o.width * o.channels, 0);
  block.video_len.resize(n);
  if (o.multi_label) block.labels.assign(n * static_cast<std::size_t>(o.tone_classes + o.motion_classes), 0);
  else block.label.resize(n);
  return block;
}

std::string shard_name(int shard) {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d.h5", shard);
  return name;
}

}  // namespace

std::vector<double> tone_frequencies(int tone_classes, int sample_rate) {
  const double low = hz_to_mel(kLowestTone);
  const double high = hz_to_mel(std::min(kHighestTone, 0.375 * sample_rate));
  std::vector<double> tones;
  for (int k = 0; k < tone_classes; ++k) {
    const double position = tone_classes == 1 ? 0.5 : static_cast<double>(k) / (tone_classes - 1);
    tones.push_back(mel_to_hz(low + position * (high - low)));
  }
  return tones;
}

MotionDirection motion_direction(int motion_class) {
  static constexpr MotionDirection kDirections[kMaxMotionClasses] = {{1, 0}, {-1, 0}, {0, 1},  {0, -1},
                                                                     {1, 1}, {-1, -1}, {-1, 1}, {1, -1}};
  require(motion_class >= 0 && motion_class < kMaxMotionClasses,
          "motion class " + std::to_string(motion_class) + " is outside 0..7");
  return kDirections[motion_class];
}

void write_synthetic(const SynthOptions& o) {
  check_options(o);
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) throw Error(o.out_dir + ": cannot create the output directory: " + ec.message());
  const std::vector<double> tones = tone_frequencies(o.tone_classes, o.sample_rate);

  ShardHeader header;
  header.version = o.multi_label ? 2 : 1;
  header.sample_rate = o.sample_rate;
  header.fps = o.fps;
  header.num_classes = o.multi_label ? o.tone_classes + o.motion_classes : o.tone_classes * o.motion_classes;
  header.samples = o.samples_per_shard;
  header.audio_samples = o.audio_samples;
  header.frames = o.frames;
  header.height = o.height;
  header.width = o.width;
  header.channels = o.channels;
  header.audio_int16 = !o.float_audio;

  const std::size_t sample_bytes = static_cast<std::size_t>(o.audio_samples) * 4 +
                                   static_cast<std::size_t>(o.frames) * o.height * o.width * o.channels;
  const auto block_samples = static_cast<std::int64_t>(std::max<std::size_t>(1, kBlockBytes / sample_bytes));
  for (int shard = 0; shard < o.shards; ++shard) {
    header.path = (std::filesystem::path(o.out_dir) / shard_name(shard)).string();
    ShardWriter writer(header, ShardLayout{o.gzip, o.gzip_level, o.zstd_level});
    for (std::int64_t first = 0; first < o.samples_per_shard; first += block_samples) {
      SampleBlock block = empty_block(o, std::min(block_samples, o.samples_per_shard - first));
      for (std::int64_t row = 0; row < block.count; ++row) {
        generate_sample(o, tones, shard * o.samples_per_shard + first + row, block, row);
      }
      writer.write(first, block);
    }
    writer.commit();
  }
}

}  // namespace avtrain::data
