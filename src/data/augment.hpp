#pragma once
// Training-time augmentation of a micro-batch after it is read (docs/augmentation.md): a random time
// crop of clips longer than data.clip_seconds, a random resized crop and horizontal flip of the
// frames, mixup of pairs within the micro-batch, SpecAugment's time and frequency masks of the
// log-mel (drawn here, applied by the model on the device). Every draw comes from a KeyedRandom
// keyed by (seed, purpose, epoch, global sample index) -- never by rank, micro-batch position or
// thread -- so a run repeats bit for bit and every layout sees the same augmented samples.
// Evaluation takes only the time crop, at the centre of the clip's valid part.
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/keyed_random.hpp"
#include "data/shard_set.hpp"

namespace avtrain::data {

// The deck's [augment] section: everything off by default.
struct AugmentConfig {
  int freq_masks = 0;         // SpecAugment frequency masks per sample
  int freq_mask_width = 8;    // their largest width, in mel bins (F of the paper)
  int time_masks = 0;         // SpecAugment time masks per sample
  int time_mask_width = 10;   // their largest width, in log-mel frames (T of the paper)
  double crop_scale = 1.0;    // random resized crop: smallest share of a frame's area kept; 1: off
  bool flip = false;          // horizontal flip of a clip's frames with probability 1/2
  double mixup = 0.0;         // mixup's alpha (lambda ~ Beta(alpha, alpha)); 0: off
  bool spec_masks() const { return (freq_masks > 0 && freq_mask_width > 0) || (time_masks > 0 && time_mask_width > 0); }
  bool any() const { return spec_masks() || crop_scale < 1.0 || flip || mixup > 0.0; }
};

// The random stream of one purpose ("time_crop", "frames", "mixup", "spec") for one sample in one epoch.
inline KeyedRandom augment_stream(std::uint64_t seed, std::string_view purpose, std::int64_t epoch,
                                  std::int64_t sample) {
  return KeyedRandom(seed ^ fnv1a(purpose), std::uint64_t(epoch), std::uint64_t(sample));
}

// What the model takes as input when clips are cut to clip_seconds (0: the stored length, the set
// as it is): round(clip_seconds fps) frames and round(clip_seconds sample_rate) audio samples.
// Throws Error naming data.clip_seconds when that is longer than the stored clip or under a frame.
SetInfo cropped_input(const SetInfo& stored, double clip_seconds);

// ---- time crop: the first stored frame and audio sample of a sample's window; audio follows the
// frames (audio0 = frame0 sample_rate / fps), so both cover the same time.
struct TimeWindow {
  int frame0 = 0;
  std::int64_t audio0 = 0;
};
// The frames a window can start at beyond the first: the room the sample's valid video (or the
// stored clip, if shorter) leaves around the window; 0 when the window covers it.
int time_room(const SetInfo& stored, const SetInfo& input, int video_len);
// The window starting at stored frame frame0 (in [0, time_room]); training draws frame0 uniformly,
// evaluation takes time_room / 2 (centred).
TimeWindow window_at(const SetInfo& stored, const SetInfo& input, int frame0);
// Cuts every row of b (shaped as `stored`) to its window; lengths follow.
void crop_time(MicroBatch& b, const SetInfo& stored, const SetInfo& input, const std::vector<TimeWindow>& windows);

// ---- frames: the same crop and flip for every frame of a clip.
struct FrameCrop {
  int top = 0, left = 0, height = 0, width = 0;
  bool flip = false;
};
// torchvision's RandomResizedCrop: up to 10 tries of an area in [scale_min, 1] of H x W with an
// aspect ratio log-uniform in [3/4, 4/3] that fits, at a uniform position; else the whole frame.
// flip: mirrored with probability 1/2.
FrameCrop draw_frame_crop(KeyedRandom& r, int H, int W, double scale_min, bool flip);
// out[F, H, W, C] = the crop of in[F, H, W, C] resized to H x W, bilinear with half-pixel centres
// (align_corners false, no antialiasing), rounded to the nearest integer, then mirrored if flip.
void crop_resize_frames(const std::uint8_t* in, std::uint8_t* out, int F, int H, int W, int C, const FrameCrop& crop);

// ---- mixup
// A Beta(alpha, alpha) draw (boost::random's gamma ratio over the keyed stream).
double draw_beta(KeyedRandom& r, double alpha);
struct Mixup {
  std::vector<int> partner;  // row r is mixed with row partner[r]
  float lambda = 1;          // the weight of row r's own sample and label, >= 1/2
};
// Keyed by the micro-batch's first sample: a permutation of its rows and lambda = max(l, 1 - l) with
// l ~ Beta(alpha, alpha), one per micro-batch as in the paper's code.
Mixup draw_mixup(std::uint64_t seed, std::int64_t epoch, const std::vector<std::int64_t>& index, double alpha);
// Mixes the samples that b holds (audio lambda a + (1 - lambda) b before the log-mel, frames the same,
// rounded; lengths the longer of the two) and records the partner labels and lambda.
void apply_mixup(MicroBatch& b, const Mixup& m);

// ---- SpecAugment
struct SpecShape {
  int frames = 0, mel_bins = 0;           // of the model's log-mel
  std::function<int(int)> valid_frames;   // log-mel frames of a sample of this audio_len
};
// keep[Tf, mel] (1 kept, 0 masked) of one sample: n_freq bands of width ~ U{0..freq_width} at a
// uniform start, n_time bands of width ~ U{0..min(time_width, valid)} within the valid frames.
void draw_spec_mask(KeyedRandom& r, const SpecShape& s, int valid, const AugmentConfig& c, std::uint8_t* keep);

// All of it, for one run.
class Augmenter {
 public:
  Augmenter(const AugmentConfig& config, double clip_seconds, const SetInfo& stored, std::uint64_t seed,
            SpecShape spec);
  const SetInfo& input() const { return input_; }
  bool crops_time() const { return input_.frames != stored_.frames || input_.audio_samples != stored_.audio_samples; }
  // Whether train() or evaluate() change anything (else a micro-batch can pass as read).
  bool changes_training() const { return crops_time() || config_.any(); }
  bool changes_evaluation() const { return crops_time(); }
  // A training micro-batch of `epoch`: every transform on. A micro-batch holding only labels
  // (a last pipeline stage's) gets the mixup labels alone.
  void train(MicroBatch& b, std::int64_t epoch) const;
  // A validation micro-batch: the centred time window, nothing random.
  void evaluate(MicroBatch& b) const;

 private:
  AugmentConfig config_;
  SetInfo stored_, input_;
  std::uint64_t seed_;
  SpecShape spec_;
};

}  // namespace avtrain::data
