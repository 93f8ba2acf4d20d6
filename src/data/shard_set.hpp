#pragma once
// Shard formats v1 and v2 (docs/shard-format.md): a directory of HDF5 files, each holding
// /audio [N,A] (int16 or float32), /audio_len, /video [N,F,H,W,C] uint8, /video_len, and /label [N]
// (v1: one class a sample) or /labels [N, classes] (v2: a sample's set of classes, 0/1).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/enum_names.hpp"

namespace avtrain::data {

struct ShardFile {
  std::string path;
  std::uint64_t bytes = 0;
  std::int64_t samples = 0;
};

// What every shard of a set shares, plus the list of shards; the model takes its input shapes from here.
struct SetInfo {
  int sample_rate = 0;       // Hz
  double fps = 0;            // video frames per second
  int num_classes = 0;
  std::int64_t audio_samples = 0;  // A
  int frames = 0, height = 0, width = 0, channels = 0;  // F, H, W, C
  bool audio_int16 = false;  // else float32 in [-1, 1]
  bool multi_label = false;  // format v2: each sample holds a set of classes (/labels)
  std::vector<std::string> class_names;  // from the optional attribute; empty when the set has none
  std::int64_t total_samples = 0;
  std::vector<ShardFile> shards;  // sorted by file name; global sample index runs through them in this order
};

// A micro-batch of samples, decoded to what the model consumes.
struct MicroBatch {
  int size = 0;                        // B
  std::vector<std::int64_t> index;     // global sample index of each row
  std::vector<float> audio;            // [B, A], in [-1, 1] (int16 divided by 32768)
  std::vector<std::int32_t> audio_len; // [B]
  std::vector<std::uint8_t> video;     // [B, F, H, W, C]
  std::vector<std::int32_t> video_len; // [B]
  std::vector<std::int32_t> label;     // [B] the class (v2: the first class of the sample's set)
  std::vector<std::uint8_t> labels;    // [B, classes] v2 sets only: 1 for each class of the sample's set
  // Set by training augmentation (data/augment.hpp), empty otherwise:
  std::vector<std::int32_t> mix_label; // [B] mixup: the label of the sample each row was mixed with
  std::vector<std::uint8_t> mix_labels;  // [B, classes] v2 sets under mixup: that sample's set
  float mix_weight = 1;                // mixup: lambda, the weight of `label` (1 - lambda: of mix_label)
  std::vector<std::uint8_t> spec_keep; // [B, Tf, mel_bins] SpecAugment: 0 where the log-mel is masked
};

// What a read fetches: everything, or only the labels (the last pipeline stage, which gets its
// tokens from the stage before).
enum class Fields { all, labels };

// How much of the values opening a set reads (data.check_values): full, every value that can be out
// of range (lengths, labels, float32 audio: for float audio the whole audio); sample, the lengths and
// labels whole and float audio in a few rows of each shard, the rest checked as it is read for
// training (ShardReader::read_rows), so a start reads a small share of the set and no bad value is
// trained on. int16 audio and uint8 video hold no value out of range.
enum class CheckValues { sample, full };
constexpr EnumNames<CheckValues, 2> enum_names(CheckValues) {
  return {{{CheckValues::sample, "sample"}, {CheckValues::full, "full"}}};
}

// Which shards' values this process checks when opening: shard i when i % parts == part. Every
// rank checks the headers, types and shapes of every shard; the pass over the values is shared out
// over the ranks.
struct CheckShare {
  int part = 0, parts = 1;
  CheckValues values = CheckValues::full;
};

// Throws Error naming val_dir when its samples differ in shape, type, rates or classes from the
// training set's (data.val_dir against data.dir).
void require_same_samples(const SetInfo& train, const std::string& train_dir, const SetInfo& val,
                          const std::string& val_dir);

// Opens and validates a shard set (every file, every rule of the format) and reads samples by
// global index with hyperslab reads. read() may run on several threads at once (the Prefetcher's):
// every HDF5 call holds hdf5_mutex(), the decompression runs outside it (ShardReader::read_rows).
class ShardSet {
 public:
  // Throws avtrain::Error with one line naming the file, the dataset and what is wrong.
  static std::unique_ptr<ShardSet> open(const std::string& directory, CheckShare share = {});
  virtual ~ShardSet() = default;
  virtual const SetInfo& info() const = 0;
  // With Fields::labels only size, index, label and (v2) labels are filled.
  virtual MicroBatch read(const std::vector<std::int64_t>& global_indices, Fields fields = Fields::all) = 0;
};

}  // namespace avtrain::data
