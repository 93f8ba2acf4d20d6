#pragma once
// What one shard file declares: its attributes and the shapes of its datasets.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/value_digest.hpp"

namespace avtrain::data {

struct ShardHeader {
  std::string path;
  int version = 0;  // 1: one class a sample (/label); 2: a set of classes a sample (/labels)
  int sample_rate = 0;  // Hz
  double fps = 0;
  int num_classes = 0;
  std::int64_t samples = 0;        // N
  std::int64_t audio_samples = 0;  // A
  int frames = 0, height = 0, width = 0, channels = 0;  // F, H, W, C
  bool audio_int16 = false;        // else float32
  std::vector<std::string> class_names;  // optional attribute class_names: one name per class, or empty
  std::string packed_with;               // optional attribute packed_with: the pack's options as JSON, or ""
  // Optional attributes values_checked = 1 and the digests (value_digest.hpp): the writer checked every
  // value, and this is what they hashed to. Per shard: not compared between shards.
  std::optional<ShardDigests> digests;
};

// A version-1 header declaring the sample shape of `shape`: any description with the header's
// shape fields (the set's SetInfo, a pack's media::ClipShape); a multi-label set's writer sets
// version 2. Path, classes and samples stay unset.
template <class Shape>
ShardHeader header_of_shape(const Shape& shape) {
  ShardHeader h;
  h.version = 1;
  h.sample_rate = shape.sample_rate;
  h.fps = shape.fps;
  h.audio_samples = shape.audio_samples;
  h.frames = shape.frames;
  h.height = shape.height;
  h.width = shape.width;
  h.channels = shape.channels;
  h.audio_int16 = shape.audio_int16;
  return h;
}

// Throws Error naming other.path when other cannot belong to the same set as first
// (a differing attribute, sample shape, audio type or class names).
void require_same_set(const ShardHeader& first, const ShardHeader& other);

}  // namespace avtrain::data
