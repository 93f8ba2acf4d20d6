#include "data/row_runs.hpp"

#include "data/hdf5_id.hpp"

namespace avtrain::data {

std::vector<RowRun> row_runs(const std::vector<std::int64_t>& sorted_rows) {
  std::vector<RowRun> runs;
  for (const std::int64_t row : sorted_rows) {
    const auto r = static_cast<hsize_t>(row);
    if (!runs.empty() && runs.back().first + runs.back().count == r) {
      ++runs.back().count;
    } else {
      runs.push_back({r, 1});
    }
  }
  return runs;
}

bool read_row_runs(hid_t dataset, hid_t mem_type, const std::vector<RowRun>& runs, void* buffer) {
  if (runs.empty()) return true;
  const H5Id file_space(H5Dget_space(dataset), H5Sclose);
  if (!file_space.valid()) return false;
  const int rank = H5Sget_simple_extent_ndims(file_space.get());
  if (rank < 1) return false;
  std::vector<hsize_t> block(rank);
  H5Sget_simple_extent_dims(file_space.get(), block.data(), nullptr);
  hsize_t row_bytes = H5Tget_size(mem_type);
  for (int d = 1; d < rank; ++d) row_bytes *= block[d];
  if (row_bytes == 0) return true;

  // Each run is one block [run.count, dims[1], ...] at [run.first, 0, ...], read into a memory space of that shape.
  std::vector<hsize_t> start(rank, 0);
  auto* out = static_cast<unsigned char*>(buffer);
  for (const RowRun& run : runs) {
    start[0] = run.first;
    block[0] = run.count;
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, block.data(), nullptr) < 0) {
      return false;
    }
    const H5Id memory_space(H5Screate_simple(rank, block.data(), nullptr), H5Sclose);
    if (!memory_space.valid() ||
        H5Dread(dataset, mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, out) < 0) {
      return false;
    }
    out += run.count * row_bytes;
  }
  return true;
}

}  // namespace avtrain::data
