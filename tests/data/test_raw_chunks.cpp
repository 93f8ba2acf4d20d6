// The raw-chunk read (H5Dread_chunk under the lock, the filters undone outside it) against HDF5's own
// H5Dread of the same rows: the same bytes, for every filter pipeline the shards use and a few they
// do not (which must fall back), int16 and float audio rows and uint8 video rows.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.hpp"
#include "data/raw_chunks.hpp"
#include "data/row_runs.hpp"
#include "data/shard_reader.hpp"
#include "data/synthetic.hpp"
#include "data/zstd_filter.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

enum class Pipeline { contiguous, chunked, deflate, shuffle_deflate, zstd, shuffle_zstd, fletcher_deflate };

const char* name_of(Pipeline p) {
  switch (p) {
    case Pipeline::contiguous: return "contiguous";
    case Pipeline::chunked: return "chunked";
    case Pipeline::deflate: return "deflate";
    case Pipeline::shuffle_deflate: return "shuffle+deflate";
    case Pipeline::zstd: return "zstd";
    case Pipeline::shuffle_zstd: return "shuffle+zstd";
    case Pipeline::fletcher_deflate: return "fletcher32+deflate";
  }
  return "?";
}

struct Case {
  hid_t file_type, mem_type;
  std::vector<hsize_t> dims;  // [N, ...]
};

// A dataset of `dims` with values of the type (floats in [-1, 1], noise with runs, so that the
// compressors have something to find), stored with the pipeline; rows 0..N-2 written, row N-1 never
// (its chunk unallocated: the fill value).
std::vector<unsigned char> make_dataset(hid_t file, const char* name, const Case& c, Pipeline p) {
  const int rank = static_cast<int>(c.dims.size());
  const H5Id space(H5Screate_simple(rank, c.dims.data(), nullptr), H5Sclose);
  const H5Id plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (p != Pipeline::contiguous) {
    std::vector<hsize_t> chunk(c.dims);
    chunk[0] = 1;
    H5Pset_chunk(plist.get(), rank, chunk.data());
  }
  const unsigned level = 3;
  switch (p) {
    case Pipeline::deflate: H5Pset_deflate(plist.get(), 4); break;
    case Pipeline::shuffle_deflate: H5Pset_shuffle(plist.get()); H5Pset_deflate(plist.get(), 4); break;
    case Pipeline::zstd: register_zstd_filter(); H5Pset_filter(plist.get(), kZstdFilter, H5Z_FLAG_MANDATORY, 1, &level); break;
    case Pipeline::shuffle_zstd:
      register_zstd_filter();
      H5Pset_shuffle(plist.get());
      H5Pset_filter(plist.get(), kZstdFilter, H5Z_FLAG_MANDATORY, 1, &level);
      break;
    case Pipeline::fletcher_deflate: H5Pset_fletcher32(plist.get()); H5Pset_deflate(plist.get(), 4); break;
    default: break;
  }
  const H5Id dataset(H5Dcreate2(file, name, c.file_type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Dclose);
  EXPECT_TRUE(dataset.valid());
  std::size_t row = H5Tget_size(c.mem_type);
  for (std::size_t d = 1; d < c.dims.size(); ++d) row *= c.dims[d];
  const std::size_t written = c.dims[0] - 1;
  std::vector<unsigned char> bytes(written * row);
  std::mt19937 rng(7);
  const std::size_t elements = bytes.size() / H5Tget_size(c.mem_type);
  for (std::size_t i = 0; i < elements; ++i) {
    const int v = static_cast<int>(rng() % 64) - 32 + static_cast<int>(i % 50);
    if (H5Tequal(c.mem_type, H5T_NATIVE_FLOAT) > 0) {
      const float f = static_cast<float>(v) / 128.0f;
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else if (H5Tget_size(c.mem_type) == 2) {
      const auto s = static_cast<std::int16_t>(v * 300);
      std::memcpy(bytes.data() + 2 * i, &s, 2);
    } else {
      bytes[i] = static_cast<unsigned char>(v);
    }
  }
  std::vector<hsize_t> count(c.dims);
  count[0] = written;
  const std::vector<hsize_t> start(c.dims.size(), 0);
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
  const H5Id memory(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
  EXPECT_GE(H5Dwrite(dataset.get(), c.mem_type, memory.get(), space.get(), H5P_DEFAULT, bytes.data()), 0);
  return bytes;
}

TEST(RawChunks, SameBytesAsH5DreadForEveryPipeline) {
  test::TempDir dir;
  const std::string path = dir / "raw.h5";
  const std::vector<Case> cases = {{H5T_STD_I16LE, H5T_NATIVE_INT16, {6, 999}},
                                   {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {6, 777}},
                                   {H5T_STD_U8LE, H5T_NATIVE_UINT8, {6, 3, 5, 7, 3}}};
  const std::vector<Pipeline> pipelines = {Pipeline::contiguous,   Pipeline::chunked, Pipeline::deflate,
                                           Pipeline::shuffle_deflate, Pipeline::zstd, Pipeline::shuffle_zstd,
                                           Pipeline::fletcher_deflate};
  const H5Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  int made = 0;
  for (const Case& c : cases) {
    for (const Pipeline p : pipelines) {
      char name_text[16];
      std::snprintf(name_text, sizeof name_text, "d%d", made++);  // not "d" + to_string: GCC 12's -Wrestrict false alarm
      const std::string name = name_text;
      SCOPED_TRACE(name + " " + name_of(p) + ", element " + std::to_string(H5Tget_size(c.mem_type)) + " bytes");
      const std::vector<unsigned char> written = make_dataset(file.get(), name.c_str(), c, p);
      const H5Id dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
      const RawRowPlan plan = plan_raw_rows(dataset.get(), c.file_type, c.mem_type, path, name.c_str());
      EXPECT_EQ(plan.raw, p != Pipeline::contiguous && p != Pipeline::fletcher_deflate);
      const std::vector<std::int64_t> rows = {0, 2, 3, 5};  // 5: never written, the fill value
      const std::size_t row_bytes = written.size() / (c.dims[0] - 1);
      std::vector<unsigned char> raw(rows.size() * row_bytes, 0xAB), reference(rows.size() * row_bytes, 0xCD);
      read_raw_rows(dataset.get(), c.mem_type, plan, rows, raw.data(), path, name.c_str());
      ASSERT_TRUE(read_row_runs(dataset.get(), c.mem_type, row_runs(rows), reference.data()));
      EXPECT_EQ(raw, reference);
      // and both are what was written
      for (std::size_t k = 0; k + 1 < rows.size(); ++k)
        EXPECT_EQ(0, std::memcmp(raw.data() + k * row_bytes, written.data() + rows[k] * row_bytes, row_bytes));
    }
  }
}

TEST(RawChunks, AChunkThatDoesNotDecodeIsRefused) {
  RawRowPlan plan;
  plan.raw = true;
  plan.filters = {ChunkFilter::shuffle, ChunkFilter::deflate};
  plan.element_bytes = 2;
  plan.row_bytes = 64;
  std::vector<unsigned char> garbage(40, 0x5A), out(64);
  EXPECT_FALSE(decode_chunk(plan, 0, garbage.data(), garbage.size(), out.data()));
  plan.filters = {ChunkFilter::zstd};
  EXPECT_FALSE(decode_chunk(plan, 0, garbage.data(), garbage.size(), out.data()));
  // every filter skipped (mask bits set): the chunk is the row as stored, and must be its size
  plan.filters = {ChunkFilter::shuffle, ChunkFilter::deflate};
  std::vector<unsigned char> row(64, 3);
  EXPECT_TRUE(decode_chunk(plan, 0b11, row.data(), row.size(), out.data()));
  EXPECT_EQ(out, row);
  EXPECT_FALSE(decode_chunk(plan, 0b11, garbage.data(), garbage.size(), out.data()));
}

// A filter this HDF5 has no plugin for: opening the shard names the file, the dataset and the filter.
size_t pass_through(unsigned, size_t, const unsigned[], size_t nbytes, size_t*, void**) { return nbytes; }

TEST(RawChunks, AMissingFilterPluginIsNamed) {
  test::TempDir dir;
  SynthOptions o;
  o.out_dir = dir.str();
  o.shards = 1;
  o.samples_per_shard = 2;
  o.audio_samples = 100;
  write_synthetic(o);
  const std::string shard = dir / "shard-00000.h5";
  constexpr H5Z_filter_t kMadeUp = 32099;
  {
    static const H5Z_class2_t made_up = {H5Z_CLASS_T_VERS, kMadeUp, 1, 1, "made-up", nullptr, nullptr, pass_through};
    ASSERT_GE(H5Zregister(&made_up), 0);
    const H5Id file(H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Ldelete(file.get(), "/label", H5P_DEFAULT), 0);
    const hsize_t n = 2;
    const H5Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    const H5Id plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(plist.get(), 1, &n);
    H5Pset_filter(plist.get(), kMadeUp, H5Z_FLAG_MANDATORY, 0, nullptr);
    const H5Id label(H5Dcreate2(file.get(), "/label", H5T_STD_I32LE, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Dclose);
    const std::int32_t values[2] = {0, 1};
    ASSERT_GE(H5Dwrite(label.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  }
  ASSERT_GE(H5Zunregister(kMadeUp), 0);
  try {
    ShardReader reader(shard);
    FAIL() << "opened a shard whose /label needs a filter this HDF5 lacks";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(shard + ": /label is stored with HDF5 filter 32099"), std::string::npos) << message;
    EXPECT_NE(message.find("plugin is missing"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace avtrain::data
