#include "data/shard_header.hpp"

#include <sstream>

#include "core/error.hpp"

namespace avtrain::data {

namespace {

template <typename T>
void require_same_attribute(const ShardHeader& first, const ShardHeader& other, const char* name, T first_value,
                            T other_value) {
  if (first_value == other_value) return;
  std::ostringstream message;
  message.precision(12);
  message << other.path << ": attribute " << name << " = " << other_value << " differs from " << first_value
          << " in " << first.path;
  throw Error(message.str());
}

std::string sample_shape(const ShardHeader& h, bool video) {
  if (!video) return "[N, " + std::to_string(h.audio_samples) + "]";
  return "[N, " + std::to_string(h.frames) + ", " + std::to_string(h.height) + ", " + std::to_string(h.width) +
         ", " + std::to_string(h.channels) + "]";
}

const char* audio_type(const ShardHeader& h) { return h.audio_int16 ? "int16" : "float32"; }

}  // namespace

void require_same_set(const ShardHeader& first, const ShardHeader& other) {
  require_same_attribute(first, other, "version", first.version, other.version);
  require_same_attribute(first, other, "sample_rate", first.sample_rate, other.sample_rate);
  require_same_attribute(first, other, "fps", first.fps, other.fps);
  require_same_attribute(first, other, "num_classes", first.num_classes, other.num_classes);
  if (first.audio_int16 != other.audio_int16) {
    throw Error(other.path + ": /audio is " + audio_type(other) + " but it is " + audio_type(first) + " in " +
                first.path);
  }
  if (first.class_names != other.class_names) {
    throw Error(other.path + ": attribute class_names " + (other.class_names.empty() ? "is missing but is present" : "differs from the one") +
                " in " + first.path);
  }
  for (const bool video : {false, true}) {
    const std::string first_shape = sample_shape(first, video);
    const std::string other_shape = sample_shape(other, video);
    if (first_shape != other_shape) {
      throw Error(other.path + ": " + (video ? "/video" : "/audio") + " shape " + other_shape + " differs from " +
                  first_shape + " in " + first.path);
    }
  }
}

}  // namespace avtrain::data
