// The record framing of TensorBoard's event files (io/tensorboard_writer): CRC-32C against its check
// value, and a written file read back record by record, each length and payload under its checksum.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "io/tensorboard_writer.hpp"

using avtrain::masked_crc32c;

namespace {
std::uint64_t le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
std::uint32_t unmask(std::uint32_t m) {
  const std::uint32_t r = m - 0xa282ead8u;
  return (r << 15) | (r >> 17);
}
}  // namespace

TEST(TensorBoardWriter, Crc32cOfTheCheckStringIsTheCastagnoliCheckValue) {
  // CRC-32C's check value (RFC 3720, B.4): "123456789" -> 0xE3069283; stored masked.
  EXPECT_EQ(unmask(masked_crc32c("123456789")), 0xE3069283u);
  EXPECT_EQ(unmask(masked_crc32c("")), 0u);
  EXPECT_NE(masked_crc32c("123456789"), masked_crc32c("123456780"));
}

TEST(TensorBoardWriter, EveryRecordIsALengthAndAPayloadUnderTheirChecksums) {
  const std::string dir = testing::TempDir() + "/tensorboard_writer_test";
  std::filesystem::remove_all(dir);
  std::string path;
  {
    avtrain::TensorBoardWriter w(dir);
    path = w.path();
    avtrain::StepRow row;
    row.set("step", 3);
    row.set("loss", 2.5);
    row.set("val_acc", 0.75);
    w.write_step(row, {{"embed", 1.0, 0, {}, 0, 0}, {"head", 2.0, 0, {}, 0, 0}});
  }
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const std::uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), masked_crc32c(bytes.substr(at, 8))) << "record " << records << "'s length";
    ASSERT_LE(at + 12 + n + 4, bytes.size());
    EXPECT_EQ(le(bytes, at + 12 + n, 4), masked_crc32c(bytes.substr(at + 12, n))) << "record " << records;
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 2) << "the version event and the step's";
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("trace/val_acc"), std::string::npos);
  EXPECT_NE(bytes.find("grad_share/head"), std::string::npos);
}
