#include "data/hdf5_describe.hpp"

#include <algorithm>

#include "data/hdf5_id.hpp"

namespace avtrain::data {

std::string type_name(hid_t type) {
  const std::string bits = std::to_string(8 * H5Tget_size(type));
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
    case H5T_FLOAT: return "float" + bits;
    case H5T_STRING: return H5Tis_variable_str(type) > 0 ? "string (variable length)" : "string (" + std::to_string(H5Tget_size(type)) + " bytes)";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length sequence";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_REFERENCE: return "reference";
    case H5T_TIME: return "time";
    default: return "unknown type";
  }
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  const H5Id space(H5Dget_space(dataset), H5Sclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : 0;
  std::vector<hsize_t> dims(rank > 0 ? rank : 0);
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string format_dims(const std::vector<hsize_t>& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

namespace {

std::string filter_name(H5Z_filter_t filter, const std::vector<unsigned>& values, const char* own_name) {
  switch (filter) {
    case H5Z_FILTER_DEFLATE: return values.empty() ? "deflate" : "deflate(" + std::to_string(values[0]) + ")";
    case H5Z_FILTER_SHUFFLE: return "shuffle";
    case H5Z_FILTER_FLETCHER32: return "fletcher32";
    case H5Z_FILTER_SZIP: return "szip";
    case H5Z_FILTER_NBIT: return "nbit";
    case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
    default: return std::string(own_name[0] ? own_name : "filter") + " (id " + std::to_string(filter) + ")";
  }
}

}  // namespace

DatasetLayout describe_dataset(hid_t dataset, const std::string& name) {
  DatasetLayout layout;
  layout.name = name;
  const H5Id type(H5Dget_type(dataset), H5Tclose);
  layout.type = type.valid() ? type_name(type.get()) : "unknown type";
  layout.dims = dataset_dims(dataset);

  const H5Id plist(H5Dget_create_plist(dataset), H5Pclose);
  if (!plist.valid() || H5Pget_layout(plist.get()) != H5D_CHUNKED) return layout;
  layout.chunk_dims.resize(layout.dims.size());
  H5Pget_chunk(plist.get(), static_cast<int>(layout.chunk_dims.size()), layout.chunk_dims.data());
  const int filter_count = H5Pget_nfilters(plist.get());
  for (int i = 0; i < filter_count; ++i) {
    unsigned flags = 0;
    std::size_t value_count = 8;
    std::vector<unsigned> values(value_count);
    char own_name[64] = {};
    unsigned config = 0;
    const H5Z_filter_t filter = H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags, &value_count,
                                               values.data(), sizeof own_name, own_name, &config);
    values.resize(std::min(value_count, values.size()));
    layout.filters.push_back(filter_name(filter, values, own_name));
  }
  return layout;
}

}  // namespace avtrain::data
