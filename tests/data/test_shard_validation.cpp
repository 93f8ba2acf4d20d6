// ShardSet::open refuses every way a shard set can break the format, with one line that names
// the file, the dataset or attribute, and what is wrong.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "core/error.hpp"
#include "data/shard_reader.hpp"
#include "data/shard_set.hpp"
#include "data/shard_writer.hpp"
#include "data/synthetic.hpp"
#include "shard_edit.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

namespace fs = std::filesystem;
using Dir = test::TempDir;
constexpr hsize_t N = 5, A = 400, F = 4, H = 16, W = 12, C = 1;  // the set every case starts from

SynthOptions base_options(const std::string& dir, bool float_audio) {
  SynthOptions o;
  o.out_dir = dir;
  o.shards = 2;
  o.samples_per_shard = N;
  o.audio_samples = A;
  o.frames = F;
  o.height = H;
  o.width = W;
  o.channels = C;
  o.float_audio = float_audio;
  return o;
}

// Replaces dir/shard-00001.h5 by the first shard of a set written with other options.
void swap_in_shard_from(const test::TempDir& dir, const std::function<void(SynthOptions&)>& change) {
  SynthOptions o = base_options(dir / "other", false);
  o.shards = 1;
  change(o);
  write_synthetic(o);
  fs::rename(dir / "other/shard-00000.h5", dir / "set/shard-00001.h5");
}

struct Case {
  std::string name;
  bool float_audio;
  std::function<void(const test::TempDir&)> damage;  // the set lies in dir / "set"
  std::string file;                                  // the file the message must name
  std::vector<std::string> words;                    // the dataset or attribute, and what is wrong
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

test::ShardEdit edit(const test::TempDir& dir, const std::string& file = "shard-00001.h5") {
  return test::ShardEdit(dir / ("set/" + file));
}

std::vector<Case> cases() {
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  return {
      {"MissingDataset", false, [](const Dir& d) { edit(d).remove("/video_len"); }, "shard-00001.h5", {"/video_len", "missing"}},
      {"DatasetIsAGroup", false,
       [](const Dir& d) {
         edit(d).remove("/label");
         const test::H5Id file(H5Fopen((d / "set/shard-00001.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
         test::H5Id(H5Gcreate2(file.get(), "/label", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
       },
       "shard-00001.h5", {"/label", "not a dataset"}},
      {"LabelInt64", false, [](const Dir& d) { edit(d).replace("/label", H5T_STD_I64LE, {N}); }, "shard-00001.h5", {"/label", "int64", "expected int32"}},
      {"AudioLenUint32", false, [](const Dir& d) { edit(d).replace("/audio_len", H5T_STD_U32LE, {N}); }, "shard-00001.h5", {"/audio_len", "uint32"}},
      {"AudioFloat64", false, [](const Dir& d) { edit(d).replace("/audio", H5T_IEEE_F64LE, {N, A}); }, "shard-00001.h5", {"/audio", "float64", "int16 or float32"}},
      {"VideoFloat32", false, [](const Dir& d) { edit(d).replace("/video", H5T_IEEE_F32LE, {N, F, H, W, C}); }, "shard-00001.h5", {"/video", "float32", "uint8"}},
      {"VideoInt8", false, [](const Dir& d) { edit(d).replace("/video", H5T_STD_I8LE, {N, F, H, W, C}); }, "shard-00001.h5", {"/video", "int8", "uint8"}},
      {"VideoLenRank2", false, [](const Dir& d) { edit(d).replace("/video_len", H5T_STD_I32LE, {N, 1}); }, "shard-00001.h5", {"/video_len", "rank 2"}},
      {"VideoRank4", false, [](const Dir& d) { edit(d).replace("/video", H5T_STD_U8LE, {N, F, H, W}); }, "shard-00001.h5", {"/video", "rank 4"}},
      {"AudioRank1", false, [](const Dir& d) { edit(d).replace("/audio", H5T_STD_I16LE, {N * A}); }, "shard-00001.h5", {"/audio", "rank 1"}},
      {"VideoTwoChannels", false, [](const Dir& d) { edit(d).replace("/video", H5T_STD_U8LE, {N, F, H, W, 2}); }, "shard-00001.h5", {"/video", "2 channels"}},
      {"LabelCountDiffers", false, [](const Dir& d) { edit(d).replace("/label", H5T_STD_I32LE, {N - 1}); }, "shard-00001.h5", {"/label", "4 samples", "/audio holds 5"}},
      {"VideoCountDiffers", false, [](const Dir& d) { edit(d).replace("/video", H5T_STD_U8LE, {N + 1, F, H, W, C}); }, "shard-00001.h5", {"/video", "6 samples"}},
      {"NoSamples", false,
       [](const Dir& d) {
         auto e = edit(d);
         e.replace("/audio", H5T_STD_I16LE, {0, A});
       },
       "shard-00001.h5", {"/audio", "no samples"}},
      {"AudioLenZero", false, [](const Dir& d) { edit(d).set<std::int32_t>("/audio_len", H5T_NATIVE_INT32, {2}, 0); }, "shard-00001.h5", {"/audio_len[2] = 0", "outside 1..400"}},
      {"AudioLenPastA", false, [](const Dir& d) { edit(d).set<std::int32_t>("/audio_len", H5T_NATIVE_INT32, {3}, A + 1); }, "shard-00001.h5", {"/audio_len[3] = 401", "outside 1..400"}},
      {"VideoLenPastF", false, [](const Dir& d) { edit(d).set<std::int32_t>("/video_len", H5T_NATIVE_INT32, {0}, F + 1); }, "shard-00001.h5", {"/video_len[0] = 5", "outside 1..4"}},
      {"VideoLenZero", false, [](const Dir& d) { edit(d, "shard-00000.h5").set<std::int32_t>("/video_len", H5T_NATIVE_INT32, {4}, 0); }, "shard-00000.h5", {"/video_len[4] = 0"}},
      {"LabelTooLarge", false, [](const Dir& d) { edit(d).set<std::int32_t>("/label", H5T_NATIVE_INT32, {4}, 16); }, "shard-00001.h5", {"/label[4] = 16", "outside 0..15"}},
      {"LabelNegative", false, [](const Dir& d) { edit(d).set<std::int32_t>("/label", H5T_NATIVE_INT32, {1}, -1); }, "shard-00001.h5", {"/label[1] = -1"}},
      {"FloatAudioNaN", true, [nan](const Dir& d) { edit(d).set<float>("/audio", H5T_NATIVE_FLOAT, {1, 7}, nan); }, "shard-00001.h5", {"/audio[1, 7]", "not finite"}},
      {"FloatAudioInfinite", true, [](const Dir& d) { edit(d).set<float>("/audio", H5T_NATIVE_FLOAT, {4, 399}, INFINITY); }, "shard-00001.h5", {"/audio[4, 399]", "not finite"}},
      {"FloatAudioAboveOne", true, [](const Dir& d) { edit(d).set<float>("/audio", H5T_NATIVE_FLOAT, {0, 3}, 1.5f); }, "shard-00001.h5", {"/audio[0, 3] = 1.5", "outside [-1, 1]"}},
      // Values changed within their range after the write: only the digests (values_checked) find them.
      {"FloatAudioChangedWithinRange", true, [](const Dir& d) { edit(d).set<float>("/audio", H5T_NATIVE_FLOAT, {2, 7}, 0.123f); }, "shard-00001.h5", {"/audio does not match its digest", "XXH3_64bits"}},
      {"Int16AudioChanged", false, [](const Dir& d) { edit(d).set<std::int16_t>("/audio", H5T_NATIVE_INT16, {0, 0}, 12345); }, "shard-00001.h5", {"/audio does not match its digest"}},
      {"VideoPixelChanged", false, [](const Dir& d) { edit(d, "shard-00000.h5").set<std::uint8_t>("/video", H5T_NATIVE_UINT8, {1, 0, 0, 0, 0}, 255); }, "shard-00000.h5", {"/video does not match its digest"}},
      {"DigestMissing", false, [](const Dir& d) { edit(d).remove_attribute("digest_video"); }, "shard-00001.h5", {"attribute digest_video is missing"}},
      {"ValuesCheckedWithoutDigests", false, [](const Dir& d) { auto e = edit(d); e.remove_attribute("digest_audio"); e.remove_attribute("digest_label"); }, "shard-00001.h5", {"attribute digest_audio is missing"}},
      {"DigestNotUint64", false, [](const Dir& d) { edit(d).set_attribute<double>("digest_audio", H5T_NATIVE_DOUBLE, 1.0); }, "shard-00001.h5", {"digest_audio", "64-bit unsigned integer", "float64"}},
      {"ValuesCheckedZero", false, [](const Dir& d) { edit(d).set_attribute<std::int32_t>("values_checked", H5T_NATIVE_INT32, 0); }, "shard-00001.h5", {"values_checked = 0", "expected 1"}},
      {"DigestAlgorithmUnknown", false, [](const Dir& d) { edit(d).set_string_attribute("digest_algorithm", "md5"); }, "shard-00001.h5", {"digest_algorithm = \"md5\"", "XXH3_64bits only"}},
      {"FrameSizeDiffersBetweenShards", false, [](const Dir& d) { swap_in_shard_from(d, [](SynthOptions& o) { o.width = 16; }); },
       "shard-00001.h5", {"/video", "[N, 4, 16, 16, 1] differs from [N, 4, 16, 12, 1]", "shard-00000.h5"}},
      {"AudioLengthDiffersBetweenShards", false, [](const Dir& d) { swap_in_shard_from(d, [](SynthOptions& o) { o.audio_samples = 300; }); },
       "shard-00001.h5", {"/audio", "[N, 300] differs from [N, 400]"}},
      {"AudioTypeDiffersBetweenShards", false, [](const Dir& d) { swap_in_shard_from(d, [](SynthOptions& o) { o.float_audio = true; }); },
       "shard-00001.h5", {"/audio", "float32", "int16", "shard-00000.h5"}},
      {"ClassesDifferBetweenShards", false, [](const Dir& d) { swap_in_shard_from(d, [](SynthOptions& o) { o.tone_classes = 2; }); },
       "shard-00001.h5", {"num_classes = 8 differs from 16"}},
      {"SampleRateDiffersBetweenShards", false, [](const Dir& d) { edit(d).set_attribute<std::int32_t>("sample_rate", H5T_NATIVE_INT32, 16000); },
       "shard-00001.h5", {"sample_rate = 16000 differs from 8000", "shard-00000.h5"}},
      {"FpsDiffersBetweenShards", false, [](const Dir& d) { edit(d).set_attribute<double>("fps", H5T_NATIVE_DOUBLE, 25.0); },
       "shard-00001.h5", {"fps = 25 differs from 8"}},
      {"FormatMissing", false, [](const Dir& d) { edit(d).remove_attribute("avtrain_format"); }, "shard-00001.h5", {"attribute avtrain_format", "missing"}},
      {"FormatWrong", false, [](const Dir& d) { edit(d).set_string_attribute("avtrain_format", "av-shards"); }, "shard-00001.h5", {"avtrain_format", "\"av-shards\"", "expected \"av-shard\""}},
      {"FormatNotAString", false, [](const Dir& d) { edit(d).set_attribute<std::int32_t>("avtrain_format", H5T_NATIVE_INT32, 1); }, "shard-00001.h5", {"avtrain_format", "must be a string"}},
      {"VersionThree", false, [](const Dir& d) { edit(d).set_attribute<std::int32_t>("version", H5T_NATIVE_INT32, 3); }, "shard-00001.h5", {"attribute version = 3", "versions 1 and 2"}},
      // Version 2 without /labels: a v1 shard marked v2 is refused at its missing label sets' digest.
      {"VersionTwoWithoutLabelSets", false, [](const Dir& d) { edit(d).set_attribute<std::int32_t>("version", H5T_NATIVE_INT32, 2); }, "shard-00001.h5", {"attribute digest_labels is missing"}},
      {"VersionMissing", false, [](const Dir& d) { edit(d).remove_attribute("version"); }, "shard-00001.h5", {"attribute version", "missing"}},
      {"SampleRateFloat", false, [](const Dir& d) { edit(d).set_attribute<double>("sample_rate", H5T_NATIVE_DOUBLE, 8000.0); }, "shard-00001.h5", {"sample_rate", "must be an integer", "float64"}},
      {"SampleRateMissing", false, [](const Dir& d) { edit(d, "shard-00000.h5").remove_attribute("sample_rate"); }, "shard-00000.h5", {"attribute sample_rate", "missing"}},
      {"NumClassesZero", false, [](const Dir& d) { edit(d).set_attribute<std::int64_t>("num_classes", H5T_NATIVE_INT64, 0); }, "shard-00001.h5", {"num_classes = 0", "positive"}},
      {"FpsString", false, [](const Dir& d) { edit(d).set_string_attribute("fps", "8"); }, "shard-00001.h5", {"attribute fps", "must be a number"}},
      {"FpsMissing", false, [](const Dir& d) { edit(d).remove_attribute("fps"); }, "shard-00001.h5", {"attribute fps", "missing"}},
      {"TruncatedFile", false, [](const Dir& d) { fs::resize_file(d / "set/shard-00001.h5", fs::file_size(d / "set/shard-00001.h5") / 2); },
       "shard-00001.h5", {"truncated"}},
      {"TextFileNamedH5", false, [](const Dir& d) { std::ofstream(d / "set/x.h5") << "this is not HDF5\n"; }, "x.h5", {"not an HDF5 file"}},
  };
}

class Refused : public ::testing::TestWithParam<Case> {};

TEST_P(Refused, WithOneLineNamingFileAndDatasetOrAttribute) {
  const Case& c = GetParam();
  const test::TempDir dir;
  write_synthetic(base_options(dir / "set", c.float_audio));
  ASSERT_NO_THROW(ShardSet::open(dir / "set")) << "the undamaged set opens";
  c.damage(dir);
  try {
    ShardSet::open(dir / "set");
    FAIL() << "the damaged set was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    RecordProperty("message", message);
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind(dir / ("set/" + c.file), 0), 0u) << "starts with the file: " << message;
    for (const std::string& word : c.words) EXPECT_NE(message.find(word), std::string::npos) << "'" << word << "' in: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(ShardSetOpen, Refused, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

void expect_refused(const std::string& directory, const std::string& words) {
  try {
    ShardSet::open(directory);
    FAIL() << "accepted " << directory;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(directory, 0), 0u) << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
  }
}

TEST(ShardSetOpen, RefusesEmptyDirectory) {
  const test::TempDir dir;
  std::ofstream(dir / "notes.txt") << "no shards here\n";
  std::ofstream(dir / "shard-00000.h5.tmp") << "an unfinished write\n";
  expect_refused(dir.str(), "no shard (*.h5) files");
}

TEST(ShardSetOpen, RefusesMissingDirectory) {
  const test::TempDir dir;
  expect_refused(dir / "absent", "no such shard directory");
}

TEST(ShardSetOpen, RefusesAFileInPlaceOfADirectory) {
  const test::TempDir dir;
  write_synthetic(base_options(dir.str(), false));
  expect_refused(dir / "shard-00000.h5", "not a directory");
}

TEST(ShardSetOpen, IgnoresFilesThatAreNotShards) {
  const test::TempDir dir;
  write_synthetic(base_options(dir.str(), false));
  std::ofstream(dir / "README") << "not a shard\n";
  std::ofstream(dir / "shard-00002.h5.tmp") << "an unfinished write\n";
  EXPECT_EQ(ShardSet::open(dir.str())->info().total_samples, static_cast<std::int64_t>(2 * N));
}

// Three shards, shard 1 with a label past num_classes - 1 (= 15).
void write_set_with_bad_label_in_shard_1(const std::string& directory) {
  SynthOptions o = base_options(directory, false);
  o.shards = 3;
  write_synthetic(o);
  test::ShardEdit(directory + "/shard-00001.h5").set<std::int32_t>("/label", H5T_NATIVE_INT32, {2}, 16);
}

void expect_refused_naming(const std::string& directory, CheckShare share, const std::string& file) {
  try {
    ShardSet::open(directory, share);
    FAIL() << "part " << share.part << " of " << share.parts << " accepted " << directory;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(directory + "/" + file, 0), 0u) << message;
    EXPECT_NE(message.find("/label[2] = 16"), std::string::npos) << message;
  }
}

TEST(ShardSetOpen, ValuesOfAShardAreCheckedByThePartItFallsTo) {
  const test::TempDir dir;
  write_set_with_bad_label_in_shard_1(dir.str());
  expect_refused_naming(dir.str(), {}, "shard-00001.h5");
  expect_refused_naming(dir.str(), {1, 2}, "shard-00001.h5");  // part 1 checks shard 1
  expect_refused_naming(dir.str(), {1, 3}, "shard-00001.h5");
}

TEST(ShardSetOpen, ValuesOfOtherPartsShardsAreNotChecked) {
  const test::TempDir dir;
  write_set_with_bad_label_in_shard_1(dir.str());
  EXPECT_NO_THROW(ShardSet::open(dir.str(), {0, 2}));  // shards 0 and 2
  EXPECT_NO_THROW(ShardSet::open(dir.str(), {2, 3}));  // shard 2
}

// Every part refuses a set whose shard 1 has a bad header, whichever shards' values it checks.
void expect_every_part_refuses(const std::string& attribute, std::int32_t value, const std::string& words) {
  const test::TempDir dir;
  SynthOptions o = base_options(dir.str(), false);
  o.shards = 3;
  write_synthetic(o);
  test::ShardEdit(dir / "shard-00001.h5").set_attribute<std::int32_t>(attribute, H5T_NATIVE_INT32, value);
  for (const CheckShare share : {CheckShare{0, 1}, CheckShare{0, 2}, CheckShare{1, 2}, CheckShare{2, 3}}) {
    try {
      ShardSet::open(dir.str(), share);
      ADD_FAILURE() << "part " << share.part << " of " << share.parts << " accepted " << attribute << " = " << value;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(dir / "shard-00001.h5", 0), 0u) << message;
      EXPECT_NE(message.find(words), std::string::npos) << message;
    }
  }
}

// data.check_values sample: a start reads the float audio of a few rows of each shard only; a bad
// value elsewhere passes the start and is refused when its sample is read, naming the file, the
// row and the element (never handed to training); one in a sampled row is refused at the start;
// the full check finds both.
TEST(ShardSetOpen, ASampledStartChecksAFewAudioRowsAndTheReadChecksTheRest) {
  const test::TempDir dir;
  SynthOptions o = base_options(dir / "set", true);
  o.samples_per_shard = 40;
  write_synthetic(o);
  const CheckShare sample{0, 1, CheckValues::sample};
  edit(dir).set<float>("/audio", H5T_NATIVE_FLOAT, {3, 5}, 1.5f);  // row 3 of shard 1: not a sampled row
  {
    const std::unique_ptr<ShardSet> set = ShardSet::open(dir / "set", sample);
    EXPECT_NO_THROW(set->read({0, 1, 42, 44}));
    try {
      set->read({2, 43});  // global 43: shard 1, row 3
      ADD_FAILURE() << "the bad sample was read without an error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(dir / "set/shard-00001.h5", 0), 0u) << message;
      EXPECT_NE(message.find("/audio[3, 5] = 1.5 is outside [-1, 1]"), std::string::npos) << message;
    }
  }  // the files closed, to be edited again
  expect_refused(dir / "set", "/audio[3, 5] = 1.5");  // the full check
  // The writer checked every value (values_checked): the one sampled row is the middle one.
  EXPECT_EQ(ShardReader(dir / "set/shard-00000.h5").sampled_rows(), std::vector<std::int64_t>{20});
  edit(dir, "shard-00000.h5").set<float>("/audio", H5T_NATIVE_FLOAT, {20, 0}, INFINITY);  // the sampled row
  try {
    ShardSet::open(dir / "set", sample);
    ADD_FAILURE() << "a bad value in a sampled row passed the start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.h5: /audio[20, 0] = inf is not finite"), std::string::npos)
        << e.what();
  }
}

void remove_value_digests(const std::string& path) {
  test::ShardEdit e(path);
  for (const char* name : {"values_checked", "digest_algorithm"}) e.remove_attribute(name);
  for (const char* dataset : kDigestedDatasets) e.remove_attribute(digest_attribute(dataset));
}

// A set without values_checked (an older pack, h5py's): it opens, and a sampled start reads the float
// audio of 6 rows of each shard (the first, the last and four between).
TEST(ShardSetOpen, ASetWithoutDigestsOpensAndSamplesSixRows) {
  const test::TempDir dir;
  SynthOptions o = base_options(dir / "set", true);
  o.samples_per_shard = 40;
  write_synthetic(o);
  for (const char* file : {"shard-00000.h5", "shard-00001.h5"}) remove_value_digests(dir / ("set/" + std::string(file)));
  const CheckShare sample{0, 1, CheckValues::sample};
  EXPECT_NO_THROW(ShardSet::open(dir / "set", sample));
  EXPECT_NO_THROW(ShardSet::open(dir / "set"));
  {
    const ShardReader shard(dir / "set/shard-00000.h5");
    EXPECT_FALSE(shard.header().digests.has_value());
    EXPECT_EQ(shard.sampled_rows(), (std::vector<std::int64_t>{0, 7, 15, 23, 31, 39}));
  }  // closed, to be edited
  edit(dir, "shard-00000.h5").set<float>("/audio", H5T_NATIVE_FLOAT, {15, 0}, INFINITY);  // a sampled row
  expect_refused(dir / "set", "shard-00000.h5: /audio[15, 0] = inf is not finite");
  try {
    ShardSet::open(dir / "set", sample);
    ADD_FAILURE() << "a bad value in a sampled row passed the start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00000.h5: /audio[15, 0] = inf is not finite"), std::string::npos)
        << e.what();
  }
}

// A sampled start reads the lengths and labels whole, so it checks their digests too: a label moved to
// another valid class is refused at the start, naming the file and /label.
TEST(ShardSetOpen, ASampledStartChecksTheDigestsOfLengthsAndLabels) {
  const test::TempDir dir;
  write_synthetic(base_options(dir / "set", false));
  const std::string path = dir / "set/shard-00001.h5";
  const std::int32_t label = test::read_all<std::int32_t>(path, "/label", H5T_NATIVE_INT32)[3];
  edit(dir).set<std::int32_t>("/label", H5T_NATIVE_INT32, {3}, (label + 1) % 16);
  try {
    ShardSet::open(dir / "set", {0, 1, CheckValues::sample});
    ADD_FAILURE() << "a changed label passed the start";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": /label does not match its digest", 0), 0u) << e.what();
  }
}

// An independent digest of what synth wrote: XXH3_64bits in one call over each dataset read whole.
TEST(ShardWriter, RecordsValuesCheckedAndTheDigestOfEachDataset) {
  const test::TempDir dir;
  for (const bool float_audio : {false, true}) {
    const std::string set = dir / (float_audio ? "float" : "int16");
    write_synthetic(base_options(set, float_audio));
    const std::string path = set + "/shard-00001.h5";
    const ShardHeader h = ShardReader(path).header();
    ASSERT_TRUE(h.digests.has_value()) << path;
    const auto one_call = [](const auto& values) {
      return XXH3_64bits(values.data(), values.size() * sizeof(values[0]));
    };
    if (float_audio) EXPECT_EQ((*h.digests)[digest_audio], one_call(test::read_all<float>(path, "/audio", H5T_NATIVE_FLOAT)));
    else EXPECT_EQ((*h.digests)[digest_audio], one_call(test::read_all<std::int16_t>(path, "/audio", H5T_NATIVE_INT16)));
    EXPECT_EQ((*h.digests)[digest_video], one_call(test::read_all<std::uint8_t>(path, "/video", H5T_NATIVE_UINT8)));
    for (const auto d : {digest_audio_len, digest_video_len, digest_label}) {
      EXPECT_EQ((*h.digests)[d], one_call(test::read_all<std::int32_t>(path, kDigestedDatasets[d], H5T_NATIVE_INT32)))
          << kDigestedDatasets[d];
    }
  }
}

// The writer refuses a value the format does not allow, naming the file, the dataset and the row, and
// leaves no file behind; rows go in order, and a shard of fixed size commits only when whole.
TEST(ShardWriter, RefusesAValueOutsideTheFormat) {
  const test::TempDir dir;
  ShardHeader h;
  h.version = 1;
  h.path = dir / "shard.h5";
  h.sample_rate = 8000;
  h.fps = 8;
  h.num_classes = 4;
  h.samples = 3;
  h.audio_samples = 10;
  h.frames = 2;
  h.height = h.width = 4;
  h.channels = 1;
  h.audio_int16 = false;
  const auto good_block = [&](std::int64_t count) {
    SampleBlock b;
    b.count = count;
    b.audio_float.assign(std::size_t(count) * 10, 0.5f);
    b.audio_len.assign(std::size_t(count), 10);
    b.video.assign(std::size_t(count) * 2 * 4 * 4, 7);
    b.video_len.assign(std::size_t(count), 2);
    b.label.assign(std::size_t(count), 3);
    return b;
  };
  const auto refused = [&](const std::function<void(SampleBlock&)>& damage, const std::string& words) {
    ShardWriter writer(h, false);
    SampleBlock b = good_block(3);
    damage(b);
    try {
      writer.write(0, b);
      ADD_FAILURE() << "the writer accepted a block with " << words;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(h.path + ": " + words, 0), 0u) << e.what();
    }
  };
  refused([](SampleBlock& b) { b.label[2] = 4; }, "/label[2] = 4 is outside 0..3");
  refused([](SampleBlock& b) { b.audio_len[1] = 0; }, "/audio_len[1] = 0 is outside 1..10");
  refused([](SampleBlock& b) { b.video_len[0] = 3; }, "/video_len[0] = 3 is outside 1..2");
  refused([](SampleBlock& b) { b.audio_float[13] = std::nanf(""); }, "/audio[1, 3] = nan is not finite");
  refused([](SampleBlock& b) { b.audio_float[29] = -1.25f; }, "/audio[2, 9] = -1.25 is outside [-1, 1]");
  EXPECT_FALSE(fs::exists(h.path));
  EXPECT_FALSE(fs::exists(h.path + ".tmp"));
  {
    ShardWriter writer(h, false);
    writer.write(0, good_block(1));
    EXPECT_THROW(writer.write(2, good_block(1)), Error);  // row 1 skipped
    writer.write(1, good_block(1));
    EXPECT_THROW(writer.commit(), Error);  // 2 of 3 rows
  }
  ShardWriter writer(h, false);
  writer.write(0, good_block(2));
  writer.write(2, good_block(1));
  writer.commit();
  EXPECT_TRUE(ShardReader(h.path).header().digests.has_value());
}

TEST(ShardSetOpen, HeadersOfEveryShardAreCheckedByEveryPart) {
  expect_every_part_refuses("version", 3, "attribute version = 3");
}

TEST(ShardSetOpen, EveryPartComparesEveryShardsHeaderWithTheFirst) {
  expect_every_part_refuses("sample_rate", 16000, "sample_rate = 16000 differs from 8000");
}

}  // namespace
}  // namespace avtrain::data
