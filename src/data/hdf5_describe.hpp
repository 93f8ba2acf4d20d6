#pragma once
// Human-readable facts about an HDF5 dataset: element type, shape, chunking and filters.
#include <hdf5.h>

#include <string>
#include <vector>

namespace avtrain::data {

struct DatasetLayout {
  std::string name;                 // "/audio"
  std::string type;                 // "int16", "float32", "uint8", "string", ...
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk_dims;  // empty when the dataset is not chunked
  std::vector<std::string> filters; // "shuffle", "deflate(4)", ...
};

// "int16", "uint8", "float32", "float64", "string", "compound", ...
std::string type_name(hid_t type);
std::vector<hsize_t> dataset_dims(hid_t dataset);
DatasetLayout describe_dataset(hid_t dataset, const std::string& name);
// "[512, 8000]"
std::string format_dims(const std::vector<hsize_t>& dims);

}  // namespace avtrain::data
