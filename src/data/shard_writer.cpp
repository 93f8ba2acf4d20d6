#include "data/shard_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"
#include "data/hdf5_file_format.hpp"
#include "data/label_sets.hpp"
#include "data/zstd_filter.hpp"

namespace avtrain::data {

namespace {

void write_attribute(hid_t file, const std::string& path, const char* name, hid_t file_type, hid_t mem_type,
                     const void* value) {
  const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const H5Id attribute(H5Acreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), mem_type, value) < 0) {
    throw Error(path + ": cannot write attribute " + name);
  }
}

void write_string_attribute(hid_t file, const std::string& path, const char* name, const std::string& value) {
  const H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), value.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  write_attribute(file, path, name, type.get(), type.get(), value.data());
}

H5Id variable_string_type() {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

void write_string_list_attribute(hid_t file, const std::string& path, const char* name,
                                 const std::vector<std::string>& values) {
  const hsize_t count = values.size();
  const H5Id space(H5Screate_simple(1, &count, nullptr), H5Sclose);
  const H5Id type = variable_string_type();
  std::vector<const char*> texts;
  for (const std::string& value : values) texts.push_back(value.c_str());
  const H5Id attribute(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), type.get(), texts.data()) < 0) {
    throw Error(path + ": cannot write attribute " + name);
  }
}

H5Id create_dataset(hid_t file, const std::string& path, const char* name, hid_t file_type,
                    const std::vector<hsize_t>& dims, const ShardLayout& layout) {
  std::vector<hsize_t> max_dims(dims);
  if (layout.growable) max_dims[0] = H5S_UNLIMITED;
  const H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data()), H5Sclose);
  const H5Id plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  record_no_times(plist.get());  // the same seed gives the same bytes
  if (layout.gzip || layout.growable) {
    std::vector<hsize_t> chunk(dims);
    // One sample per chunk; 1-D datasets in chunks of up to 65536 (4096 when growing).
    chunk[0] = dims.size() == 1 ? (layout.growable ? 4096 : std::max<hsize_t>(1, std::min<hsize_t>(dims[0], 65536))) : 1;
    H5Pset_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data());
    if (layout.gzip) {
      H5Pset_shuffle(plist.get());
      if (layout.zstd_level > 0) {
        register_zstd_filter();
        const auto level = static_cast<unsigned>(layout.zstd_level);
        H5Pset_filter(plist.get(), kZstdFilter, H5Z_FLAG_OPTIONAL, 1, &level);  // optional, as deflate: HDF5 refuses a mandatory filter on /source's strings
      } else {
        H5Pset_deflate(plist.get(), static_cast<unsigned>(layout.gzip_level));
      }
    }
  }
  H5Id dataset(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) throw Error(path + ": cannot create dataset " + std::string(name));
  return dataset;
}

void write_rows(const H5Id& dataset, const std::string& path, const char* name, hid_t mem_type,
                std::int64_t first_row, std::int64_t rows, const void* values) {
  const H5Id file_space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(file_space.get());
  std::vector<hsize_t> dims(rank), start(rank, 0);
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);
  start[0] = static_cast<hsize_t>(first_row);
  dims[0] = static_cast<hsize_t>(rows);
  H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, dims.data(), nullptr);
  const H5Id memory_space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
  if (H5Dwrite(dataset.get(), mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, values) < 0) {
    throw Error(path + ": cannot write " + name + " (disk full?)");
  }
}

void require_block_size(const std::string& path, const char* name, std::size_t found, std::size_t expected) {
  if (found != expected) {
    throw Error(path + ": the block of " + name + " holds " + std::to_string(found) + " values, expected " +
                std::to_string(expected));
  }
}

void require_in_range(const std::string& path, const char* name, std::int64_t first_row,
                      const std::vector<std::int32_t>& values, std::int32_t low, std::int32_t high) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] >= low && values[i] <= high) continue;
    throw Error(path + ": " + name + "[" + std::to_string(first_row + std::int64_t(i)) + "] = " +
                std::to_string(values[i]) + " is outside " + std::to_string(low) + ".." + std::to_string(high) +
                " (refused by the writer)");
  }
}

// The format's value rules (docs/shard-format.md) for one block, rows first_row..: lengths and
// labels in range, float audio finite and in [-1, 1]; an Error names the file, dataset and row.
void check_block(const ShardHeader& h, std::int64_t first_row, const SampleBlock& block) {
  const auto count = static_cast<std::size_t>(block.count);
  const auto audio_row = static_cast<std::size_t>(h.audio_samples);
  const std::size_t video_row = std::size_t(h.frames) * h.height * h.width * h.channels;
  require_block_size(h.path, "/audio", h.audio_int16 ? block.audio_pcm.size() : block.audio_float.size(), count * audio_row);
  require_block_size(h.path, "/audio_len", block.audio_len.size(), count);
  require_block_size(h.path, "/video", block.video.size(), count * video_row);
  require_block_size(h.path, "/video_len", block.video_len.size(), count);
  if (h.version >= 2) {
    require_block_size(h.path, "/labels", block.labels.size(), count * std::size_t(h.num_classes));
    check_label_sets(h.path, first_row, block.labels.data(), block.count, h.num_classes, " (refused by the writer)");
  } else {
    require_block_size(h.path, "/label", block.label.size(), count);
    require_in_range(h.path, "/label", first_row, block.label, 0, h.num_classes - 1);
  }
  require_in_range(h.path, "/audio_len", first_row, block.audio_len, 1,
                   static_cast<std::int32_t>(std::min<std::int64_t>(h.audio_samples, INT32_MAX)));
  require_in_range(h.path, "/video_len", first_row, block.video_len, 1, h.frames);
  if (h.audio_int16) return;
  for (std::size_t i = 0; i < block.audio_float.size(); ++i) {
    const float v = block.audio_float[i];
    if (std::isfinite(v) && v >= -1.0f && v <= 1.0f) continue;
    std::ostringstream message;
    message << h.path << ": /audio[" << first_row + std::int64_t(i / audio_row) << ", " << i % audio_row << "] = " << v
            << (std::isfinite(v) ? " is outside [-1, 1]" : " is not finite") << " (refused by the writer)";
    throw Error(message.str());
  }
}

}  // namespace

ShardWriter::ShardWriter(const ShardHeader& header, bool gzip) : ShardWriter(header, ShardLayout{gzip}) {}

ShardWriter::ShardWriter(const ShardHeader& header, const ShardLayout& layout)
    : header_(header), layout_(layout), temporary_path_(header.path + ".tmp") {
  silence_hdf5_error_printing();
  const std::string& p = temporary_path_;
  const H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose), fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (!fapl.valid() || !fcpl.valid() || !use_checksummed_metadata(fapl.get()) || !record_no_times(fcpl.get()))
    throw Error(p + ": cannot set up HDF5's file format");
  file_ = H5Id(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  if (!file_.valid()) throw Error(p + ": cannot create the file (is the directory writable?)");
  const hid_t file = file_.get();

  write_string_attribute(file, p, "avtrain_format", "av-shard");
  write_attribute(file, p, "version", H5T_STD_I32LE, H5T_NATIVE_INT, &header_.version);
  write_attribute(file, p, "sample_rate", H5T_STD_I32LE, H5T_NATIVE_INT, &header_.sample_rate);
  write_attribute(file, p, "fps", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &header_.fps);
  write_attribute(file, p, "num_classes", H5T_STD_I32LE, H5T_NATIVE_INT, &header_.num_classes);
  if (!header_.class_names.empty()) write_string_list_attribute(file, p, "class_names", header_.class_names);
  if (!header_.packed_with.empty()) write_string_attribute(file, p, "packed_with", header_.packed_with);

  const auto n = static_cast<hsize_t>(layout_.growable ? 0 : header_.samples);
  const ShardLayout& g = layout_;
  const hid_t audio_type = header_.audio_int16 ? H5T_STD_I16LE : H5T_IEEE_F32LE;
  audio_ = create_dataset(file, p, "/audio", audio_type, {n, static_cast<hsize_t>(header_.audio_samples)}, g);
  audio_len_ = create_dataset(file, p, "/audio_len", H5T_STD_I32LE, {n}, g);
  video_ = create_dataset(file, p, "/video", H5T_STD_U8LE,
                          {n, static_cast<hsize_t>(header_.frames), static_cast<hsize_t>(header_.height),
                           static_cast<hsize_t>(header_.width), static_cast<hsize_t>(header_.channels)},
                          g);
  video_len_ = create_dataset(file, p, "/video_len", H5T_STD_I32LE, {n}, g);
  if (header_.version >= 2) {
    label_ = create_dataset(file, p, "/labels", H5T_STD_U8LE, {n, static_cast<hsize_t>(header_.num_classes)}, g);
  } else {
    label_ = create_dataset(file, p, "/label", H5T_STD_I32LE, {n}, g);
  }
  if (layout_.sources) source_ = create_dataset(file, p, "/source", variable_string_type().get(), {n}, g);
}

ShardWriter::~ShardWriter() {
  if (committed_) return;
  close();
  std::error_code ec;
  std::filesystem::remove(temporary_path_, ec);
}

void ShardWriter::write(std::int64_t first_row, const SampleBlock& block) {
  const std::string& p = temporary_path_;
  const std::int64_t rows = block.count;
  if (first_row != written_rows_) {
    throw Error(header_.path + ": rows written out of order (row " + std::to_string(first_row) + " after " +
                std::to_string(written_rows_) + " rows): the digests need them in order");
  }
  check_block(header_, first_row, block);
  if (header_.audio_int16) {
    write_rows(audio_, p, "/audio", H5T_NATIVE_INT16, first_row, rows, block.audio_pcm.data());
  } else {
    write_rows(audio_, p, "/audio", H5T_NATIVE_FLOAT, first_row, rows, block.audio_float.data());
  }
  write_rows(audio_len_, p, "/audio_len", H5T_NATIVE_INT32, first_row, rows, block.audio_len.data());
  write_rows(video_, p, "/video", H5T_NATIVE_UINT8, first_row, rows, block.video.data());
  write_rows(video_len_, p, "/video_len", H5T_NATIVE_INT32, first_row, rows, block.video_len.data());
  if (header_.version >= 2) write_rows(label_, p, "/labels", H5T_NATIVE_UINT8, first_row, rows, block.labels.data());
  else write_rows(label_, p, "/label", H5T_NATIVE_INT32, first_row, rows, block.label.data());
  if (source_.valid()) {
    std::vector<const char*> texts;
    for (const std::string& text : block.source) texts.push_back(text.c_str());
    texts.resize(static_cast<std::size_t>(rows), "");
    write_rows(source_, p, "/source", variable_string_type().get(), first_row, rows, texts.data());
  }
  if (header_.audio_int16) digests_[digest_audio].add_values(block.audio_pcm.data(), block.audio_pcm.size());
  else digests_[digest_audio].add_values(block.audio_float.data(), block.audio_float.size());
  digests_[digest_audio_len].add_values(block.audio_len.data(), block.audio_len.size());
  digests_[digest_video].add_values(block.video.data(), block.video.size());
  digests_[digest_video_len].add_values(block.video_len.data(), block.video_len.size());
  if (header_.version >= 2) digests_[digest_label].add_values(block.labels.data(), block.labels.size());
  else digests_[digest_label].add_values(block.label.data(), block.label.size());
  written_rows_ += rows;
}

void ShardWriter::append(const SampleBlock& block) {
  require(layout_.growable, temporary_path_ + ": append() on a shard of fixed size");
  const auto grown = static_cast<hsize_t>(rows_ + block.count);
  for (H5Id* dataset : {&audio_, &audio_len_, &video_, &video_len_, &label_, &source_}) {
    if (!dataset->valid()) continue;
    const H5Id space(H5Dget_space(dataset->get()), H5Sclose);
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space.get())));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    dims[0] = grown;
    if (H5Dset_extent(dataset->get(), dims.data()) < 0) throw Error(temporary_path_ + ": cannot grow the datasets (disk full?)");
  }
  write(rows_, block);
  rows_ += block.count;
}

void ShardWriter::close() {
  for (H5Id* id : {&audio_, &audio_len_, &video_, &video_len_, &label_, &source_}) id->reset();
  file_.reset();
}

void ShardWriter::commit() {
  const std::int64_t expected = layout_.growable ? rows_ : header_.samples;
  if (written_rows_ != expected) {
    throw Error(header_.path + ": " + std::to_string(written_rows_) + " of its " + std::to_string(expected) +
                " rows written");
  }
  const std::string& p = temporary_path_;
  const std::int32_t checked = 1;
  write_attribute(file_.get(), p, "values_checked", H5T_STD_I32LE, H5T_NATIVE_INT32, &checked);
  write_string_attribute(file_.get(), p, "digest_algorithm", kDigestAlgorithm);
  for (std::size_t d = 0; d < kDigestedDatasets.size(); ++d) {
    const std::uint64_t digest = digests_[d].value();
    write_attribute(file_.get(), p, digest_attribute(digested_dataset(d, header_.version)).c_str(), H5T_STD_U64LE, H5T_NATIVE_UINT64,
                    &digest);
  }
  const bool flushed = H5Fflush(file_.get(), H5F_SCOPE_LOCAL) >= 0;
  close();
  if (!flushed) throw Error(temporary_path_ + ": cannot write the file (disk full?)");
  std::error_code ec;
  std::filesystem::rename(temporary_path_, header_.path, ec);
  if (ec) throw Error(header_.path + ": cannot rename " + temporary_path_ + " into place: " + ec.message());
  committed_ = true;
}

}  // namespace avtrain::data
