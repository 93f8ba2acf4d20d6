#pragma once
// Test helpers that damage a valid shard with the HDF5 C API, one rule of the format at a time,
// and read whole datasets back as references.
#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/hdf5_id.hpp"

namespace avtrain::test {

using data::H5Id;

inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("test helper: " + what);
}

class ShardEdit {
 public:
  explicit ShardEdit(const std::string& path) : file_(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose) {
    check(file_.valid(), "cannot open " + path);
  }

  void remove(const std::string& object) { check(H5Ldelete(file_.get(), object.c_str(), H5P_DEFAULT) >= 0, "delete " + object); }

  // Replaces a dataset by a zero-filled one of another type or shape.
  void replace(const std::string& name, hid_t type, const std::vector<hsize_t>& dims) {
    remove(name);
    const H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    const H5Id dataset(H5Dcreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
    check(dataset.valid(), "create " + name);
    hsize_t elements = 1;
    for (const hsize_t d : dims) elements *= d;
    if (elements == 0) return;
    std::vector<unsigned char> zeros(elements * H5Tget_size(type), 0);
    check(H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()) >= 0, "write " + name);
  }

  // Writes one element at coordinates `at` (one per dimension).
  template <typename T>
  void set(const std::string& name, hid_t mem_type, const std::vector<hsize_t>& at, T value) {
    const H5Id dataset(H5Dopen2(file_.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    check(dataset.valid(), "open " + name);
    const H5Id file_space(H5Dget_space(dataset.get()), H5Sclose);
    check(H5Sselect_elements(file_space.get(), H5S_SELECT_SET, 1, at.data()) >= 0, "select in " + name);
    const hsize_t one = 1;
    const H5Id memory_space(H5Screate_simple(1, &one, nullptr), H5Sclose);
    check(H5Dwrite(dataset.get(), mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, &value) >= 0, "write " + name);
  }

  void remove_attribute(const std::string& name) { check(H5Adelete(file_.get(), name.c_str()) >= 0, "delete attribute " + name); }

  template <typename T>
  void set_attribute(const std::string& name, hid_t type, T value) {
    if (H5Aexists(file_.get(), name.c_str()) > 0) remove_attribute(name);
    const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
    const H5Id attribute(H5Acreate2(file_.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    check(attribute.valid() && H5Awrite(attribute.get(), type, &value) >= 0, "write attribute " + name);
  }

  void set_string_attribute(const std::string& name, const std::string& value) {
    const H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), value.size());
    if (H5Aexists(file_.get(), name.c_str()) > 0) remove_attribute(name);
    const H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
    const H5Id attribute(H5Acreate2(file_.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    check(attribute.valid() && H5Awrite(attribute.get(), type.get(), value.data()) >= 0, "write attribute " + name);
  }

 private:
  H5Id file_;
};

// Every element of a dataset, converted to T (mem_type must match T).
template <typename T>
std::vector<T> read_all(const std::string& path, const std::string& name, hid_t mem_type) {
  const H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  check(file.valid(), "open " + path);
  const H5Id dataset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  check(dataset.valid(), "open " + name);
  const H5Id space(H5Dget_space(dataset.get()), H5Sclose);
  std::vector<T> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get())));
  check(H5Dread(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0, "read " + name);
  return values;
}

}  // namespace avtrain::test
