// The HDF5 targets' own mutation (libFuzzer's LLVMFuzzerCustomMutator; fuzz preset only), beside
// libFuzzer's byte mutations: one value of a file changed the way HDF5 stores it. avtrain writes its
// files in HDF5 1.8's format, whose metadata carries checksums (data/hdf5_file_format.hpp), so a byte
// mutation of a header or an attribute is refused by HDF5 before avtrain reads it; it almost never lands
// on a dataset's few values either, and never inside a compressed chunk. Yet what HDF5 opens can still be
// wrong, and that is what avtrain's own checks are for: a label past the class count, a length past the
// row, NaN audio, a piece's offset beyond its tensor, a fingerprint that is not JSON.
//
// So, three times in four, one HDF5 file of the input (hdf5_files_of, defined by the target) is written to
// a scratch folder (fuzz_input.hpp), opened with HDF5 for writing, and one value of one of its datasets or attributes,
// anywhere in the file, is overwritten through HDF5 (a compressed or checksummed chunk is rewritten as
// HDF5 writes it): a number with a value at an edge (0, ±1, the type's extremes, NaN, the infinities,
// just past ±1, or one of the file's own numbers, its dimensions and integer attributes, and their
// neighbours: a class count, a row length), a string with libFuzzer's byte mutation of its text. The file
// is closed before its bytes are taken back: HDF5 1.10 finishes the superblock of a file opened for
// writing (its checksum) only when it closes it.
#include "hdf5_value_mutator.hpp"

#include <hdf5.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "data/hdf5_describe.hpp"
#include "data/hdf5_id.hpp"
#include "fuzz_input.hpp"
#include "data/zstd_filter.hpp"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

namespace {

using avtrain::data::H5Id;

// Where a value lives: a dataset (attribute empty) or an attribute of an object.
struct Place {
  std::string object, attribute;
};

struct Survey {
  hid_t file = -1;
  std::vector<Place> places;
  std::vector<double> numbers;  // the file's own: dimensions and integer attribute values
};

herr_t note_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  auto& survey = *static_cast<Survey*>(data);
  char object_name[1024] = {0};
  H5Iget_name(object, object_name, sizeof object_name);
  survey.places.push_back({object_name, name});
  const H5Id attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  const H5Id type(attribute.valid() ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  const H5Id space(attribute.valid() ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (type.valid() && space.valid() && H5Tget_class(type.get()) == H5T_INTEGER &&
      H5Sget_simple_extent_npoints(space.get()) == 1) {
    long long value = 0;
    if (H5Aread(attribute.get(), H5T_NATIVE_LLONG, &value) >= 0) survey.numbers.push_back(double(value));
  }
  return 0;
}

herr_t note_object(hid_t file, const char* name, const H5O_info_t* info, void* data) {
  auto& survey = *static_cast<Survey*>(data);
  const H5Id object(H5Oopen(file, name, H5P_DEFAULT), H5Oclose);
  if (!object.valid()) return 0;
  if (info->type == H5O_TYPE_DATASET) {
    survey.places.push_back({name, ""});
    for (const hsize_t d : avtrain::data::dataset_dims(object.get())) survey.numbers.push_back(double(d));
  }
  H5Aiterate2(object.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, note_attribute, data);
  return 0;
}

double edge_value(bool floating, const std::vector<double>& numbers, std::minstd_rand& rng) {
  if (floating) {
    static const double values[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(), 0.0, -0.0, 1.0, -1.0,
                                    double(std::nextafter(1.0f, 2.0f)), double(std::nextafter(-1.0f, -2.0f)), 1e-45,
                                    3.4e38, 1e300, 65504.0};
    return values[rng() % std::size(values)];
  }
  if (!numbers.empty() && rng() % 2 == 0) return numbers[rng() % numbers.size()] + double(int(rng() % 3) - 1);
  static const double values[] = {0.0, 1.0, -1.0, 2.0, 255.0, 256.0, 65535.0, 65536.0, 2147483647.0, -2147483648.0,
                                  4294967295.0, 9.2233720368547748e18, -9.2233720368547758e18, 1.8446744073709552e19};
  return values[rng() % std::size(values)];
}

// libFuzzer's mutation of a string's text.
std::string mutated_text(const std::string& text) {
  std::vector<std::uint8_t> bytes(text.begin(), text.end());
  bytes.resize(text.size() * 2 + 16);
  const std::size_t size = LLVMFuzzerMutate(bytes.data(), text.size(), bytes.size());
  return std::string(bytes.begin(), bytes.begin() + std::ptrdiff_t(size));
}

// Overwrites one numeric element through write(values) after read(values), whole (an attribute is
// written whole).
bool change_number(hid_t type, hid_t space, const Survey& survey, std::minstd_rand& rng,
                   const std::function<herr_t(hid_t, void*)>& read, const std::function<herr_t(hid_t, const void*)>& write) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0 || n > (1 << 20)) return false;
  std::vector<double> values(static_cast<std::size_t>(n));
  if (read(H5T_NATIVE_DOUBLE, values.data()) < 0) return false;
  values[rng() % values.size()] = edge_value(H5Tget_class(type) == H5T_FLOAT, survey.numbers, rng);
  return write(H5T_NATIVE_DOUBLE, values.data()) >= 0;
}

bool change_attribute(const Survey& survey, const Place& place, std::minstd_rand& rng) {
  const H5Id object(H5Oopen(survey.file, place.object.c_str(), H5P_DEFAULT), H5Oclose);
  const H5Id attribute(object.valid() ? H5Aopen(object.get(), place.attribute.c_str(), H5P_DEFAULT) : -1, H5Aclose);
  const H5Id type(attribute.valid() ? H5Aget_type(attribute.get()) : -1, H5Tclose);
  const H5Id space(attribute.valid() ? H5Aget_space(attribute.get()) : -1, H5Sclose);
  if (!type.valid() || !space.valid()) return false;
  const H5T_class_t type_class = H5Tget_class(type.get());
  if (type_class == H5T_INTEGER || type_class == H5T_FLOAT) {
    return change_number(
        type.get(), space.get(), survey, rng, [&](hid_t t, void* v) { return H5Aread(attribute.get(), t, v); },
        [&](hid_t t, const void* v) { return H5Awrite(attribute.get(), t, v); });
  }
  if (type_class != H5T_STRING || H5Sget_simple_extent_npoints(space.get()) != 1) return false;
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    if (H5Aread(attribute.get(), type.get(), &text) < 0) return false;
    const std::string changed = mutated_text(text != nullptr ? text : "");
    H5free_memory(text);
    const char* written = changed.c_str();  // a C string: cut at a zero byte the mutation put in
    return H5Awrite(attribute.get(), type.get(), &written) >= 0;
  }
  std::string text(H5Tget_size(type.get()), '\0');
  if (H5Aread(attribute.get(), type.get(), text.data()) < 0) return false;
  std::string changed = mutated_text(text);
  changed.resize(text.size(), '\0');
  return H5Awrite(attribute.get(), type.get(), changed.data()) >= 0;
}

bool change_dataset_element(const Survey& survey, const Place& place, std::minstd_rand& rng) {
  const H5Id dataset(H5Dopen2(survey.file, place.object.c_str(), H5P_DEFAULT), H5Dclose);
  const H5Id type(dataset.valid() ? H5Dget_type(dataset.get()) : -1, H5Tclose);
  const H5Id file_space(dataset.valid() ? H5Dget_space(dataset.get()) : -1, H5Sclose);
  if (!type.valid() || !file_space.valid()) return false;
  const H5T_class_t type_class = H5Tget_class(type.get());
  if (type_class != H5T_INTEGER && type_class != H5T_FLOAT) return false;
  const std::vector<hsize_t> dims = avtrain::data::dataset_dims(dataset.get());
  std::vector<hsize_t> at(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) return false;
    at[d] = hsize_t(rng()) % dims[d];
  }
  if (!at.empty() && H5Sselect_elements(file_space.get(), H5S_SELECT_SET, 1, at.data()) < 0) return false;
  const hsize_t one = 1;
  const H5Id memory_space(H5Screate_simple(1, &one, nullptr), H5Sclose);
  const double value = edge_value(type_class == H5T_FLOAT, survey.numbers, rng);
  // HDF5's conversion clips a value outside the dataset's type (256 to a uint8 dataset: 255).
  return H5Dwrite(dataset.get(), H5T_NATIVE_DOUBLE, at.empty() ? H5S_ALL : memory_space.get(),
                  at.empty() ? H5S_ALL : file_space.get(), H5P_DEFAULT, &value) >= 0;
}

// Overwrites one value of the HDF5 file at `path`; false when HDF5 does not open it or refuses the write.
bool change_one_value(const std::string& path, std::minstd_rand& rng) {
  const H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return false;
  Survey survey;
  survey.file = file.get();
  // Every object from the root ("."), its datasets and its attributes.
  if (H5Ovisit2(file.get(), H5_INDEX_NAME, H5_ITER_NATIVE, note_object, &survey, H5O_INFO_BASIC) < 0) return false;
  if (survey.places.empty()) return false;
  const Place& place = survey.places[rng() % survey.places.size()];
  return place.attribute.empty() ? change_dataset_element(survey, place, rng) : change_attribute(survey, place, rng);
}

}  // namespace

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size, std::size_t max_size,
                                               unsigned int seed) {
  std::minstd_rand rng(seed);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> files = avtrain::fuzz::hdf5_files_of(input);
  if (rng() % 4 != 0 && !files.empty()) {
    const std::string_view file = files[rng() % files.size()];
    static const char kSignature[] = "\x89HDF\r\n\x1a\n";
    if (file.size() >= 8 && std::memcmp(file.data(), kSignature, 8) == 0) {
      avtrain::data::silence_hdf5_error_printing();
      avtrain::data::register_zstd_filter();
      const avtrain::fuzz::Scratch scratch;
      const std::string path = scratch.write("mutation.h5", file);
      if (change_one_value(path, rng)) {
        std::ifstream in(path, std::ios::binary);
        const std::string changed{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        const std::size_t at = std::size_t(file.data() - input.data());
        std::string out = std::string(input.substr(0, at)) + changed + std::string(input.substr(at + file.size()));
        if (out.size() <= max_size) {
          std::memcpy(data, out.data(), out.size());
          return out.size();
        }
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
