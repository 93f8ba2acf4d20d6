#pragma once
// Writes one shard file of format v1 or v2 (header.version) atomically: everything goes to PATH.tmp, commit() renames it to PATH.
// Every value is checked as it is written (a bad one refused with one line naming the file, dataset and
// row) and digested, and commit() records values_checked = 1 and the digests (docs/shard-format.md).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_id.hpp"
#include "data/shard_header.hpp"
#include "data/value_digest.hpp"

namespace avtrain::data {

// Consecutive samples to write; audio_pcm is used when the header says int16, audio_float otherwise.
struct SampleBlock {
  std::int64_t count = 0;
  std::vector<std::int16_t> audio_pcm;   // [count, A]
  std::vector<float> audio_float;        // [count, A]
  std::vector<std::int32_t> audio_len;   // [count]
  std::vector<std::uint8_t> video;       // [count, F, H, W, C]
  std::vector<std::int32_t> video_len;   // [count]
  std::vector<std::int32_t> label;       // [count] version 1
  std::vector<std::uint8_t> labels;      // [count, num_classes] version 2: 1 for each class of the sample's set
  std::vector<std::string> source;       // [count], written when the layout has sources
};

struct ShardLayout {
  bool gzip = true;       // chunks of one sample with shuffle + deflate; otherwise no filter
  int gzip_level = 4;     // 1..9
  int zstd_level = 0;     // > 0: with gzip set, zstd at this level (HDF5 filter 32015) in place of deflate
  bool growable = false;  // datasets start with 0 rows and grow with append() (chunked even without gzip)
  bool sources = false;   // a /source dataset: one string per sample naming where it came from
};

class ShardWriter {
 public:
  // header.path is the final name; header.samples datasets of the header's shapes are created.
  // gzip: chunks of one sample with shuffle + deflate; otherwise contiguous datasets.
  ShardWriter(const ShardHeader& header, bool gzip);
  // As above with the layout's choices; growable: header.samples is ignored, append() adds rows.
  ShardWriter(const ShardHeader& header, const ShardLayout& layout);
  ~ShardWriter();  // removes PATH.tmp unless committed
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Rows are written in order: first_row is the row after the last one written (0 at first). Throws
  // Error naming the file, the dataset and the row for a length or label out of range or float audio
  // not finite or outside [-1, 1]; nothing of the block is written then.
  void write(std::int64_t first_row, const SampleBlock& block);
  void append(const SampleBlock& block);  // growable only: the block becomes rows rows()..
  std::int64_t rows() const { return rows_; }
  // Records values_checked and the digests, closes the file and renames PATH.tmp to PATH. A shard of
  // fixed size must have had all its rows written.
  void commit();

 private:
  void close();

  ShardHeader header_;
  ShardLayout layout_;
  std::int64_t rows_ = 0;           // growable: the rows the datasets hold
  std::int64_t written_rows_ = 0;   // the rows written (and digested) so far
  std::array<ValueDigest, kDigestedDatasets.size()> digests_;
  std::string temporary_path_;
  bool committed_ = false;
  H5Id file_;
  H5Id audio_, audio_len_, video_, video_len_, label_, source_;
};

}  // namespace avtrain::data
