#include "data/shard_reader.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "core/error.hpp"
#include "core/one_line.hpp"
#include "data/label_sets.hpp"
#include "data/row_runs.hpp"
#include "data/value_digest.hpp"

namespace avtrain::data {

namespace {

constexpr const char* kFormatName = "av-shard";
constexpr long long kFormatVersions[] = {1, 2};  // 2: /labels, a set of classes a sample
// More classes than any dataset has (ImageNet-21k: 21,841) by far. Opening a set allocates per class
// (the class histogram), so a damaged count must not reach that: found by the shard fuzz target.
constexpr int kMaxClasses = 1 << 20;
constexpr std::size_t kCheckBlockBytes = std::size_t{8} << 20;  // one value-check read holds at most this much

H5Id open_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": no such file");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 == 0) throw Error(path + ": not an HDF5 file");
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (is_hdf5 < 0 || !file.valid()) throw Error(path + ": cannot open as HDF5 (the file is truncated or corrupt)");
  return file;
}

bool is_integer(hid_t type, std::size_t bytes, H5T_sign_t sign) {
  return H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == bytes && H5Tget_sign(type) == sign;
}

// ---- attributes -------------------------------------------------------------------------------

H5Id open_attribute(hid_t file, const std::string& path, const char* name) {
  if (H5Aexists(file, name) <= 0) throw Error(path + ": attribute " + name + " is missing");
  H5Id attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) throw Error(path + ": attribute " + name + " cannot be read");
  const H5Id space(H5Aget_space(attribute.get()), H5Sclose);
  const hssize_t values = H5Sget_simple_extent_npoints(space.get());
  if (values != 1) {
    throw Error(path + ": attribute " + name + " must hold one value, holds " + std::to_string(values));
  }
  return attribute;
}

H5Id type_of_attribute(const H5Id& attribute) { return H5Id(H5Aget_type(attribute.get()), H5Tclose); }

std::string read_string_attribute(hid_t file, const std::string& path, const char* name) {
  const H5Id attribute = open_attribute(file, path, name);
  const H5Id type = type_of_attribute(attribute);
  if (H5Tget_class(type.get()) != H5T_STRING) {
    throw Error(path + ": attribute " + name + " must be a string, is " + type_name(type.get()));
  }
  const auto unreadable = [&] { return Error(path + ": attribute " + name + " cannot be read"); };
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    if (H5Aread(attribute.get(), type.get(), &text) < 0) throw unreadable();
    std::string value = text != nullptr ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string value(H5Tget_size(type.get()), '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0) throw unreadable();
  value.resize(std::strlen(value.c_str()));
  while (!value.empty() && value.back() == ' ') value.pop_back();  // space-padded strings
  return value;
}

// A one-dimensional array of strings (variable or fixed length), e.g. class_names.
std::vector<std::string> read_string_list_attribute(hid_t file, const std::string& path, const char* name) {
  H5Id attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) throw Error(path + ": attribute " + name + " cannot be read");
  const H5Id type = type_of_attribute(attribute);
  const H5Id space(H5Aget_space(attribute.get()), H5Sclose);
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  if (H5Tget_class(type.get()) != H5T_STRING || count < 0 || H5Sget_simple_extent_ndims(space.get()) > 1) {
    throw Error(path + ": attribute " + name + " must be a one-dimensional array of strings");
  }
  std::vector<std::string> values;
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> texts(static_cast<std::size_t>(count), nullptr);
    if (H5Aread(attribute.get(), type.get(), texts.data()) < 0) throw Error(path + ": attribute " + name + " cannot be read");
    for (char* text : texts) {
      values.emplace_back(text != nullptr ? text : "");
      H5free_memory(text);
    }
    return values;
  }
  const std::size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(size * static_cast<std::size_t>(count) + 1, '\0');
  if (H5Aread(attribute.get(), type.get(), buffer.data()) < 0) throw Error(path + ": attribute " + name + " cannot be read");
  for (hssize_t i = 0; i < count; ++i) {
    std::string value(buffer.data() + std::size_t(i) * size, size);
    value.resize(std::strlen(value.c_str()));
    values.push_back(value);
  }
  return values;
}

long long read_integer_attribute(hid_t file, const std::string& path, const char* name) {
  const H5Id attribute = open_attribute(file, path, name);
  const H5Id type = type_of_attribute(attribute);
  if (H5Tget_class(type.get()) != H5T_INTEGER) {
    throw Error(path + ": attribute " + name + " must be an integer, is " + type_name(type.get()));
  }
  long long value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_LLONG, &value) < 0) throw Error(path + ": attribute " + name + " cannot be read");
  return value;
}

double read_number_attribute(hid_t file, const std::string& path, const char* name) {
  const H5Id attribute = open_attribute(file, path, name);
  const H5Id type = type_of_attribute(attribute);
  const H5T_class_t type_class = H5Tget_class(type.get());
  if (type_class != H5T_INTEGER && type_class != H5T_FLOAT) {
    throw Error(path + ": attribute " + name + " must be a number, is " + type_name(type.get()));
  }
  double value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0) throw Error(path + ": attribute " + name + " cannot be read");
  return value;
}

// values_checked = 1, digest_algorithm and one digest_* per dataset (value_digest.hpp): all or none.
std::optional<ShardDigests> read_digests(hid_t file, const std::string& path, int version) {
  std::vector<std::string> names{"values_checked", "digest_algorithm"};
  for (std::size_t d = 0; d < kDigestedDatasets.size(); ++d) names.push_back(digest_attribute(digested_dataset(d, version)));
  std::size_t present = 0;
  for (const std::string& name : names) present += H5Aexists(file, name.c_str()) > 0;
  if (present == 0) return std::nullopt;
  for (const std::string& name : names) {
    if (H5Aexists(file, name.c_str()) <= 0) {
      throw Error(path + ": attribute " + name + " is missing (values_checked, digest_algorithm and the digest_* " +
                  "attributes go together)");
    }
  }
  const long long checked = read_integer_attribute(file, path, "values_checked");
  if (checked != 1) throw Error(path + ": attribute values_checked = " + std::to_string(checked) + ", expected 1");
  const std::string algorithm = read_string_attribute(file, path, "digest_algorithm");
  if (algorithm != kDigestAlgorithm) {
    throw Error(path + ": attribute digest_algorithm = \"" + one_line(algorithm) + "\", this reader knows " + kDigestAlgorithm +
                " only");
  }
  ShardDigests digests{};
  for (std::size_t d = 0; d < kDigestedDatasets.size(); ++d) {
    const std::string name = digest_attribute(digested_dataset(d, version));
    const H5Id attribute = open_attribute(file, path, name.c_str());
    const H5Id type = type_of_attribute(attribute);
    if (!is_integer(type.get(), 8, H5T_SGN_NONE) ||
        H5Aread(attribute.get(), H5T_NATIVE_UINT64, &digests[d]) < 0) {
      throw Error(path + ": attribute " + name + " must be a 64-bit unsigned integer, is " + type_name(type.get()));
    }
  }
  return digests;
}

int positive_int_attribute(hid_t file, const std::string& path, const char* name) {
  const long long value = read_integer_attribute(file, path, name);
  if (value < 1 || value > INT_MAX) {
    throw Error(path + ": attribute " + name + " = " + std::to_string(value) + " must be a positive integer");
  }
  return static_cast<int>(value);
}

// ---- datasets ---------------------------------------------------------------------------------

H5Id open_dataset(hid_t file, const std::string& path, const char* name) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) throw Error(path + ": dataset " + name + " is missing");
  H5Id dataset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid()) throw Error(path + ": " + name + " is not a dataset");
  return dataset;
}

bool is_float32(hid_t type) { return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4; }

void require_type(const H5Id& dataset, const std::string& path, const char* name, bool ok_int16_or_float32,
                  std::size_t bytes, H5T_sign_t sign, const char* expected) {
  const H5Id type(H5Dget_type(dataset.get()), H5Tclose);
  const bool ok = ok_int16_or_float32 ? (is_integer(type.get(), 2, H5T_SGN_2) || is_float32(type.get()))
                                      : is_integer(type.get(), bytes, sign);
  if (!ok) throw Error(path + ": " + name + " has type " + type_name(type.get()) + ", expected " + expected);
}

std::vector<hsize_t> require_rank(const H5Id& dataset, const std::string& path, const char* name, int rank,
                                  const char* shape) {
  const H5Id space(H5Dget_space(dataset.get()), H5Sclose);
  const H5S_class_t space_class = H5Sget_simple_extent_type(space.get());
  const int found = space_class == H5S_SIMPLE ? H5Sget_simple_extent_ndims(space.get()) : 0;
  if (found != rank) {
    throw Error(path + ": " + name + " has rank " + std::to_string(found) + ", expected " + std::to_string(rank) +
                " " + shape);
  }
  return dataset_dims(dataset.get());
}

void require_samples(const std::string& path, const char* name, hsize_t found, hsize_t samples) {
  if (found != samples) {
    throw Error(path + ": " + name + " holds " + std::to_string(found) + " samples but /audio holds " +
                std::to_string(samples));
  }
}

int require_extent(const std::string& path, const char* name, const char* what, hsize_t extent) {
  if (extent < 1 || extent > static_cast<hsize_t>(INT_MAX)) {
    throw Error(path + ": " + name + " has " + std::to_string(extent) + " " + what + ", expected at least 1");
  }
  return static_cast<int>(extent);
}

// Calls check(first_row, values, rows) for consecutive blocks of rows of a dataset.
template <typename T, typename Check>
void stream_rows(const H5Id& dataset, hid_t mem_type, std::int64_t samples, std::size_t row_elements,
                 const std::string& path, const char* name, Check&& check) {
  const auto block_rows = static_cast<std::int64_t>(std::max<std::size_t>(1, kCheckBlockBytes / (row_elements * sizeof(T))));
  std::vector<T> values(static_cast<std::size_t>(std::min(block_rows, samples)) * row_elements);
  for (std::int64_t first = 0; first < samples; first += block_rows) {
    const std::int64_t rows = std::min(block_rows, samples - first);
    const std::vector<RowRun> run{{static_cast<hsize_t>(first), static_cast<hsize_t>(rows)}};
    if (!read_row_runs(dataset.get(), mem_type, run, values.data())) {
      throw Error(path + ": " + name + " cannot be read (the file is truncated or corrupt)");
    }
    check(first, values.data(), rows);
  }
}

// digest (may be null) gets the values in row order.
void check_range(const H5Id& dataset, const std::string& path, const char* name, std::int64_t samples,
                 std::int32_t low, std::int32_t high, std::vector<std::int64_t>* histogram, ValueDigest* digest) {
  stream_rows<std::int32_t>(dataset, H5T_NATIVE_INT32, samples, 1, path, name,
                            [&](std::int64_t first, const std::int32_t* values, std::int64_t rows) {
                              if (digest != nullptr) digest->add_values(values, static_cast<std::size_t>(rows));
                              for (std::int64_t i = 0; i < rows; ++i) {
                                const std::int32_t v = values[i];
                                if (v < low || v > high) {
                                  throw Error(path + ": " + name + "[" + std::to_string(first + i) + "] = " +
                                              std::to_string(v) + " is outside " + std::to_string(low) + ".." +
                                              std::to_string(high));
                                }
                                if (histogram != nullptr) ++(*histogram)[static_cast<std::size_t>(v)];
                              }
                            });
}

// Float audio of `count` rows (row_of(k): the file row of the k-th), each `row` values: finite and
// in [-1, 1], or an Error naming the file, the row and the element.
template <class RowOf>
void check_audio_values(const float* values, std::int64_t count, std::size_t row, const std::string& path,
                        RowOf row_of) {
  for (std::size_t i = 0; i < static_cast<std::size_t>(count) * row; ++i) {
    const float v = values[i];
    if (std::isfinite(v) && v >= -1.0f && v <= 1.0f) continue;
    std::ostringstream message;
    message << path << ": /audio[" << row_of(static_cast<std::int64_t>(i / row)) << ", " << i % row << "] = " << v
            << (std::isfinite(v) ? " is outside [-1, 1]" : " is not finite");
    throw Error(message.str());
  }
}

void check_float_audio(const H5Id& dataset, const std::string& path, std::int64_t samples, std::int64_t audio_samples,
                       ValueDigest* digest) {
  const auto row = static_cast<std::size_t>(audio_samples);
  stream_rows<float>(dataset, H5T_NATIVE_FLOAT, samples, row, path, "/audio",
                     [&](std::int64_t first, const float* values, std::int64_t rows) {
                       check_audio_values(values, rows, row, path, [&](std::int64_t k) { return first + k; });
                       if (digest != nullptr) digest->add_values(values, static_cast<std::size_t>(rows) * row);
                     });
}

// The digest of a dataset whose values need no check (int16 audio, uint8 video), read whole.
template <typename T>
void digest_rows(const H5Id& dataset, hid_t mem_type, std::int64_t samples, std::size_t row_elements,
                 const std::string& path, const char* name, ValueDigest& digest) {
  stream_rows<T>(dataset, mem_type, samples, row_elements, path, name, [&](std::int64_t, const T* values, std::int64_t rows) {
    digest.add_values(values, static_cast<std::size_t>(rows) * row_elements);
  });
}

// Throws Error naming the file and the dataset when what was read does not hash to the recorded digest.
void require_digest(const ShardHeader& h, std::size_t dataset, const ValueDigest& read) {
  const std::uint64_t recorded = (*h.digests)[dataset], found = read.value();
  if (recorded == found) return;
  throw Error(h.path + ": " + digested_dataset(dataset, h.version) + " does not match its digest (" + kDigestAlgorithm + " " +
              hex_digest(recorded) + " recorded by the writer, " + hex_digest(found) +
              " read): a value was changed after the shard was written");
}

}  // namespace

ShardReader::ShardReader(std::string path) {
  silence_hdf5_error_printing();
  header_.path = std::move(path);
  const std::string& p = header_.path;
  file_ = open_file(p);
  const hid_t file = file_.get();

  const std::string format = read_string_attribute(file, p, "avtrain_format");
  if (format != kFormatName) {
    throw Error(p + ": attribute avtrain_format = \"" + one_line(format) + "\", expected \"" + kFormatName + "\"");
  }
  const long long version = read_integer_attribute(file, p, "version");
  if (std::find(std::begin(kFormatVersions), std::end(kFormatVersions), version) == std::end(kFormatVersions)) {
    throw Error(p + ": attribute version = " + std::to_string(version) + ", this reader knows versions 1 and 2");
  }
  header_.version = static_cast<int>(version);
  header_.sample_rate = positive_int_attribute(file, p, "sample_rate");
  header_.num_classes = positive_int_attribute(file, p, "num_classes");
  if (header_.num_classes > kMaxClasses) {
    throw Error(p + ": attribute num_classes = " + std::to_string(header_.num_classes) + " is more than " +
                std::to_string(kMaxClasses) + " classes (a damaged header?)");
  }
  header_.fps = read_number_attribute(file, p, "fps");
  if (!std::isfinite(header_.fps) || header_.fps <= 0) {
    std::ostringstream message;
    message << p << ": attribute fps = " << header_.fps << " must be a positive number";
    throw Error(message.str());
  }

  if (H5Aexists(file, "class_names") > 0) {
    header_.class_names = read_string_list_attribute(file, p, "class_names");
    if (static_cast<int>(header_.class_names.size()) != header_.num_classes) {
      throw Error(p + ": attribute class_names holds " + std::to_string(header_.class_names.size()) +
                  " names, num_classes = " + std::to_string(header_.num_classes));
    }
    std::vector<std::string> sorted = header_.class_names;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i].empty()) throw Error(p + ": attribute class_names holds an empty name");
      if (i > 0 && sorted[i] == sorted[i - 1]) throw Error(p + ": attribute class_names holds \"" + one_line(sorted[i]) + "\" twice");
    }
  }
  if (H5Aexists(file, "packed_with") > 0) header_.packed_with = read_string_attribute(file, p, "packed_with");
  header_.digests = read_digests(file, p, header_.version);

  audio_ = open_dataset(file, p, "/audio");
  audio_len_ = open_dataset(file, p, "/audio_len");
  video_ = open_dataset(file, p, "/video");
  video_len_ = open_dataset(file, p, "/video_len");
  const bool sets = header_.version >= 2;
  const char* label_name = sets ? "/labels" : "/label";
  label_ = open_dataset(file, p, label_name);

  require_type(audio_, p, "/audio", true, 0, H5T_SGN_2, "int16 or float32");
  require_type(audio_len_, p, "/audio_len", false, 4, H5T_SGN_2, "int32");
  require_type(video_, p, "/video", false, 1, H5T_SGN_NONE, "uint8");
  require_type(video_len_, p, "/video_len", false, 4, H5T_SGN_2, "int32");
  if (sets) require_type(label_, p, "/labels", false, 1, H5T_SGN_NONE, "uint8");
  else require_type(label_, p, "/label", false, 4, H5T_SGN_2, "int32");
  {
    const H5Id audio_type(H5Dget_type(audio_.get()), H5Tclose);
    header_.audio_int16 = H5Tget_class(audio_type.get()) == H5T_INTEGER;
  }

  const std::vector<hsize_t> audio = require_rank(audio_, p, "/audio", 2, "[N, A]");
  const std::vector<hsize_t> video = require_rank(video_, p, "/video", 5, "[N, F, H, W, C]");
  const hsize_t samples = audio[0];
  if (samples == 0) throw Error(p + ": /audio holds no samples");
  require_samples(p, "/audio_len", require_rank(audio_len_, p, "/audio_len", 1, "[N]")[0], samples);
  require_samples(p, "/video", video[0], samples);
  require_samples(p, "/video_len", require_rank(video_len_, p, "/video_len", 1, "[N]")[0], samples);
  if (sets) {
    const std::vector<hsize_t> labels = require_rank(label_, p, "/labels", 2, "[N, num_classes]");
    require_samples(p, "/labels", labels[0], samples);
    if (labels[1] != static_cast<hsize_t>(header_.num_classes)) {
      throw Error(p + ": /labels has " + std::to_string(labels[1]) + " columns, num_classes = " +
                  std::to_string(header_.num_classes));
    }
  } else {
    require_samples(p, "/label", require_rank(label_, p, "/label", 1, "[N]")[0], samples);
  }

  header_.samples = static_cast<std::int64_t>(samples);
  header_.audio_samples = require_extent(p, "/audio", "audio samples per row (A)", audio[1]);
  header_.frames = require_extent(p, "/video", "frames (F)", video[1]);
  header_.height = require_extent(p, "/video", "rows (H)", video[2]);
  header_.width = require_extent(p, "/video", "columns (W)", video[3]);
  header_.channels = static_cast<int>(std::min<hsize_t>(video[4], INT_MAX));
  if (header_.channels != 1 && header_.channels != 3) {
    throw Error(p + ": /video has " + std::to_string(video[4]) + " channels (C), expected 1 or 3");
  }
  // How read_rows reads: every filter available (a missing plugin named), the big datasets' chunks raw.
  for (const auto& [dataset, name] : {std::pair{&audio_len_, "/audio_len"}, {&video_len_, "/video_len"}, {&label_, label_name}})
    require_filters_available(dataset->get(), p, name);
  audio_plan_ = plan_raw_rows(audio_.get(), header_.audio_int16 ? H5T_STD_I16LE : H5T_IEEE_F32LE,
                              header_.audio_int16 ? H5T_NATIVE_INT16 : H5T_NATIVE_FLOAT, p, "/audio");
  video_plan_ = plan_raw_rows(video_.get(), H5T_STD_U8LE, H5T_NATIVE_UINT8, p, "/video");
}

std::vector<DatasetLayout> ShardReader::layouts() const {
  return {describe_dataset(audio_.get(), "/audio"), describe_dataset(audio_len_.get(), "/audio_len"),
          describe_dataset(video_.get(), "/video"), describe_dataset(video_len_.get(), "/video_len"),
          describe_dataset(label_.get(), header_.version >= 2 ? "/labels" : "/label")};
}

std::vector<std::int64_t> ShardReader::check_values(bool sampled) const {
  silence_hdf5_error_printing();
  const ShardHeader& h = header_;
  // The digests are recomputed of what is read whole: the lengths and labels always (a few bytes a
  // sample), the audio and video by the full check alone.
  std::optional<std::array<ValueDigest, kDigestedDatasets.size()>> read;
  if (h.digests) read.emplace();
  const auto digest = [&](std::size_t d) { return read ? &(*read)[d] : nullptr; };
  const auto max_audio_len = static_cast<std::int32_t>(std::min<std::int64_t>(h.audio_samples, INT32_MAX));
  check_range(audio_len_, h.path, "/audio_len", h.samples, 1, max_audio_len, nullptr, digest(digest_audio_len));
  check_range(video_len_, h.path, "/video_len", h.samples, 1, h.frames, nullptr, digest(digest_video_len));
  std::vector<std::int64_t> histogram(static_cast<std::size_t>(h.num_classes), 0);
  if (h.version >= 2) {
    stream_rows<std::uint8_t>(label_, H5T_NATIVE_UINT8, h.samples, std::size_t(h.num_classes), h.path, "/labels",
                              [&](std::int64_t first, const std::uint8_t* values, std::int64_t rows) {
                                if (digest(digest_label) != nullptr)
                                  digest(digest_label)->add_values(values, std::size_t(rows) * std::size_t(h.num_classes));
                                check_label_sets(h.path, first, values, rows, h.num_classes, "", &histogram);
                              });
  } else {
    check_range(label_, h.path, "/label", h.samples, 0, h.num_classes - 1, &histogram, digest(digest_label));
  }
  if (read) {
    for (const std::size_t d : {digest_audio_len, digest_video_len, digest_label}) require_digest(h, d, (*read)[d]);
  }
  if (!sampled) {
    const auto audio_row = static_cast<std::size_t>(h.audio_samples);
    if (!h.audio_int16) {
      check_float_audio(audio_, h.path, h.samples, h.audio_samples, digest(digest_audio));
    } else if (read) {
      digest_rows<std::int16_t>(audio_, H5T_NATIVE_INT16, h.samples, audio_row, h.path, "/audio", (*read)[digest_audio]);
    }
    if (read) {
      require_digest(h, digest_audio, (*read)[digest_audio]);
      const std::size_t video_row = std::size_t(h.frames) * h.height * h.width * h.channels;
      digest_rows<std::uint8_t>(video_, H5T_NATIVE_UINT8, h.samples, video_row, h.path, "/video", (*read)[digest_video]);
      require_digest(h, digest_video, (*read)[digest_video]);
    }
  } else if (!h.audio_int16) {
    const std::vector<std::int64_t> rows = sampled_rows();
    std::vector<float> audio(rows.size() * static_cast<std::size_t>(h.audio_samples));
    {
      const std::lock_guard lock(hdf5_mutex());
      if (!read_row_runs(audio_.get(), H5T_NATIVE_FLOAT, row_runs(rows), audio.data()))
        throw Error(h.path + ": /audio cannot be read (the file is truncated or corrupt)");
    }
    check_audio_values(audio.data(), std::int64_t(rows.size()), static_cast<std::size_t>(h.audio_samples), h.path,
                       [&](std::int64_t k) { return rows[static_cast<std::size_t>(k)]; });
  }
  return histogram;
}

std::vector<std::int64_t> ShardReader::sampled_rows() const {
  const std::int64_t n = header_.samples;
  // A shard whose writer checked every value (values_checked): one row, the middle one.
  if (header_.digests) return {n / 2};
  std::vector<std::int64_t> rows;
  for (int k = 0; k <= 5; ++k) rows.push_back(n <= 1 ? 0 : (n - 1) * k / 5);
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

ShardRows ShardReader::read_rows(const std::vector<std::int64_t>& rows, Fields fields) const {
  silence_hdf5_error_printing();
  const ShardHeader& h = header_;
  const std::vector<RowRun> runs = row_runs(rows);
  const auto count = static_cast<std::size_t>(rows.size());
  const auto audio_row = static_cast<std::size_t>(h.audio_samples);
  const auto video_row = static_cast<std::size_t>(h.frames) * h.height * h.width * h.channels;
  const auto read = [&](const H5Id& dataset, hid_t mem_type, void* buffer, const char* name) {
    const TimedHdf5Lock lock;
    if (!read_row_runs(dataset.get(), mem_type, runs, buffer)) {
      throw Error(h.path + ": " + name + " cannot be read (the file is truncated or corrupt)");
    }
  };

  ShardRows out;
  out.count = static_cast<std::int64_t>(count);
  if (h.version >= 2) {
    out.labels.resize(count * std::size_t(h.num_classes));
    read(label_, H5T_NATIVE_UINT8, out.labels.data(), "/labels");
    out.label = first_classes(out.labels.data(), out.count, h.num_classes);
  } else {
    out.label.resize(count);
    read(label_, H5T_NATIVE_INT32, out.label.data(), "/label");
  }
  if (fields == Fields::labels) return out;
  out.audio.resize(count * audio_row);
  if (h.audio_int16) {
    std::vector<std::int16_t> pcm(count * audio_row);
    read_raw_rows(audio_.get(), H5T_NATIVE_INT16, audio_plan_, rows, pcm.data(), h.path, "/audio");
    std::transform(pcm.begin(), pcm.end(), out.audio.begin(), [](std::int16_t s) { return static_cast<float>(s) / 32768.0f; });
  } else {
    read_raw_rows(audio_.get(), H5T_NATIVE_FLOAT, audio_plan_, rows, out.audio.data(), h.path, "/audio");
    check_audio_values(out.audio.data(), out.count, audio_row, h.path,
                       [&](std::int64_t k) { return rows[static_cast<std::size_t>(k)]; });
  }
  out.audio_len.resize(count);
  read(audio_len_, H5T_NATIVE_INT32, out.audio_len.data(), "/audio_len");
  out.video.resize(count * video_row);
  read_raw_rows(video_.get(), H5T_NATIVE_UINT8, video_plan_, rows, out.video.data(), h.path, "/video");
  out.video_len.resize(count);
  read(video_len_, H5T_NATIVE_INT32, out.video_len.data(), "/video_len");
  return out;
}

}  // namespace avtrain::data
