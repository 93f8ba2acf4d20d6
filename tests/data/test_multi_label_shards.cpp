// Shard format v2 (a set of classes a sample, /labels uint8 [N, classes]): what synth --multi-label
// writes reads back as written (labels and each row's first class), its digest is of /labels, and
// bad label sets are refused by the writer and by the reader, one line naming file, dataset and row.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.hpp"
#include "data/label_sets.hpp"
#include "data/shard_reader.hpp"
#include "data/shard_set.hpp"
#include "data/shard_writer.hpp"
#include "data/synthetic.hpp"
#include "data/value_digest.hpp"
#include "shard_edit.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

SynthOptions multi_label_options(const std::string& dir) {
  SynthOptions o;
  o.out_dir = dir;
  o.shards = 2;
  o.samples_per_shard = 6;
  o.seed = 4;
  o.audio_samples = 400;
  o.frames = 4;
  o.height = 16;
  o.width = 16;
  o.tone_classes = 3;
  o.motion_classes = 2;
  o.multi_label = true;
  return o;
}

std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(MultiLabelShards, ReadBackAsWrittenWithTheFirstClassAsLabel) {
  const test::TempDir dir;
  write_synthetic(multi_label_options(dir.str()));
  const auto set = ShardSet::open(dir.str());
  EXPECT_TRUE(set->info().multi_label);
  EXPECT_EQ(set->info().num_classes, 5);
  const std::vector<std::int64_t> indices{7, 0, 11, 3};
  const MicroBatch all = set->read(indices);
  const MicroBatch labels_only = set->read(indices, Fields::labels);
  const auto file0 = test::read_all<std::uint8_t>(dir / "shard-00000.h5", "/labels", H5T_NATIVE_UINT8);
  const auto file1 = test::read_all<std::uint8_t>(dir / "shard-00001.h5", "/labels", H5T_NATIVE_UINT8);
  for (std::size_t r = 0; r < indices.size(); ++r) {
    const auto& file = indices[r] < 6 ? file0 : file1;
    const std::size_t row = std::size_t(indices[r] % 6);
    const std::vector<std::uint8_t> want(file.begin() + std::ptrdiff_t(row * 5), file.begin() + std::ptrdiff_t(row * 5 + 5));
    const std::vector<std::uint8_t> got(all.labels.begin() + std::ptrdiff_t(r * 5), all.labels.begin() + std::ptrdiff_t(r * 5 + 5));
    EXPECT_EQ(got, want) << "sample " << indices[r];
    EXPECT_EQ(std::accumulate(want.begin(), want.end(), 0), 2);  // {tone, tones + motion}
    EXPECT_EQ(all.label[r], first_classes(want.data(), 1, 5)[0]);
  }
  EXPECT_EQ(labels_only.labels, all.labels);
  EXPECT_EQ(labels_only.label, all.label);
  EXPECT_TRUE(labels_only.audio.empty());
  const ShardReader reader(dir / "shard-00000.h5");
  ValueDigest digest;
  digest.add_values(file0.data(), file0.size());
  EXPECT_EQ((*reader.header().digests)[digest_label], digest.value());
  EXPECT_STREQ(digested_dataset(digest_label, 2), "/labels");
}

TEST(MultiLabelShards, WriterRefusesAValueOtherThan01AndAnEmptySet) {
  const test::TempDir dir;
  ShardHeader h;
  h.version = 2;
  h.path = dir / "shard-00000.h5";
  h.sample_rate = 8000;
  h.fps = 8;
  h.num_classes = 3;
  h.samples = 2;
  h.audio_samples = 10;
  h.frames = h.height = h.width = h.channels = 1;
  h.audio_int16 = true;
  SampleBlock block;
  block.count = 2;
  block.audio_pcm.assign(20, 0);
  block.audio_len = {10, 10};
  block.video.assign(2, 0);
  block.video_len = {1, 1};
  block.labels = {1, 0, 2, 0, 1, 0};
  {
    ShardWriter writer(h, false);
    EXPECT_EQ(expect_error([&] { writer.write(0, block); }),
              h.path + ": /labels[0, 2] = 2 is not 0 or 1 (refused by the writer)");
  }
  block.labels = {1, 0, 1, 0, 0, 0};
  ShardWriter writer(h, false);
  EXPECT_EQ(expect_error([&] { writer.write(0, block); }),
            h.path + ": /labels[1] holds no class (a sample needs one at least) (refused by the writer)");
}

TEST(MultiLabelShards, ReaderRefusesAnEmptySetAWrongWidthAndAMixOfVersions) {
  const test::TempDir dir, v1;
  write_synthetic(multi_label_options(dir.str()));
  const std::string shard = dir / "shard-00001.h5";
  {
    test::ShardEdit edit(shard);
    edit.set<std::uint8_t>("/labels", H5T_NATIVE_UINT8, {4, 0}, 0);
    edit.set<std::uint8_t>("/labels", H5T_NATIVE_UINT8, {4, 1}, 0);
    edit.set<std::uint8_t>("/labels", H5T_NATIVE_UINT8, {4, 2}, 0);
    edit.set<std::uint8_t>("/labels", H5T_NATIVE_UINT8, {4, 3}, 0);
    edit.set<std::uint8_t>("/labels", H5T_NATIVE_UINT8, {4, 4}, 0);
    edit.remove_attribute("values_checked");  // no digests: the values alone decide
    edit.remove_attribute("digest_algorithm");
    for (const char* d : {"digest_audio", "digest_audio_len", "digest_video", "digest_video_len", "digest_labels"})
      edit.remove_attribute(d);
  }
  EXPECT_EQ(expect_error([&] { ShardSet::open(dir.str()); }),
            shard + ": /labels[4] holds no class (a sample needs one at least)");
  {
    test::ShardEdit edit(shard);
    edit.replace("/labels", H5T_STD_U8LE, {6, 4});
  }
  EXPECT_EQ(expect_error([&] { ShardReader{shard}; }), shard + ": /labels has 4 columns, num_classes = 5");
  // A v1 shard among v2 ones: the version differs.
  SynthOptions o = multi_label_options(v1.str());
  o.multi_label = false;
  o.tone_classes = 5;
  o.motion_classes = 1;
  o.shards = 1;
  write_synthetic(o);
  std::filesystem::copy_file(v1 / "shard-00000.h5", dir / "shard-00002.h5");
  std::filesystem::remove(shard);
  EXPECT_EQ(expect_error([&] { ShardSet::open(dir.str()); }),
            (dir / "shard-00002.h5") + ": attribute version = 1 differs from 2 in " + (dir / "shard-00000.h5"));
}

}  // namespace
}  // namespace avtrain::data
