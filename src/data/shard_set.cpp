#include "data/shard_set.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "core/error.hpp"
#include "data/shard_directory.hpp"
#include "data/shard_reader.hpp"

namespace avtrain::data {

namespace {

class Hdf5ShardSet final : public ShardSet {
 public:
  Hdf5ShardSet(const std::string& directory, CheckShare share) : directory_(directory) {
    for (const std::string& path : list_shard_files(directory)) {
      ShardReader& shard = shards_.emplace_back(path);
      if (int(shards_.size() - 1) % share.parts == share.part) shard.check_values(share.values == CheckValues::sample);
      if (shards_.size() > 1) require_same_set(shards_.front().header(), shard.header());
      first_index_.push_back(info_.total_samples);
      info_.total_samples += shard.header().samples;
      std::error_code ec;
      const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
      info_.shards.push_back({path, ec ? 0 : static_cast<std::uint64_t>(bytes), shard.header().samples});
    }
    const ShardHeader& h = shards_.front().header();
    info_.sample_rate = h.sample_rate;
    info_.fps = h.fps;
    info_.num_classes = h.num_classes;
    info_.audio_samples = h.audio_samples;
    info_.frames = h.frames;
    info_.height = h.height;
    info_.width = h.width;
    info_.channels = h.channels;
    info_.audio_int16 = h.audio_int16;
    info_.multi_label = h.version >= 2;
    info_.class_names = h.class_names;
  }

  const SetInfo& info() const override { return info_; }

  MicroBatch read(const std::vector<std::int64_t>& global_indices, Fields fields) override {
    for (const std::int64_t index : global_indices) {
      if (index < 0 || index >= info_.total_samples) {
        throw Error("sample index " + std::to_string(index) + " is outside 0.." + std::to_string(info_.total_samples - 1) +
                    " of the shard set in " + directory_);
      }
    }
    const auto batch = global_indices.size();
    const auto audio_row = static_cast<std::size_t>(info_.audio_samples);
    const auto video_row = static_cast<std::size_t>(info_.frames) * info_.height * info_.width * info_.channels;
    MicroBatch out;
    out.size = static_cast<int>(batch);
    out.index = global_indices;
    const bool all = fields == Fields::all;
    if (all) {
      out.audio.resize(batch * audio_row);
      out.audio_len.resize(batch);
      out.video.resize(batch * video_row);
      out.video_len.resize(batch);
    }
    out.label.resize(batch);
    const auto classes = static_cast<std::size_t>(info_.num_classes);
    if (info_.multi_label) out.labels.resize(batch * classes);

    // Batch positions ordered by global index, so each shard's rows form one contiguous, sorted stretch.
    std::vector<std::size_t> by_index(batch);
    std::iota(by_index.begin(), by_index.end(), std::size_t{0});
    std::stable_sort(by_index.begin(), by_index.end(),
                     [&](std::size_t a, std::size_t b) { return global_indices[a] < global_indices[b]; });

    std::vector<std::size_t> row_of(batch);  // batch position -> row position in its shard's read
    for (std::size_t begin = 0; begin < batch;) {
      const std::size_t shard = shard_of(global_indices[by_index[begin]]);
      const std::int64_t first = first_index_[shard];
      const std::int64_t end_index = first + shards_[shard].header().samples;
      std::size_t end = begin;
      std::vector<std::int64_t> rows;  // sorted, unique rows of this shard
      for (; end < batch && global_indices[by_index[end]] < end_index; ++end) {
        const std::int64_t row = global_indices[by_index[end]] - first;
        if (rows.empty() || rows.back() != row) rows.push_back(row);
        row_of[by_index[end]] = rows.size() - 1;
      }
      const ShardRows read = shards_[shard].read_rows(rows, fields);
      for (std::size_t k = begin; k < end; ++k) {
        const std::size_t to = by_index[k];
        const std::size_t from = row_of[to];
        out.label[to] = read.label[from];
        if (info_.multi_label)
          std::copy_n(read.labels.begin() + from * classes, classes, out.labels.begin() + to * classes);
        if (!all) continue;
        std::copy_n(read.audio.begin() + from * audio_row, audio_row, out.audio.begin() + to * audio_row);
        std::copy_n(read.video.begin() + from * video_row, video_row, out.video.begin() + to * video_row);
        out.audio_len[to] = read.audio_len[from];
        out.video_len[to] = read.video_len[from];
      }
      begin = end;
    }
    return out;
  }

 private:
  std::size_t shard_of(std::int64_t global_index) const {
    const auto after = std::upper_bound(first_index_.begin(), first_index_.end(), global_index);
    return static_cast<std::size_t>(after - first_index_.begin()) - 1;
  }

  std::string directory_;
  SetInfo info_;
  std::vector<ShardReader> shards_;
  std::vector<std::int64_t> first_index_;  // global index of each shard's row 0
};

}  // namespace

namespace {

// What every shard of a set declares, as one shard's header named `path`.
ShardHeader set_header(const SetInfo& s, const std::string& path) {
  ShardHeader h = header_of_shape(s);
  h.version = s.multi_label ? 2 : 1;
  h.path = path;
  h.num_classes = s.num_classes;
  h.class_names = s.class_names;
  return h;
}

}  // namespace

void require_same_samples(const SetInfo& train, const std::string& train_dir, const SetInfo& val,
                          const std::string& val_dir) {
  require_same_set(set_header(train, train_dir), set_header(val, val_dir + " (data.val_dir)"));
}

std::unique_ptr<ShardSet> ShardSet::open(const std::string& directory, CheckShare share) {
  return std::make_unique<Hdf5ShardSet>(directory, share);
}

}  // namespace avtrain::data
