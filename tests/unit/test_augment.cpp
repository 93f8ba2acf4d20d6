// Training-time augmentation (data/augment.hpp) against hand-computed references, and mixup's loss
// (model/mixup_loss.hpp) against an independent softmax and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/keyed_random.hpp"
#include "data/augment.hpp"
#include "model/mixup_loss.hpp"
#include "model/spec_masking.hpp"

namespace avtrain::data {
namespace {

// 2 s clips: 16 kHz audio, 16 frames at 8 fps of H x W x C.
SetInfo stored_set(int H = 4, int W = 6, int C = 2) {
  SetInfo s;
  s.sample_rate = 16000;
  s.fps = 8;
  s.num_classes = 5;
  s.audio_samples = 32000;
  s.frames = 16;
  s.height = H;
  s.width = W;
  s.channels = C;
  return s;
}

// A micro-batch whose audio sample i holds the time i / sample_rate of its clip (in units of 1/16000 s
// scaled to [-1, 1]) and whose frame f holds f + 10 * row in every pixel: where a crop came from is readable.
MicroBatch timed_batch(const SetInfo& s, const std::vector<std::int64_t>& index) {
  MicroBatch b;
  b.size = int(index.size());
  b.index = index;
  const std::size_t frame = std::size_t(s.height) * s.width * s.channels;
  for (int r = 0; r < b.size; ++r) {
    for (std::int64_t i = 0; i < s.audio_samples; ++i) b.audio.push_back(float(i) / float(s.audio_samples));
    for (int f = 0; f < s.frames; ++f) b.video.insert(b.video.end(), frame, std::uint8_t(f + 10 * r));
    b.audio_len.push_back(std::int32_t(s.audio_samples));
    b.video_len.push_back(s.frames);
    b.label.push_back(r % s.num_classes);
  }
  return b;
}

// ---------------------------------------------------------------- frames

TEST(FrameCrop, BilinearResizeOfACropMatchesHandComputedValues) {
  // A 4 x 4 one-channel frame whose top-left 2 x 2 is [[0, 100], [200, 40]]; that crop resized to 4 x 4
  // samples the source at -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1) along each axis.
  const int H = 4, W = 4;
  std::vector<std::uint8_t> in(16, 255), out(16, 7);
  in[0] = 0, in[1] = 100, in[4] = 200, in[5] = 40;
  crop_resize_frames(in.data(), out.data(), 1, H, W, 1, FrameCrop{0, 0, 2, 2, false});
  // Row 1 (y at 0.25): top (0, 25, 75, 100), bottom (200, 160, 80, 40) -> 50, 58.75, 76.25, 85.
  // Row 2 (y at 0.75): 150, 126.25, 78.75, 55. Rows 0 and 3 are the two source rows stretched.
  const std::vector<std::uint8_t> want_fixed = {0, 25, 75, 100, 50, 59, 76, 85, 150, 126, 79, 55, 200, 160, 80, 40};
  EXPECT_EQ(out, want_fixed);
}

TEST(FrameCrop, ChannelsOffsetAndFlipFollowTheCrop) {
  // One row of 4 pixels x 2 channels; the crop [left 1, width 2] of row 1 of 2, stretched to 4 and mirrored.
  const int H = 2, W = 4, C = 2;
  std::vector<std::uint8_t> in(std::size_t(H) * W * C, 0);
  const std::uint8_t row1[8] = {9, 9, 0, 10, 100, 50, 9, 9};  // pixels (0,10), (100,50) at x = 1, 2
  std::copy(row1, row1 + 8, in.begin() + 8);
  std::vector<std::uint8_t> out(in.size());
  crop_resize_frames(in.data(), out.data(), 1, H, W, C, FrameCrop{1, 1, 1, 2, false});
  const std::vector<std::uint8_t> want_row = {0, 10, 25, 20, 75, 40, 100, 50};
  for (int y = 0; y < H; ++y)
    EXPECT_EQ(std::vector<std::uint8_t>(out.begin() + y * 8, out.begin() + y * 8 + 8), want_row) << "row " << y;
  crop_resize_frames(in.data(), out.data(), 1, H, W, C, FrameCrop{1, 1, 1, 2, true});
  const std::vector<std::uint8_t> flipped = {100, 50, 75, 40, 25, 20, 0, 10};
  EXPECT_EQ(std::vector<std::uint8_t>(out.begin(), out.begin() + 8), flipped);
}

TEST(FrameCrop, TheWholeFrameUnflippedIsTheIdentity) {
  const int F = 3, H = 8, W = 6, C = 3;
  std::vector<std::uint8_t> in(std::size_t(F) * H * W * C), out(in.size());
  KeyedRandom r(7, "pixels");
  for (auto& v : in) v = std::uint8_t(r.below(256));
  KeyedRandom key(1, "crop");
  const FrameCrop c = draw_frame_crop(key, H, W, 1.0, false);
  EXPECT_EQ(c.top, 0);
  EXPECT_EQ(c.height, H);
  EXPECT_EQ(c.width, W);
  EXPECT_FALSE(c.flip);
  crop_resize_frames(in.data(), out.data(), F, H, W, C, c);
  EXPECT_EQ(out, in);
}

TEST(FrameCrop, DrawnCropsKeepTheirAreaAndAspectBoundsAndFlipHalfTheTime) {
  const int H = 64, W = 96;
  const double scale = 0.6;
  int flips = 0, whole = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    KeyedRandom key = augment_stream(3, "frames", 0, i);
    const FrameCrop c = draw_frame_crop(key, H, W, scale, true);
    ASSERT_GE(c.top, 0);
    ASSERT_GE(c.left, 0);
    ASSERT_LE(c.top + c.height, H);
    ASSERT_LE(c.left + c.width, W);
    flips += c.flip;
    if (c.height == H && c.width == W) {
      ++whole;
      continue;
    }
    const double area = double(c.height) * c.width / (double(H) * W), aspect = double(c.width) / c.height;
    // w and h are rounded: allow a pixel's worth either way.
    EXPECT_GE(area, scale * (1 - 2.0 / H) - 1e-9) << i;
    EXPECT_GE(aspect, 0.75 * (1 - 2.0 / H)) << i;
    EXPECT_LE(aspect, 4.0 / 3.0 * (1 + 2.0 / H)) << i;
  }
  EXPECT_NEAR(double(flips) / n, 0.5, 0.05);
  EXPECT_LT(whole, n / 10);
}

// ---------------------------------------------------------------- time crop

TEST(TimeCrop, CroppedInputFollowsClipSecondsAndRefusesTooLongOrTooShort) {
  const SetInfo s = stored_set();
  const SetInfo one = cropped_input(s, 1.0);
  EXPECT_EQ(one.frames, 8);
  EXPECT_EQ(one.audio_samples, 16000);
  EXPECT_EQ(cropped_input(s, 0).frames, 16);
  for (double bad : {2.5, 0.01, -1.0}) {
    try {
      cropped_input(s, bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("data.clip_seconds"), std::string::npos) << e.what();
    }
  }
}

TEST(TimeCrop, AudioAndFramesAreCutAtTheSameTimeAndLengthsFollow) {
  const SetInfo s = stored_set(), in = cropped_input(s, 1.0);
  MicroBatch b = timed_batch(s, {0, 1, 2});
  b.video_len = {16, 12, 5};   // valid frames
  b.audio_len = {32000, 24000, 10000};
  EXPECT_EQ(time_room(s, in, 16), 8);
  EXPECT_EQ(time_room(s, in, 12), 4);
  EXPECT_EQ(time_room(s, in, 5), 0);  // shorter than the window: the first window
  const std::vector<TimeWindow> w = {window_at(s, in, 3), window_at(s, in, 4), window_at(s, in, 0)};
  EXPECT_EQ(w[0].audio0, 3 * 2000);  // frame offset x sample_rate / fps
  crop_time(b, s, in, w);
  ASSERT_EQ(b.audio.size(), 3u * 16000);
  ASSERT_EQ(b.video.size(), 3u * 8 * 4 * 6 * 2);
  const std::size_t clip = 8 * 4 * 6 * 2;
  for (int r = 0; r < 3; ++r) {
    const int f0 = w[std::size_t(r)].frame0;
    EXPECT_EQ(b.video[r * clip], std::uint8_t(f0 + 10 * r)) << r;                          // first frame kept
    EXPECT_EQ(b.video[r * clip + clip - 1], std::uint8_t(f0 + 7 + 10 * r)) << r;           // last frame kept
    EXPECT_FLOAT_EQ(b.audio[std::size_t(r) * 16000], float(f0 * 2000) / 32000.0f) << r;   // the same time
  }
  EXPECT_EQ(b.video_len, (std::vector<std::int32_t>{8, 8, 5}));
  EXPECT_EQ(b.audio_len, (std::vector<std::int32_t>{16000, 16000, 10000}));
}

TEST(TimeCrop, TrainingDrawsWindowsInTheRoomAndEvaluationTakesTheCentre) {
  const SetInfo s = stored_set();
  AugmentConfig off;
  const Augmenter a(off, 1.0, s, 5, {});
  std::set<int> starts;
  for (std::int64_t epoch = 0; epoch < 40; ++epoch) {
    MicroBatch b = timed_batch(s, {11});
    a.train(b, epoch);
    const int f0 = b.video[0];
    ASSERT_LE(f0, 8);
    EXPECT_FLOAT_EQ(b.audio[0], float(f0 * 2000) / 32000.0f);
    starts.insert(f0);
  }
  EXPECT_GE(starts.size(), 6u);  // the window moves from epoch to epoch
  MicroBatch e = timed_batch(s, {11});
  a.evaluate(e);
  EXPECT_EQ(e.video[0], 4);  // room 8: centred
}

// ---------------------------------------------------------------- SpecAugment

TEST(SpecMask, BandsStayWithinTheirWidthsAndTheValidFrames) {
  const SpecShape shape{50, 40, nullptr};
  AugmentConfig c;
  c.freq_masks = 1, c.freq_mask_width = 7, c.time_masks = 1, c.time_mask_width = 9;
  int freq_seen = 0, time_seen = 0;
  for (int i = 0; i < 500; ++i) {
    const int valid = 20 + i % 30;
    std::vector<std::uint8_t> keep(50 * 40, 7);
    KeyedRandom key = augment_stream(1, "spec", 0, i);
    draw_spec_mask(key, shape, valid, c, keep.data());
    // A column masked in every frame is a frequency band; a row masked in every bin a time band.
    std::vector<int> cols, rows;
    for (int m = 0; m < 40; ++m) {
      bool all = true;
      for (int t = 0; t < 50; ++t) all &= keep[std::size_t(t) * 40 + m] == 0;
      if (all) cols.push_back(m);
    }
    for (int t = 0; t < 50; ++t) {
      bool all = true;
      for (int m = 0; m < 40; ++m) all &= keep[std::size_t(t) * 40 + m] == 0;
      if (all) rows.push_back(t);
    }
    for (std::uint8_t v : keep) ASSERT_TRUE(v == 0 || v == 1);
    // Every zero lies in a masked column or a masked row.
    for (int t = 0; t < 50; ++t) {
      for (int m = 0; m < 40; ++m) {
        if (!keep[std::size_t(t) * 40 + m]) {
          ASSERT_TRUE(std::count(cols.begin(), cols.end(), m) || std::count(rows.begin(), rows.end(), t));
        }
      }
    }
    ASSERT_LE(int(cols.size()), 7);
    if (!cols.empty()) {
      EXPECT_EQ(cols.back() - cols.front() + 1, int(cols.size()));  // one band
    }
    ASSERT_LE(int(rows.size()), 9);
    if (!rows.empty()) {
      EXPECT_LT(rows.back(), valid);
    }
    freq_seen = std::max(freq_seen, int(cols.size()));
    time_seen = std::max(time_seen, int(rows.size()));
  }
  EXPECT_EQ(freq_seen, 7);  // the widest band is drawn
  EXPECT_EQ(time_seen, 9);
}

// ---------------------------------------------------------------- mixup

TEST(Mixup, BetaDrawsHaveTheBetaMeanAndVariance) {
  for (double alpha : {0.2, 1.0, 2.0}) {
    KeyedRandom r(9, "beta");
    const int n = 40000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = draw_beta(r, alpha);
      ASSERT_TRUE(x >= 0 && x <= 1);
      sum += x, sum2 += x * x;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01) << alpha;
    EXPECT_NEAR(var, 1.0 / (4.0 * (2.0 * alpha + 1.0)), 0.01) << alpha;  // Beta(a, a): 1 / (4 (2a + 1))
  }
}

TEST(Mixup, PairsAPermutationAndMixesSamplesLabelsAndLengths) {
  const SetInfo s = stored_set();
  const std::vector<std::int64_t> index = {40, 41, 42, 43, 44, 45};
  const Mixup m = draw_mixup(3, 1, index, 0.4);
  std::vector<int> sorted = m.partner;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_GE(m.lambda, 0.5f);
  EXPECT_LE(m.lambda, 1.0f);
  const Mixup again = draw_mixup(3, 1, index, 0.4), other = draw_mixup(3, 2, index, 0.4);
  EXPECT_EQ(again.partner, m.partner);
  EXPECT_EQ(again.lambda, m.lambda);
  EXPECT_TRUE(other.partner != m.partner || other.lambda != m.lambda);

  MicroBatch b = timed_batch(s, index);
  for (std::size_t r = 0; r < 6; ++r) {
    b.audio_len[r] = std::int32_t(1000 * (r + 1));
    b.video_len[r] = std::int32_t(r + 1);
  }
  for (std::size_t i = 0; i < b.audio.size(); ++i) b.audio[i] = float(i % 977) / 977.0f - float(i / 32000) * 0.1f;
  const MicroBatch before = b;
  apply_mixup(b, m);
  const std::size_t A = 32000, V = 16 * 4 * 6 * 2;
  for (std::size_t r = 0; r < 6; ++r) {
    const std::size_t p = std::size_t(m.partner[r]);
    EXPECT_EQ(b.mix_label[r], before.label[p]);
    EXPECT_EQ(b.label[r], before.label[r]);
    EXPECT_EQ(b.audio_len[r], std::max(before.audio_len[r], before.audio_len[p]));
    EXPECT_EQ(b.video_len[r], std::max(before.video_len[r], before.video_len[p]));
    for (std::size_t i = 0; i < A; i += 997)
      EXPECT_NEAR(b.audio[r * A + i], m.lambda * before.audio[r * A + i] + (1 - m.lambda) * before.audio[p * A + i], 1e-6);
    const double v = m.lambda * before.video[r * V] + (1 - m.lambda) * before.video[p * V];
    EXPECT_NEAR(double(b.video[r * V]), v, 0.5 + 1e-6);
  }
  EXPECT_EQ(b.mix_weight, m.lambda);

  // A stage that reads only labels gets the same partner labels.
  MicroBatch labels;
  labels.size = 6, labels.index = index, labels.label = before.label;
  apply_mixup(labels, m);
  EXPECT_EQ(labels.mix_label, b.mix_label);
  EXPECT_TRUE(labels.audio.empty());
}

// ---------------------------------------------------------------- keys

// Per-sample transforms are functions of (seed, epoch, sample) alone: a micro-batch split in two
// (another layout) gives every sample the same bits.
TEST(Augmenter, ASampleIsAugmentedTheSameInAnyMicroBatchAndRepeats) {
  const SetInfo s = stored_set(8, 8, 1);
  AugmentConfig c;
  c.crop_scale = 0.5, c.flip = true, c.freq_masks = 2, c.time_masks = 2;
  const SpecShape spec{20, 16, [](int audio_len) { return std::max(1, audio_len / 800); }};
  const Augmenter a(c, 1.5, s, 11, spec);
  const std::vector<std::int64_t> index = {5, 9, 2, 7};
  auto noisy = [&](const std::vector<std::int64_t>& idx) {
    MicroBatch b = timed_batch(s, idx);
    for (std::size_t i = 0; i < b.video.size(); ++i) b.video[i] = std::uint8_t(((i % 1024) * 37 + std::size_t(idx[i / 1024]) * 11) % 251);  // 16 frames of 8 x 8
    return b;
  };
  MicroBatch whole = noisy(index), first = noisy({5, 9}), second = noisy({2, 7});
  a.train(whole, 3);
  a.train(first, 3);
  a.train(second, 3);
  const std::size_t A = whole.audio.size() / 4, V = whole.video.size() / 4, K = whole.spec_keep.size() / 4;
  ASSERT_EQ(K, 20u * 16);
  for (std::size_t r = 0; r < 4; ++r) {
    const MicroBatch& part = r < 2 ? first : second;
    const std::size_t q = r % 2;
    EXPECT_TRUE(std::equal(whole.audio.begin() + r * A, whole.audio.begin() + (r + 1) * A, part.audio.begin() + q * A));
    EXPECT_TRUE(std::equal(whole.video.begin() + r * V, whole.video.begin() + (r + 1) * V, part.video.begin() + q * V));
    EXPECT_TRUE(std::equal(whole.spec_keep.begin() + r * K, whole.spec_keep.begin() + (r + 1) * K,
                           part.spec_keep.begin() + q * K));
  }
  MicroBatch again = noisy(index);
  a.train(again, 3);
  EXPECT_EQ(again.video, whole.video);
  EXPECT_EQ(again.spec_keep, whole.spec_keep);
  MicroBatch next_epoch = noisy(index);
  a.train(next_epoch, 4);
  EXPECT_NE(next_epoch.video, whole.video);
}

}  // namespace
}  // namespace avtrain::data

// ---------------------------------------------------------------- the mixup loss
namespace avtrain {
namespace {

// lambda CE(y_a) + (1 - lambda) CE(y_b), mean over rows, in double from the definition.
double reference_mixup_loss(const std::vector<double>& logits, const std::vector<std::int32_t>& a,
                            const std::vector<std::int32_t>& b, double lambda, int rows, int classes) {
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    const double* z = logits.data() + std::size_t(r) * classes;
    const double top = *std::max_element(z, z + classes);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - top);
    const double log_norm = top + std::log(sum);
    total += lambda * (log_norm - z[a[std::size_t(r)]]) + (1 - lambda) * (log_norm - z[b[std::size_t(r)]]);
  }
  return total / rows;
}

// A masked value becomes its mel bin's mean over the sample's valid frames; the rest is untouched.
TEST(SpecMasking, MaskedValuesTakeTheirBinsMeanOverTheValidFrames) {
  auto be = make_cpu_backend();
  const int B = 3, T = 6, M = 4;
  KeyedRandom r(2, "spec.logmel");
  std::vector<float> logmel(std::size_t(B) * T * M);
  for (auto& v : logmel) v = float(4.0 * r.normal() - 8.0);
  const std::vector<std::uint8_t> frames = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      if (!frames[std::size_t(b * T + t)])
        for (int m = 0; m < M; ++m) logmel[std::size_t((b * T + t) * M + m)] = 0;  // as masked_log leaves them
  std::vector<std::uint8_t> keep(logmel.size()), drop(logmel.size()), all(std::size_t(B) * T, 1);
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = r.uniform() < 0.7, drop[i] = !keep[i];
  std::vector<float> got = logmel, mean(std::size_t(B) * M, -1), fill(logmel.size(), -1);
  apply_spec_masks(*be, got.data(), keep.data(), drop.data(), frames.data(), all.data(), mean.data(), fill.data(), B, T, M);
  for (int b = 0; b < B; ++b)
    for (int m = 0; m < M; ++m) {
      double sum = 0;
      int n = 0;
      for (int t = 0; t < T; ++t)
        if (frames[std::size_t(b * T + t)]) sum += logmel[std::size_t((b * T + t) * M + m)], ++n;
      for (int t = 0; t < T; ++t) {
        const std::size_t i = std::size_t((b * T + t) * M + m);
        if (keep[i])
          EXPECT_EQ(got[i], logmel[i]) << b << " " << t << " " << m;
        else
          EXPECT_NEAR(got[i], sum / n, 1e-5 * (1 + std::abs(sum / n))) << b << " " << t << " " << m;
      }
    }
}

TEST(MixupLoss, MatchesTheDefinitionAndItsGradientMatchesFiniteDifferences) {
  auto be = make_cpu_backend();
  const int rows = 5, classes = 7;
  const float lambda = 0.65f, grad_scale = 3.0f;
  KeyedRandom r(4, "mixup.loss");
  std::vector<float> logits(std::size_t(rows) * classes);
  for (auto& z : logits) z = float(2.0 * r.normal());
  const std::vector<std::int32_t> a = {0, 3, 6, 2, 2}, b = {1, 3, 0, 5, 2};  // same labels in two rows too
  std::vector<float> d(logits.size()), scratch(logits.size());
  int correct = -1;
  const double loss = mixup_cross_entropy(*be, logits.data(), a.data(), b.data(), lambda, d.data(), scratch.data(), rows,
                                          classes, grad_scale, &correct);
  std::vector<double> exact(logits.begin(), logits.end());
  EXPECT_NEAR(loss, reference_mixup_loss(exact, a, b, lambda, rows, classes), 1e-6);
  int hits = 0;
  for (int i = 0; i < rows; ++i) {
    const float* z = logits.data() + std::size_t(i) * classes;
    hits += int(std::max_element(z, z + classes) - z) == a[std::size_t(i)];
  }
  EXPECT_EQ(correct, hits);
  // d(grad_scale loss)/dz by central differences of the reference, in double.
  const double h = 1e-5;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    std::vector<double> up = exact, down = exact;
    up[i] += h, down[i] -= h;
    const double fd = grad_scale * (reference_mixup_loss(up, a, b, lambda, rows, classes) -
                                    reference_mixup_loss(down, a, b, lambda, rows, classes)) / (2 * h);
    EXPECT_NEAR(d[i], fd, 1e-5) << i;
  }
  // Finite differences of the function itself (the loss it returns), in float logits.
  const double hf = 1e-2;
  for (std::size_t i : {std::size_t(0), std::size_t(10), std::size_t(34)}) {
    std::vector<float> up = logits, down = logits;
    up[i] += float(hf), down[i] -= float(hf);
    const double lu = mixup_cross_entropy(*be, up.data(), a.data(), b.data(), lambda, nullptr, nullptr, rows, classes, 1, nullptr);
    const double ld = mixup_cross_entropy(*be, down.data(), a.data(), b.data(), lambda, nullptr, nullptr, rows, classes, 1, nullptr);
    EXPECT_NEAR(d[i], grad_scale * (lu - ld) / (double(up[i]) - double(down[i])), 2e-4) << i;
  }
  // lambda 1 is the plain cross entropy.
  std::vector<float> plain(logits.size());
  const double ce = be->cross_entropy(logits.data(), a.data(), plain.data(), rows, classes, grad_scale, nullptr);
  const double one = mixup_cross_entropy(*be, logits.data(), a.data(), b.data(), 1.0f, d.data(), scratch.data(), rows,
                                         classes, grad_scale, nullptr);
  EXPECT_EQ(one, ce);
  EXPECT_EQ(d, plain);
}

}  // namespace
}  // namespace avtrain
