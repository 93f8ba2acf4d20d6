// synth -> open -> read: what ShardSet::read returns is what the files hold, in the order asked for.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include "core/error.hpp"
#include "data/shard_set.hpp"
#include "data/synthetic.hpp"
#include "shard_edit.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

// One shard's datasets, read whole with plain H5Dread, decoded as MicroBatch decodes them.
struct Reference {
  std::vector<float> audio;
  std::vector<std::int32_t> audio_len, video_len, label;
  std::vector<std::uint8_t> video;
};

Reference read_reference(const std::string& path, bool audio_int16) {
  Reference r;
  if (audio_int16) {
    for (const std::int16_t s : test::read_all<std::int16_t>(path, "/audio", H5T_NATIVE_INT16)) r.audio.push_back(s / 32768.0f);
  } else {
    r.audio = test::read_all<float>(path, "/audio", H5T_NATIVE_FLOAT);
  }
  r.audio_len = test::read_all<std::int32_t>(path, "/audio_len", H5T_NATIVE_INT32);
  r.video = test::read_all<std::uint8_t>(path, "/video", H5T_NATIVE_UINT8);
  r.video_len = test::read_all<std::int32_t>(path, "/video_len", H5T_NATIVE_INT32);
  r.label = test::read_all<std::int32_t>(path, "/label", H5T_NATIVE_INT32);
  return r;
}

SynthOptions small_options(const std::string& dir) {
  SynthOptions o;
  o.out_dir = dir;
  o.shards = 3;
  o.samples_per_shard = 5;
  o.seed = 11;
  o.audio_samples = 400;
  o.frames = 4;
  o.height = 16;
  o.width = 12;
  return o;
}

// (float audio, gzip, channels)
class RoundTrip : public ::testing::TestWithParam<std::tuple<bool, bool, int>> {};

TEST_P(RoundTrip, ReadReturnsTheFileContentsInRequestedOrder) {
  const auto [float_audio, gzip, channels] = GetParam();
  const test::TempDir dir;
  SynthOptions o = small_options(dir.str());
  o.float_audio = float_audio;
  o.gzip = gzip;
  o.channels = channels;
  write_synthetic(o);

  const auto set = ShardSet::open(dir.str());
  const SetInfo& info = set->info();
  EXPECT_EQ(info.sample_rate, 8000);
  EXPECT_EQ(info.fps, 8.0);
  EXPECT_EQ(info.num_classes, 16);
  EXPECT_EQ(info.audio_samples, 400);
  EXPECT_EQ(info.frames, 4);
  EXPECT_EQ(info.height, 16);
  EXPECT_EQ(info.width, 12);
  EXPECT_EQ(info.channels, channels);
  EXPECT_EQ(info.audio_int16, !float_audio);
  EXPECT_EQ(info.total_samples, 15);
  ASSERT_EQ(info.shards.size(), 3u);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(std::filesystem::path(info.shards[s].path).filename(), "shard-0000" + std::to_string(s) + ".h5");
    EXPECT_EQ(info.shards[s].samples, 5);
    EXPECT_GT(info.shards[s].bytes, 0u);
  }

  std::vector<Reference> shards;
  for (const ShardFile& shard : info.shards) shards.push_back(read_reference(shard.path, !float_audio));

  // Unsorted, crossing all shards, with duplicates, first and last sample.
  const std::vector<std::int64_t> indices = {7, 0, 14, 7, 3, 5, 9, 10, 4, 0};
  const MicroBatch batch = set->read(indices);
  ASSERT_EQ(batch.size, static_cast<int>(indices.size()));
  EXPECT_EQ(batch.index, indices);
  const std::size_t audio_row = 400, video_row = std::size_t{4} * 16 * 12 * channels;
  ASSERT_EQ(batch.audio.size(), indices.size() * audio_row);
  ASSERT_EQ(batch.video.size(), indices.size() * video_row);
  for (std::size_t b = 0; b < indices.size(); ++b) {
    const Reference& ref = shards[indices[b] / 5];
    const std::size_t row = indices[b] % 5;
    SCOPED_TRACE("batch row " + std::to_string(b) + ", sample " + std::to_string(indices[b]));
    EXPECT_EQ(batch.label[b], ref.label[row]);
    EXPECT_EQ(batch.audio_len[b], ref.audio_len[row]);
    EXPECT_EQ(batch.video_len[b], ref.video_len[row]);
    EXPECT_TRUE(std::equal(batch.audio.begin() + b * audio_row, batch.audio.begin() + (b + 1) * audio_row,
                           ref.audio.begin() + row * audio_row));
    EXPECT_TRUE(std::equal(batch.video.begin() + b * video_row, batch.video.begin() + (b + 1) * video_row,
                           ref.video.begin() + row * video_row));
  }
  // Rows differ between samples, so a mix-up of order would show above.
  EXPECT_FALSE(std::equal(batch.audio.begin(), batch.audio.begin() + audio_row, batch.audio.begin() + audio_row));
}

INSTANTIATE_TEST_SUITE_P(AudioTypeGzipChannels, RoundTrip,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Values(1, 3)));

TEST(ShardSetRead, Int16AudioIsDividedBy32768) {
  const test::TempDir dir;
  write_synthetic(small_options(dir.str()));
  const std::string first = dir / "shard-00000.h5";
  {
    test::ShardEdit edit(first);
    edit.set<std::int16_t>("/audio", H5T_NATIVE_INT16, {1, 0}, -32768);
    edit.set<std::int16_t>("/audio", H5T_NATIVE_INT16, {1, 1}, 16384);
  }
  // A sampled start: the edited audio no longer matches the shard's digest, which the full check reads.
  const MicroBatch batch = ShardSet::open(dir.str(), {0, 1, CheckValues::sample})->read({1});
  EXPECT_EQ(batch.audio[0], -1.0f);
  EXPECT_EQ(batch.audio[1], 0.5f);
}

TEST(ShardSetRead, EmptyRequestGivesEmptyBatch) {
  const test::TempDir dir;
  write_synthetic(small_options(dir.str()));
  const MicroBatch batch = ShardSet::open(dir.str())->read({});
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.audio.empty());
}

TEST(ShardSetRead, IndexOutOfRangeIsAnError) {
  const test::TempDir dir;
  write_synthetic(small_options(dir.str()));
  const auto set = ShardSet::open(dir.str());
  EXPECT_THROW(set->read({0, 15}), Error);
  EXPECT_THROW(set->read({-1}), Error);
  try {
    set->read({99});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("0..14"), std::string::npos) << e.what();
  }
}

TEST(ShardSetRead, ShardsOfDifferentSizesIndexThroughInFileOrder) {
  const test::TempDir dir;
  SynthOptions o = small_options(dir / "a");
  o.shards = 1;
  o.samples_per_shard = 3;
  write_synthetic(o);
  o.out_dir = dir / "b";
  o.samples_per_shard = 7;
  o.seed = 12;
  write_synthetic(o);
  std::filesystem::create_directories(dir / "set");
  std::filesystem::rename(dir / "a/shard-00000.h5", dir / "set/a.h5");
  std::filesystem::rename(dir / "b/shard-00000.h5", dir / "set/b.h5");
  const auto set = ShardSet::open(dir / "set");
  EXPECT_EQ(set->info().total_samples, 10);
  const Reference b = read_reference(dir / "set/b.h5", true);
  const MicroBatch batch = set->read({3, 9});
  EXPECT_EQ(batch.label[0], b.label[0]);
  EXPECT_EQ(batch.label[1], b.label[6]);
  EXPECT_TRUE(std::equal(batch.audio.begin(), batch.audio.begin() + 400, b.audio.begin()));
}

TEST(ShardSetRead, LabelsOnlyReadGivesTheFullReadsLabelsAndNothingElse) {
  const test::TempDir dir;
  write_synthetic(small_options(dir.str()));
  const auto set = ShardSet::open(dir.str());
  // Shards 1 and 0, unsorted, sample 7 twice.
  const std::vector<std::int64_t> indices = {7, 2, 9, 7, 0, 5};
  const MicroBatch full = set->read(indices);
  const MicroBatch labels = set->read(indices, Fields::labels);
  EXPECT_EQ(labels.size, static_cast<int>(indices.size()));
  EXPECT_EQ(labels.index, indices);
  EXPECT_EQ(labels.label, full.label);
  // Both are what the files hold (labels differ between rows, so a mix-up of rows would show).
  ASSERT_EQ(labels.label.size(), indices.size());
  for (std::size_t b = 0; b < indices.size(); ++b) {
    const Reference ref = read_reference(set->info().shards[indices[b] / 5].path, true);
    EXPECT_EQ(labels.label[b], ref.label[indices[b] % 5]) << "batch row " << b << ", sample " << indices[b];
  }
  EXPECT_FALSE(std::all_of(full.label.begin(), full.label.end(), [&](std::int32_t l) { return l == full.label[0]; }));
  EXPECT_TRUE(labels.audio.empty());
  EXPECT_TRUE(labels.audio_len.empty());
  EXPECT_TRUE(labels.video.empty());
  EXPECT_TRUE(labels.video_len.empty());
}

}  // namespace
}  // namespace avtrain::data
