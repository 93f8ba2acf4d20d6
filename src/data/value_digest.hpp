#pragma once
// The digests of a shard's values (format v1's optional values_checked part, docs/shard-format.md):
// XXH3's 64-bit hash (Debian's libxxhash) of each dataset's values in row order, their bytes as
// stored in memory on a little-endian machine (int16/int32 little-endian, float32 IEEE, uint8).
// The writer digests what it writes; the full value check digests what it reads, and a value
// changed after the write, even to another valid one, no longer matches.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

struct XXH3_state_s;

namespace avtrain::data {

inline constexpr const char* kDigestAlgorithm = "XXH3_64bits";

// The datasets a shard's digests cover, in the order of ShardHeader::digests; /source is not one.
inline constexpr std::array<const char*, 5> kDigestedDatasets{"/audio", "/audio_len", "/video", "/video_len", "/label"};
enum DigestedDataset : std::size_t { digest_audio, digest_audio_len, digest_video, digest_video_len, digest_label };

// The dataset of digest d in a shard of `version`: format v2 holds each sample's classes in /labels
// (uint8 [N, num_classes]) where v1 holds one class in /label (int32 [N]).
const char* digested_dataset(std::size_t d, int version);

// The root attribute holding a dataset's digest: "digest_" and the name ("/audio" -> "digest_audio").
std::string digest_attribute(const char* dataset);

// "0x" and 16 hex digits.
std::string hex_digest(std::uint64_t digest);

// A running digest: add() the values of one dataset in row order, in any pieces; value() is the
// digest of all of them (the same whatever the pieces).
class ValueDigest {
 public:
  ValueDigest();
  ~ValueDigest();
  ValueDigest(ValueDigest&& other) noexcept;
  ValueDigest& operator=(ValueDigest&& other) noexcept;
  ValueDigest(const ValueDigest&) = delete;
  ValueDigest& operator=(const ValueDigest&) = delete;

  void add(const void* bytes, std::size_t size);
  template <class T>
  void add_values(const T* values, std::size_t count) {
    add(values, count * sizeof(T));
  }
  std::uint64_t value() const;

 private:
  XXH3_state_s* state_ = nullptr;
};

using ShardDigests = std::array<std::uint64_t, kDigestedDatasets.size()>;

}  // namespace avtrain::data
