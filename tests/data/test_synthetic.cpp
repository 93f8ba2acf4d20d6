// The synthetic set is what docs/shard-format.md promises: the tone names label / motions, the motion
// names label % motions, padding is zero, and a seed always writes the same bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <fstream>
#include <iterator>
#include <numbers>

#include "core/error.hpp"
#include "data/shard_set.hpp"
#include "data/synthetic.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

double power_at(const float* audio, int length, double hz, int sample_rate) {
  std::complex<double> sum = 0;
  for (int t = 0; t < length; ++t) sum += static_cast<double>(audio[t]) * std::polar(1.0, -2.0 * std::numbers::pi * hz * t / sample_rate);
  return std::norm(sum);
}

// Mean (x, y) of the bright pixels of one frame of channel 0.
std::pair<double, double> bright_centroid(const std::uint8_t* frame, int height, int width, int channels) {
  double x = 0, y = 0, count = 0;
  for (int i = 0; i < height; ++i) {
    for (int j = 0; j < width; ++j) {
      if (frame[(i * width + j) * channels] > 120) {
        x += j;
        y += i;
        ++count;
      }
    }
  }
  return {x / count, y / count};
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ToneFrequencies, MelSpacedFrom200To3000Hz) {
  const std::vector<double> tones = tone_frequencies(4, 8000);
  ASSERT_EQ(tones.size(), 4u);
  EXPECT_NEAR(tones.front(), 200.0, 1e-9);
  EXPECT_NEAR(tones.back(), 3000.0, 1e-9);
  const auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  for (int k = 1; k < 4; ++k) EXPECT_NEAR(mel(tones[k]) - mel(tones[k - 1]), (mel(3000) - mel(200)) / 3, 1e-6);
  EXPECT_NEAR(tone_frequencies(2, 4000).back(), 1500.0, 1e-9);  // 0.375 * sample_rate below 3000 Hz
}

TEST(MotionDirection, FirstFourAreRightLeftDownUp) {
  EXPECT_EQ(motion_direction(0).dx, 1);
  EXPECT_EQ(motion_direction(1).dx, -1);
  EXPECT_EQ(motion_direction(2).dy, 1);
  EXPECT_EQ(motion_direction(3).dy, -1);
  EXPECT_THROW(motion_direction(8), Error);
}

TEST(Synthetic, LabelIsToneClassTimesMotionsPlusMotionClass) {
  const test::TempDir dir;
  SynthOptions o;
  o.out_dir = dir.str();
  o.shards = 1;
  o.samples_per_shard = 96;
  o.audio_samples = 800;
  o.tone_classes = 4;
  o.motion_classes = 8;
  o.channels = 3;
  write_synthetic(o);
  const auto set = ShardSet::open(dir.str());
  ASSERT_EQ(set->info().num_classes, 32);
  std::vector<std::int64_t> all(96);
  for (int i = 0; i < 96; ++i) all[i] = i;
  const MicroBatch batch = set->read(all);
  const std::vector<double> tones = tone_frequencies(4, 8000);
  const int F = o.frames, H = o.height, W = o.width, C = o.channels;
  const std::size_t frame = static_cast<std::size_t>(H) * W * C;
  std::vector<int> seen(32, 0);

  for (int b = 0; b < 96; ++b) {
    SCOPED_TRACE("sample " + std::to_string(b));
    const int label = batch.label[b], tone = label / 8, motion = label % 8;
    ++seen[label];
    const float* audio = batch.audio.data() + b * o.audio_samples;
    const int audio_len = batch.audio_len[b], video_len = batch.video_len[b];
    EXPECT_GE(audio_len, 400);
    EXPECT_LE(audio_len, 800);
    EXPECT_GE(video_len, 4);
    EXPECT_LE(video_len, 8);

    int loudest = 0;
    for (int k = 1; k < 4; ++k) {
      if (power_at(audio, audio_len, tones[k], 8000) > power_at(audio, audio_len, tones[loudest], 8000)) loudest = k;
    }
    EXPECT_EQ(loudest, tone);
    for (int t = audio_len; t < o.audio_samples; ++t) ASSERT_EQ(audio[t], 0.0f) << "audio past audio_len at " << t;

    const std::uint8_t* video = batch.video.data() + b * F * frame;
    const auto [x0, y0] = bright_centroid(video, H, W, C);
    const auto [x1, y1] = bright_centroid(video + 3 * frame, H, W, C);  // frame ceil(F/2) - 1
    const MotionDirection direction = motion_direction(motion);
    const auto sign = [](double v) { return v > 1.0 ? 1 : v < -1.0 ? -1 : 0; };
    EXPECT_EQ(sign(x1 - x0), direction.dx);
    EXPECT_EQ(sign(y1 - y0), direction.dy);
    EXPECT_GE(std::max(std::abs(x1 - x0), std::abs(y1 - y0)), 6.0);  // 2-3 px per frame over 3 frames
    for (std::size_t p = 0; p < F * frame; p += C) {
      ASSERT_TRUE(video[p] == video[p + 1] && video[p] == video[p + 2]) << "channels replicate";
    }
    for (std::size_t p = static_cast<std::size_t>(video_len) * frame; p < F * frame; ++p) {
      ASSERT_EQ(video[p], 0) << "video past video_len";
    }
  }
  EXPECT_GE(std::count_if(seen.begin(), seen.end(), [](int n) { return n > 0; }), 28) << "labels cover the classes";
}

TEST(Synthetic, SameSeedWritesSameBytesOtherSeedDiffers) {
  const test::TempDir dir;
  SynthOptions o;
  o.shards = 2;
  o.samples_per_shard = 8;
  o.audio_samples = 500;
  for (const char* name : {"a", "b", "c"}) {
    o.out_dir = dir / name;
    o.seed = name[0] == 'c' ? 2 : 1;
    write_synthetic(o);
  }
  for (const char* shard : {"shard-00000.h5", "shard-00001.h5"}) {
    const std::string a = file_bytes(dir / (std::string("a/") + shard));
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, file_bytes(dir / (std::string("b/") + shard)));
    EXPECT_NE(a, file_bytes(dir / (std::string("c/") + shard)));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "a/shard-00000.h5.tmp"));
}

TEST(Synthetic, RefusesOptionsThatCannotMakeASolvableSet) {
  const test::TempDir dir;
  SynthOptions o;
  o.out_dir = dir.str();
  o.motion_classes = 9;
  EXPECT_THROW(write_synthetic(o), Error);
  o.motion_classes = 4;
  o.channels = 2;
  EXPECT_THROW(write_synthetic(o), Error);
  o.channels = 1;
  o.frames = 40;  // a square cannot move 39 px inside 32 x 32
  EXPECT_THROW(write_synthetic(o), Error);
}

}  // namespace
}  // namespace avtrain::data
