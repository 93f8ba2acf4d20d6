// The safetensors reader and writer (io/safetensors_file): a round trip in fp32 and bf16 (rounded to
// nearest even), a file laid out as the Python package writes one (padded header, several dtypes, a
// scalar), and each bad file refused in one line that names the file and the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/one_line.hpp"
#include "io/safetensors_file.hpp"

using avtrain::DType;
using avtrain::io::SafetensorsReader;
using avtrain::io::SafetensorsWriter;

namespace {

std::string temp_path(const std::string& name) {
  const std::string dir = testing::TempDir() + "/safetensors_file_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

// A file of `header` (JSON, as given) and `data`.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(std::uint64_t(header.size()) >> (8 * i) & 0xff);
  return out + header + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}

// The message of the Error that opening (and, with `tensor`, reading that tensor of) the file throws.
std::string refusal(const std::string& path, const std::string& tensor = "") {
  try {
    SafetensorsReader r(path);
    if (!tensor.empty()) r.floats(*r.find(tensor));
  } catch (const avtrain::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;
    return m;
  }
  ADD_FAILURE() << path << " was not refused";
  return "";
}

SafetensorsWriter two_tensors(DType dtype) {
  SafetensorsWriter w(dtype);
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 1e-3f, 65504.0f, -0.0f};
  const std::vector<float> b = {0.5f, 7.0f};
  w.tensor("blocks.0.attn.qkv.weight", {2, 3}, a.data());
  w.tensor("head.cls.bias", {2}, b.data());
  w.metadata("format", "pt");
  return w;
}

}  // namespace

TEST(SafetensorsFile, Fp32RoundTripKeepsNamesShapesValuesAndMetadata) {
  const std::string path = temp_path("fp32.safetensors");
  two_tensors(DType::f32).write(path);
  const SafetensorsReader r(path);
  ASSERT_EQ(r.tensors().size(), 2u);
  const auto* a = r.find("blocks.0.attn.qkv.weight");
  const auto* b = r.find("head.cls.bias");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(a->shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_EQ(b->shape, (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(r.floats(*a), (std::vector<float>{1.0f, -2.5f, 3.25f, 1e-3f, 65504.0f, -0.0f}));
  EXPECT_TRUE(std::signbit(r.floats(*a)[5]));
  EXPECT_EQ(r.floats(*b), (std::vector<float>{0.5f, 7.0f}));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.find("no.such"), nullptr);
}

TEST(SafetensorsFile, HeaderIsPaddedSoTheDataStartsEightByteAligned) {
  const std::string bytes = two_tensors(DType::f32).bytes();
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8 * 4);  // 8 fp32 values
  EXPECT_EQ(bytes[8], '{');
}

TEST(SafetensorsFile, Bf16RoundsToNearestEven) {
  SafetensorsWriter w(DType::bf16);
  // bf16 keeps 7 fraction bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 (-> 1, even); 1 + 3 2^-8 a
  // tie between 1 + 2^-7 and 1 + 2^-6 (-> 1 + 2^-6, even); 1 + 2^-8 + 2^-12 is nearer 1 + 2^-7.
  const std::vector<float> v = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-12f, -2.0f};
  w.tensor("x", {4}, v.data());
  const std::string path = write_bytes("bf16.safetensors", w.bytes());
  const SafetensorsReader r(path);
  EXPECT_EQ(r.find("x")->dtype, "BF16");
  EXPECT_EQ(r.find("x")->end - r.find("x")->begin, 8u);
  EXPECT_EQ(r.floats(*r.find("x")), (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.0f}));
}

TEST(SafetensorsFile, ReadsAFileAsThePythonPackageLaysItOut) {
  // Tensors in the data out of name order, a scalar, F16/BF16/F64, and a header padded with spaces.
  const std::vector<std::uint16_t> f16 = {0x3c00, 0xc000};  // 1, -2
  const std::vector<std::uint16_t> bf16 = {0x3f80, 0x4040};  // 1, 3
  const std::vector<double> f64 = {0.1};
  const std::vector<float> f32 = {4.5f};
  std::string header =
      R"({"__metadata__":{"format":"pt"},"z.half":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
      R"("a.bf16":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]},)"
      R"("m.double":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},)"
      R"("s.scalar":{"dtype":"F32","shape":[],"data_offsets":[16,20]}})";
  header.append(8 - header.size() % 8, ' ');
  const std::string path = write_bytes("python.safetensors", file_of(header, raw(f16) + raw(bf16) + raw(f64) + raw(f32)));
  const SafetensorsReader r(path);
  ASSERT_EQ(r.tensors().size(), 4u);
  EXPECT_EQ(r.tensors().front().name, "z.half");  // data order
  EXPECT_EQ(r.floats(*r.find("z.half")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(r.floats(*r.find("a.bf16")), (std::vector<float>{1.0f, 3.0f}));
  EXPECT_EQ(r.floats(*r.find("m.double")), (std::vector<float>{0.1f}));
  EXPECT_EQ(r.find("s.scalar")->shape.size(), 0u);
  EXPECT_EQ(r.floats(*r.find("s.scalar")), (std::vector<float>{4.5f}));
}

TEST(SafetensorsFile, RefusesATruncatedFileNamingTheTensor) {
  const std::string good = two_tensors(DType::f32).bytes();
  const std::string path = write_bytes("truncated.safetensors", good.substr(0, good.size() - 3));
  const std::string m = refusal(path);
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("tensor head.cls.bias"), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesAFileShorterThanItsHeaderLength) {
  EXPECT_NE(refusal(write_bytes("tiny.safetensors", "abc")).find("too short"), std::string::npos);
  const std::string good = two_tensors(DType::f32).bytes();
  const std::string m = refusal(write_bytes("cut_header.safetensors", good.substr(0, 20)));
  EXPECT_NE(m.find("header length"), std::string::npos) << m;
  EXPECT_NE(m.find("runs past the end of the file"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesOverlappingTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const std::string m = refusal(write_bytes("overlap.safetensors", file_of(header, std::string(12, '\0'))));
  EXPECT_NE(m.find("tensor b (bytes 4..12) overlaps tensor a (bytes 0..8)"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesAGapBetweenTensors) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  const std::string m = refusal(write_bytes("gap.safetensors", file_of(header, std::string(20, '\0'))));
  EXPECT_NE(m.find("tensor b (bytes 12..20) leaves a gap of 4 bytes before it"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesBytesThatNoTensorHolds) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string m = refusal(write_bytes("tail.safetensors", file_of(header, std::string(12, '\0'))));
  EXPECT_NE(m.find("4 bytes after its last tensor (a)"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesAnUnknownDtype) {
  const std::string header = R"({"w":{"dtype":"F13","shape":[2],"data_offsets":[0,8]}})";
  const std::string path = write_bytes("dtype.safetensors", file_of(header, std::string(8, '\0')));
  const std::string m = refusal(path);
  EXPECT_NE(m.find(path + ": tensor w: unknown dtype 'F13'"), std::string::npos) << m;
}

// A name or dtype from the file holding a line break or another control character (JSON's \n, \t)
// is shown with it written as \xNN: the refusal stays one line (the safetensors fuzz target's oracle).
TEST(SafetensorsFile, ControlCharactersOfANameAreShownOnOneLine) {
  const std::string header = R"({"blocks.0\nw":{"dtype":"F\t13","shape":[1],"data_offsets":[0,4]}})";
  const std::string m = refusal(write_bytes("newline.safetensors", file_of(header, std::string(4, '\0'))));
  EXPECT_NE(m.find("tensor blocks.0\\x0aw: unknown dtype 'F\\x0913'"), std::string::npos) << m;
  EXPECT_EQ(avtrain::one_line(std::string("a\x7f\x01\xc3\xa9 b")), "a\\x7f\\x01\xc3\xa9 b");
}

TEST(SafetensorsFile, RefusesOffsetsThatDoNotFitTheShape) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  const std::string m = refusal(write_bytes("size.safetensors", file_of(header, std::string(8, '\0'))));
  EXPECT_NE(m.find("tensor w: its data_offsets [0,8] hold 8 bytes, its dtype F32 and shape [3] need 12"),
            std::string::npos) << m;
}

// A shape whose byte count wraps around 64 bits would pass for a small tensor (2^62 F32 elements are
// 0 bytes, 2^62 + 1 by 4 are 16) and then be read as a huge one.
TEST(SafetensorsFile, RefusesAShapeWhoseSizeDoesNotFit64Bits) {
  const std::string wraps_to_0 = R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  std::string m = refusal(write_bytes("wrap0.safetensors", file_of(wraps_to_0, "")));
  EXPECT_NE(m.find("tensor w: its dtype F32 and shape [4611686018427387904] need more than 2^64 bytes"),
            std::string::npos) << m;
  const std::string wraps_to_16 = R"({"w":{"dtype":"F32","shape":[4611686018427387905,4],"data_offsets":[0,16]}})";
  m = refusal(write_bytes("wrap16.safetensors", file_of(wraps_to_16, std::string(16, '\0'))));
  EXPECT_NE(m.find("need more than 2^64 bytes"), std::string::npos) << m;
  // A 0 anywhere in the shape: an empty tensor, however large the other sizes.
  const std::string empty = R"({"w":{"dtype":"F32","shape":[4611686018427387905,0,8],"data_offsets":[0,0]}})";
  const SafetensorsReader r(write_bytes("empty_huge.safetensors", file_of(empty, "")));
  EXPECT_TRUE(r.floats(*r.find("w")).empty());
}

TEST(SafetensorsFile, RefusesMalformedJson) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";  // a brace short
  const std::string path = write_bytes("json.safetensors", file_of(header, std::string(8, '\0')));
  const std::string m = refusal(path);
  EXPECT_NE(m.find(path + ": its header is not JSON"), std::string::npos) << m;
}

TEST(SafetensorsFile, RefusesToReadAnIntegerTensorAsWeights) {
  const std::string header = R"({"steps":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  const std::string m = refusal(write_bytes("int.safetensors", file_of(header, std::string(8, '\0'))), "steps");
  EXPECT_NE(m.find("tensor steps: dtype I64 is not a floating type"), std::string::npos) << m;
}
