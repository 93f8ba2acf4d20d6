#include "data/augment.hpp"

#include <algorithm>
#include <boost/random/beta_distribution.hpp>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace avtrain::data {

namespace {
// A KeyedRandom as boost::random's uniform random bit generator.
struct KeyedBits {
  using result_type = std::uint64_t;
  KeyedRandom& r;
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<result_type>::max(); }
  result_type operator()() { return r.next(); }
};

std::uint8_t round_to_byte(float v) { return std::uint8_t(std::clamp(std::floor(v + 0.5f), 0.0f, 255.0f)); }

// Where output pixel i of n samples a source of m pixels (half-pixel centres, clamped at the edges):
// between source pixels lo and lo + 1 (or lo again at the edge) with weight w of the second.
struct Tap {
  int lo, hi;
  float w;
};
std::vector<Tap> bilinear_taps(int m, int n) {
  std::vector<Tap> taps(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double x = std::clamp((i + 0.5) * m / n - 0.5, 0.0, double(m - 1));
    const int lo = int(std::floor(x));
    taps[std::size_t(i)] = {lo, std::min(lo + 1, m - 1), float(x - lo)};
  }
  return taps;
}
}  // namespace

SetInfo cropped_input(const SetInfo& stored, double clip_seconds) {
  if (clip_seconds == 0) return stored;
  const double stored_s = double(stored.frames) / stored.fps;
  const int frames = int(std::lround(clip_seconds * stored.fps));
  const std::int64_t audio = std::llround(clip_seconds * stored.sample_rate);
  if (!(clip_seconds > 0) || frames < 1 || frames > stored.frames || audio > stored.audio_samples) {
    std::ostringstream s;
    s << "option data.clip_seconds = " << clip_seconds << ": must be 0 (the stored length) or cover between one frame ("
      << 1.0 / stored.fps << " s) and the stored clip (" << stored.frames << " frames, " << stored.audio_samples
      << " audio samples: " << stored_s << " s)";
    throw Error(s.str());
  }
  SetInfo input = stored;
  input.frames = frames;
  input.audio_samples = audio;
  return input;
}

int time_room(const SetInfo& stored, const SetInfo& input, int video_len) {
  return std::max(0, std::min(stored.frames, std::max(video_len, input.frames)) - input.frames);
}

TimeWindow window_at(const SetInfo& stored, const SetInfo& input, int frame0) {
  TimeWindow w;
  w.frame0 = frame0;
  w.audio0 = std::llround(double(frame0) * stored.sample_rate / stored.fps);
  w.audio0 = std::clamp<std::int64_t>(w.audio0, 0, stored.audio_samples - input.audio_samples);
  return w;
}

void crop_time(MicroBatch& b, const SetInfo& stored, const SetInfo& input, const std::vector<TimeWindow>& windows) {
  const std::size_t B = std::size_t(b.size), A0 = std::size_t(stored.audio_samples), A = std::size_t(input.audio_samples);
  const std::size_t frame = std::size_t(stored.height) * stored.width * stored.channels;
  const std::size_t F0 = std::size_t(stored.frames), F = std::size_t(input.frames);
  std::vector<float> audio(B * A);
  std::vector<std::uint8_t> video(B * F * frame);
  for (std::size_t r = 0; r < B; ++r) {
    const TimeWindow& w = windows[r];
    std::copy_n(b.audio.begin() + std::ptrdiff_t(r * A0 + std::size_t(w.audio0)), A, audio.begin() + std::ptrdiff_t(r * A));
    std::copy_n(b.video.begin() + std::ptrdiff_t((r * F0 + std::size_t(w.frame0)) * frame), F * frame,
                video.begin() + std::ptrdiff_t(r * F * frame));
    b.audio_len[r] = std::int32_t(std::clamp<std::int64_t>(b.audio_len[r] - w.audio0, 0, std::int64_t(A)));
    b.video_len[r] = std::clamp(b.video_len[r] - w.frame0, 0, int(F));
  }
  b.audio = std::move(audio);
  b.video = std::move(video);
}

FrameCrop draw_frame_crop(KeyedRandom& r, int H, int W, double scale_min, bool flip) {
  FrameCrop c{0, 0, H, W, false};
  if (scale_min < 1.0) {
    const double area = double(H) * W, log_low = std::log(3.0 / 4.0), log_high = std::log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target = area * r.uniform(scale_min, 1.0);
      const double aspect = std::exp(r.uniform(log_low, log_high));
      const int w = int(std::lround(std::sqrt(target * aspect))), h = int(std::lround(std::sqrt(target / aspect)));
      if (w < 1 || h < 1 || w > W || h > H) continue;
      c = {int(r.integer(0, H - h)), int(r.integer(0, W - w)), h, w, false};
      break;
    }
  }
  if (flip) c.flip = r.uniform() < 0.5;
  return c;
}

void crop_resize_frames(const std::uint8_t* in, std::uint8_t* out, int F, int H, int W, int C, const FrameCrop& crop) {
  const std::vector<Tap> ys = bilinear_taps(crop.height, H), xs = bilinear_taps(crop.width, W);
  const std::size_t row = std::size_t(W) * C, frame = std::size_t(H) * row;
  for (int f = 0; f < F; ++f) {
    const std::uint8_t* src = in + std::size_t(f) * frame;
    std::uint8_t* dst = out + std::size_t(f) * frame;
    for (int y = 0; y < H; ++y) {
      const Tap ty = ys[std::size_t(y)];
      const std::uint8_t* r0 = src + std::size_t(crop.top + ty.lo) * row;
      const std::uint8_t* r1 = src + std::size_t(crop.top + ty.hi) * row;
      for (int x = 0; x < W; ++x) {
        const Tap tx = xs[std::size_t(x)];
        const std::size_t x0 = std::size_t(crop.left + tx.lo) * C, x1 = std::size_t(crop.left + tx.hi) * C;
        const int xo = crop.flip ? W - 1 - x : x;
        for (int c = 0; c < C; ++c) {
          const float top = r0[x0 + c] + tx.w * (float(r0[x1 + c]) - r0[x0 + c]);
          const float bottom = r1[x0 + c] + tx.w * (float(r1[x1 + c]) - r1[x0 + c]);
          dst[std::size_t(y) * row + std::size_t(xo) * C + c] = round_to_byte(top + ty.w * (bottom - top));
        }
      }
    }
  }
}

double draw_beta(KeyedRandom& r, double alpha) {
  KeyedBits bits{r};
  return boost::random::beta_distribution<double>(alpha, alpha)(bits);
}

Mixup draw_mixup(std::uint64_t seed, std::int64_t epoch, const std::vector<std::int64_t>& index, double alpha) {
  Mixup m;
  const int B = int(index.size());
  m.partner.resize(std::size_t(B));
  for (int i = 0; i < B; ++i) m.partner[std::size_t(i)] = i;
  if (B == 0) return m;
  KeyedRandom r = augment_stream(seed, "mixup", epoch, index.front());
  for (int i = B - 1; i > 0; --i) std::swap(m.partner[std::size_t(i)], m.partner[r.below(std::uint64_t(i) + 1)]);
  const double l = draw_beta(r, alpha);
  m.lambda = float(std::max(l, 1.0 - l));
  return m;
}

void apply_mixup(MicroBatch& b, const Mixup& m) {
  const std::size_t B = std::size_t(b.size);
  const float lam = m.lambda, rest = 1.0f - m.lambda;
  b.mix_label.resize(B);
  for (std::size_t r = 0; r < B; ++r) b.mix_label[r] = b.label[std::size_t(m.partner[r])];
  if (!b.labels.empty()) {  // a multi-label set: the partners' sets of classes
    const std::size_t classes = b.labels.size() / B;
    b.mix_labels.resize(b.labels.size());
    for (std::size_t r = 0; r < B; ++r)
      std::copy_n(b.labels.begin() + std::ptrdiff_t(std::size_t(m.partner[r]) * classes), classes,
                  b.mix_labels.begin() + std::ptrdiff_t(r * classes));
  }
  b.mix_weight = lam;
  if (b.audio.empty()) return;  // labels only
  const std::size_t A = b.audio.size() / B, V = b.video.size() / B;
  std::vector<float> audio(b.audio.size());
  std::vector<std::uint8_t> video(b.video.size());
  std::vector<std::int32_t> audio_len(B), video_len(B);
  for (std::size_t r = 0; r < B; ++r) {
    const std::size_t p = std::size_t(m.partner[r]);
    for (std::size_t i = 0; i < A; ++i) audio[r * A + i] = lam * b.audio[r * A + i] + rest * b.audio[p * A + i];
    for (std::size_t i = 0; i < V; ++i)
      video[r * V + i] = round_to_byte(lam * float(b.video[r * V + i]) + rest * float(b.video[p * V + i]));
    audio_len[r] = std::max(b.audio_len[r], b.audio_len[p]);
    video_len[r] = std::max(b.video_len[r], b.video_len[p]);
  }
  b.audio = std::move(audio);
  b.video = std::move(video);
  b.audio_len = std::move(audio_len);
  b.video_len = std::move(video_len);
}

void draw_spec_mask(KeyedRandom& r, const SpecShape& s, int valid, const AugmentConfig& c, std::uint8_t* keep) {
  const int T = s.frames, M = s.mel_bins;
  std::fill_n(keep, std::size_t(T) * M, std::uint8_t{1});
  valid = std::clamp(valid, 0, T);
  for (int k = 0; k < c.freq_masks; ++k) {
    const int f = int(r.integer(0, std::min(c.freq_mask_width, M)));
    const int f0 = int(r.integer(0, M - f));
    for (int t = 0; t < T; ++t) std::fill_n(keep + std::size_t(t) * M + f0, f, std::uint8_t{0});
  }
  for (int k = 0; k < c.time_masks; ++k) {
    const int w = int(r.integer(0, std::min(c.time_mask_width, valid)));
    const int t0 = int(r.integer(0, valid - w));
    std::fill_n(keep + std::size_t(t0) * M, std::size_t(w) * M, std::uint8_t{0});
  }
}

Augmenter::Augmenter(const AugmentConfig& config, double clip_seconds, const SetInfo& stored, std::uint64_t seed,
                     SpecShape spec)
    : config_(config), stored_(stored), input_(cropped_input(stored, clip_seconds)), seed_(seed), spec_(std::move(spec)) {
  auto refuse = [](const std::string& what) { throw Error("option " + what); };
  if (!(config.crop_scale > 0 && config.crop_scale <= 1)) refuse("augment.crop_scale: must be in (0, 1]");
  if (config.mixup < 0 || !std::isfinite(config.mixup)) refuse("augment.mixup: must be >= 0");
  if (config.freq_masks < 0 || config.time_masks < 0 || config.freq_mask_width < 0 || config.time_mask_width < 0)
    refuse("augment.freq_masks, time_masks and their widths: must be >= 0");
}

void Augmenter::train(MicroBatch& b, std::int64_t epoch) const {
  const bool samples = !b.audio.empty();
  if (samples && crops_time()) {
    std::vector<TimeWindow> windows(std::size_t(b.size));
    for (int r = 0; r < b.size; ++r) {
      KeyedRandom key = augment_stream(seed_, "time_crop", epoch, b.index[std::size_t(r)]);
      const int room = time_room(stored_, input_, b.video_len[std::size_t(r)]);
      windows[std::size_t(r)] = window_at(stored_, input_, int(key.integer(0, room)));
    }
    crop_time(b, stored_, input_, windows);
  }
  if (samples && (config_.crop_scale < 1.0 || config_.flip)) {
    const std::size_t clip = std::size_t(input_.frames) * input_.height * input_.width * input_.channels;
    std::vector<std::uint8_t> out(clip);
    for (int r = 0; r < b.size; ++r) {
      KeyedRandom key = augment_stream(seed_, "frames", epoch, b.index[std::size_t(r)]);
      const FrameCrop crop = draw_frame_crop(key, input_.height, input_.width, config_.crop_scale, config_.flip);
      std::uint8_t* video = b.video.data() + std::size_t(r) * clip;
      crop_resize_frames(video, out.data(), input_.frames, input_.height, input_.width, input_.channels, crop);
      std::copy(out.begin(), out.end(), video);
    }
  }
  if (config_.mixup > 0) apply_mixup(b, draw_mixup(seed_, epoch, b.index, config_.mixup));
  if (samples && config_.spec_masks()) {
    const std::size_t per = std::size_t(spec_.frames) * spec_.mel_bins;
    b.spec_keep.assign(std::size_t(b.size) * per, 1);
    for (int r = 0; r < b.size; ++r) {
      KeyedRandom key = augment_stream(seed_, "spec", epoch, b.index[std::size_t(r)]);
      draw_spec_mask(key, spec_, spec_.valid_frames(b.audio_len[std::size_t(r)]), config_,
                     b.spec_keep.data() + std::size_t(r) * per);
    }
  }
}

void Augmenter::evaluate(MicroBatch& b) const {
  if (b.audio.empty() || !crops_time()) return;
  std::vector<TimeWindow> windows(std::size_t(b.size));
  for (int r = 0; r < b.size; ++r)
    windows[std::size_t(r)] = window_at(stored_, input_, time_room(stored_, input_, b.video_len[std::size_t(r)]) / 2);
  crop_time(b, stored_, input_, windows);
}

}  // namespace avtrain::data
