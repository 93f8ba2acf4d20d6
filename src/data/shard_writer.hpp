#pragma once
// Writes one shard file of format v1 atomically: everything goes to PATH.tmp, commit() renames it to PATH.
#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_id.hpp"
#include "data/shard_header.hpp"

namespace avtrain::data {

// Consecutive samples to write; audio_pcm is used when the header says int16, audio_float otherwise.
struct SampleBlock {
  std::int64_t count = 0;
  std::vector<std::int16_t> audio_pcm;   // [count, A]
  std::vector<float> audio_float;        // [count, A]
  std::vector<std::int32_t> audio_len;   // [count]
  std::vector<std::uint8_t> video;       // [count, F, H, W, C]
  std::vector<std::int32_t> video_len;   // [count]
  std::vector<std::int32_t> label;       // [count]
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

  void write(std::int64_t first_row, const SampleBlock& block);
  void append(const SampleBlock& block);  // growable only: the block becomes rows rows()..
  std::int64_t rows() const { return rows_; }
  void commit();  // closes the file and renames PATH.tmp to PATH

 private:
  void close();

  ShardHeader header_;
  ShardLayout layout_;
  std::int64_t rows_ = 0;
  std::string temporary_path_;
  bool committed_ = false;
  H5Id file_;
  H5Id audio_, audio_len_, video_, video_len_, label_, source_;
};

}  // namespace avtrain::data
