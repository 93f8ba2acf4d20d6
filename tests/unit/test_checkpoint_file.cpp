// The checkpoint file: a round trip is bit-exact, nothing half-written is ever at the final path,
// and damage (a changed byte, a truncation, a missing dataset, another format version) is an error
// that names the file and the dataset, never a value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.hpp"
#include "core/error.hpp"

namespace avtrain::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("avtrain_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with a 3 x 1000 tensor of a recognisable pattern, another tensor, scalars, attributes.
  std::string write_sample(const std::string& name) {
    const std::string p = path(name);
    FileWriter w(p);
    w.tensor("params/blocks.0.attn.qkv.weight", {3, 1000}, pattern().data());
    const std::vector<float> bias = {1.5f, -0.0f, 3e-38f, 65504.0f};
    w.tensor("params/head.cls.bias", {4}, bias.data());
    w.scalar("state/step", std::int64_t(123));
    w.scalar("scaler/scale", 65536.0);
    w.attribute("fingerprint", "{\"model.width\": 128}");
    w.commit();
    return p;
  }
  static std::vector<float> pattern() {
    std::vector<float> v(3000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f + float(i) * 1e-3f;
    return v;
  }
  static std::string message_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir_;
};

TEST_F(CheckpointFile, RoundTripIsBitExactWithShapesScalarsAndAttributes) {
  const std::string p = write_sample("a.h5");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  const FileReader r(p);
  std::vector<float> got(3000);
  r.tensor("params/blocks.0.attn.qkv.weight", got.data(), got.size());
  const std::vector<float> want = pattern();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(r.shape("params/blocks.0.attn.qkv.weight"), (std::vector<std::uint64_t>{3, 1000}));
  std::vector<float> bias(4);
  r.tensor("params/head.cls.bias", bias.data(), 4);
  EXPECT_TRUE(std::signbit(bias[1]));
  EXPECT_EQ(bias[2], 3e-38f);
  EXPECT_EQ(r.int_scalar("state/step"), 123);
  EXPECT_EQ(r.real_scalar("scaler/scale"), 65536.0);
  EXPECT_EQ(r.attribute("fingerprint"), "{\"model.width\": 128}");
  EXPECT_EQ(r.names("params"), (std::vector<std::string>{"blocks.0.attn.qkv.weight", "head.cls.bias"}));
  EXPECT_TRUE(r.has("state/step"));
  EXPECT_FALSE(r.has("state/nope"));
  EXPECT_FALSE(r.has("nope/step"));
}

TEST_F(CheckpointFile, AWriterThatIsNotCommittedLeavesNothingBehind) {
  const std::string p = path("b.h5");
  {
    FileWriter w(p);
    w.scalar("state/step", std::int64_t(1));
    EXPECT_FALSE(fs::exists(p + ".tmp")) << "the file is built in memory until commit()";
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

// The trainer keeps one FileImage for all its checkpoints: a file built after a bigger one in the
// same memory holds its own content and size, not the rest of the bigger one. Sizes that are no
// multiple of O_DIRECT's 4 KiB are cut back to the file's own.
TEST_F(CheckpointFile, OneImageBuildsFileAfterFileEachWhole) {
  FileImage image;
  std::vector<float> big(300000), small = {1, 2, 3};
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i);
  for (const char* name : {"big.h5", "small.h5"}) {
    FileWriter w(path(name), &image);
    const std::vector<float>& t = std::string(name) == "big.h5" ? big : small;
    w.tensor("params/t", {t.size()}, t.data());
    w.commit();
  }
  EXPECT_GT(fs::file_size(path("big.h5")), big.size() * sizeof(float));
  EXPECT_LT(fs::file_size(path("small.h5")), std::uintmax_t(64) << 10);
  for (const char* name : {"big.h5", "small.h5"}) {
    const FileReader r(path(name));
    const std::vector<float>& want = std::string(name) == "big.h5" ? big : small;
    std::vector<float> got(want.size());
    r.tensor("params/t", got.data(), got.size());
    EXPECT_EQ(got, want) << name;
  }
}

TEST_F(CheckpointFile, AChangedByteInATensorFailsItsChecksumNamingTheDataset) {
  const std::string p = write_sample("c.h5");
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const std::vector<float> want = pattern();
  const std::string needle(reinterpret_cast<const char*>(want.data() + 500), 64);
  const std::size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << "the tensor's bytes are not in the file as written";
  bytes[at + 10] = char(bytes[at + 10] ^ 0x01);  // one bit of one value
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  const FileReader r(p);
  std::vector<float> got(3000);
  const std::string m = message_of([&] { r.tensor("params/blocks.0.attn.qkv.weight", got.data(), got.size()); });
  EXPECT_NE(m.find(p), std::string::npos) << m;
  EXPECT_NE(m.find("params/blocks.0.attn.qkv.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("checksum"), std::string::npos) << m;
  std::vector<float> bias(4);
  EXPECT_NO_THROW(r.tensor("params/head.cls.bias", bias.data(), 4));  // the other datasets stand
}

TEST_F(CheckpointFile, ATruncatedFileIsRefusedNamingIt) {
  const std::string p = write_sample("d.h5");
  fs::resize_file(p, fs::file_size(p) / 2);
  const std::string m = message_of([&] { FileReader r(p); });
  EXPECT_NE(m.find(p), std::string::npos) << m;
  EXPECT_NE(m.find("truncated or damaged"), std::string::npos) << m;
}

TEST_F(CheckpointFile, AMissingDatasetOrAWrongSizeIsAnErrorNamingTheDataset) {
  const FileReader r(write_sample("e.h5"));
  std::vector<float> v(4);
  std::string m = message_of([&] { r.tensor("params/blocks.9.mlp.fc1.weight", v.data(), 4); });
  EXPECT_NE(m.find("dataset params/blocks.9.mlp.fc1.weight missing"), std::string::npos) << m;
  m = message_of([&] { r.tensor("params/head.cls.bias", v.data(), 3); });
  EXPECT_NE(m.find("params/head.cls.bias holds 4 values, expected 3"), std::string::npos) << m;
  m = message_of([&] { r.attribute("nope"); });
  EXPECT_NE(m.find("attribute nope missing"), std::string::npos) << m;
}

TEST_F(CheckpointFile, AFileThatIsNotACheckpointOrOfAnotherVersionIsRefused) {
  const std::string p = path("f.h5");
  std::ofstream(p) << "not hdf5 at all";
  EXPECT_NE(message_of([&] { FileReader r(p); }).find("not a readable HDF5 file"), std::string::npos);
  EXPECT_NE(message_of([&] { FileReader r(path("none.h5")); }).find("no such file"), std::string::npos);
  // Another version: rewrite the attribute through the HDF5 API.
  const std::string q = write_sample("g.h5");
  {
    const data::H5Id file(H5Fopen(q.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    const data::H5Id attr(H5Aopen(file.get(), "format_version", H5P_DEFAULT), H5Aclose);
    const std::int64_t v = 99;
    ASSERT_GE(H5Awrite(attr.get(), H5T_NATIVE_INT64, &v), 0);
  }
  const std::string m = message_of([&] { FileReader r(q); });
  EXPECT_NE(m.find("format version 99, this build reads version 1"), std::string::npos) << m;
}

TEST_F(CheckpointFile, ALargeTensorIsCutIntoChecksummedChunksAndReadsBack) {
  const std::string p = path("h.h5");
  std::vector<float> big(std::size_t(3) << 21);  // 24 MiB: more than one 16 MiB chunk
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i % 9973) * 0.5f;
  {
    FileWriter w(p);
    w.tensor("params/big", {3, std::uint64_t(1) << 21}, big.data());
    w.commit();
  }
  std::vector<float> got(big.size());
  FileReader(p).tensor("params/big", got.data(), got.size());
  EXPECT_EQ(std::memcmp(got.data(), big.data(), big.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace avtrain::checkpoint
