#pragma once
// One shard file of format v1 or v2 (docs/shard-format.md): opened read-only and kept open,
// checked on construction, read by rows with one hyperslab read per dataset.
#include <cstdint>
#include <string>
#include <vector>

#include "data/hdf5_describe.hpp"
#include "data/hdf5_id.hpp"
#include "data/raw_chunks.hpp"
#include "data/shard_header.hpp"
#include "data/shard_set.hpp"

namespace avtrain::data {

// Rows of one shard in increasing row order, decoded as in MicroBatch (audio as float in [-1, 1]).
struct ShardRows {
  std::int64_t count = 0;
  std::vector<float> audio;             // [count, A]
  std::vector<std::int32_t> audio_len;  // [count]
  std::vector<std::uint8_t> video;      // [count, F, H, W, C]
  std::vector<std::int32_t> video_len;  // [count]
  std::vector<std::int32_t> label;      // [count] the class (v2: the first of the sample's set)
  std::vector<std::uint8_t> labels;     // [count, classes] v2: 1 for each class of the sample's set
};

class ShardReader {
 public:
  // Opens the file and checks its attributes and the types, ranks and sample counts of its datasets.
  // Throws Error with one line naming the file, the dataset or attribute, and what is wrong.
  explicit ShardReader(std::string path);

  const ShardHeader& header() const { return header_; }
  std::vector<DatasetLayout> layouts() const;

  // Streams through the file in blocks of samples: lengths and labels in range, float audio finite and
  // in [-1, 1]; where the shard records digests (values_checked), every dataset read whole and hashed
  // to its digest, so a value changed even within its range is named (file and dataset). Returns the
  // number of samples of each class (v2: the samples whose set holds it). sampled: the lengths and labels whole (a few bytes a sample; their
  // digests checked), float audio only in the rows of sampled_rows(), so a start reads a small share of
  // the file; read_rows checks the float audio of every row it reads, so no value out of range is ever
  // trained on.
  std::vector<std::int64_t> check_values(bool sampled = false) const;

  // The rows check_values(true) reads the float audio of: one, the middle, where the writer checked
  // every value (values_checked); otherwise 0, the last, and four spread between.
  std::vector<std::int64_t> sampled_rows() const;

  // rows: row indices within this shard, sorted ascending, unique, in range. Fields::labels reads
  // /label (v2: /labels) alone. Float audio is checked as read (finite, in [-1, 1]): an error names the file, the
  // row and the element. Safe from several threads at once: every HDF5 call holds hdf5_mutex(); the
  // chunks of /audio and /video are read raw under it and decompressed outside it (raw_chunks.hpp).
  ShardRows read_rows(const std::vector<std::int64_t>& rows, Fields fields = Fields::all) const;

 private:
  ShardHeader header_;
  H5Id file_;
  H5Id audio_, audio_len_, video_, video_len_, label_;  // label_: /label (v1) or /labels (v2)
  RawRowPlan audio_plan_, video_plan_;  // how read_rows reads /audio and /video (raw chunks or H5Dread)
};

}  // namespace avtrain::data
