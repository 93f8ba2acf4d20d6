#include "data/row_runs.hpp"

#include "data/hdf5_id.hpp"
#include <cstdlib>

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
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(file_space.get(), dims.data(), nullptr);

  if (std::getenv("PER_RUN")) {
    hsize_t row_elements = 1;
    for (int d = 1; d < rank; ++d) row_elements *= dims[d];
    char* out = static_cast<char*>(buffer);
    const std::size_t elem = H5Tget_size(mem_type);
    std::vector<hsize_t> start(rank, 0), block(dims);
    for (const RowRun& run : runs) {
      start[0] = run.first; block[0] = run.count;
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, block.data(), nullptr);
      const hsize_t n = run.count * row_elements;
      const H5Id ms(std::getenv("SHAPED") ? H5Screate_simple(rank, block.data(), nullptr) : H5Screate_simple(1, &n, nullptr), H5Sclose);
      if (H5Dread(dataset, mem_type, ms.get(), file_space.get(), H5P_DEFAULT, out) < 0) return false;
      out += n * elem;
    }
    return true;
  }
  // Each run is one block: [run.count, dims[1], dims[2], ...] starting at [run.first, 0, 0, ...].
  std::vector<hsize_t> start(rank, 0), block(dims), one(rank, 1);
  hsize_t selected_rows = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    start[0] = runs[i].first;
    block[0] = runs[i].count;
    const H5S_seloper_t op = i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR;
    if (H5Sselect_hyperslab(file_space.get(), op, start.data(), nullptr, one.data(), block.data()) < 0) return false;
    selected_rows += runs[i].count;
  }

  hsize_t row_elements = 1;
  for (int d = 1; d < rank; ++d) row_elements *= dims[d];
  const hsize_t memory_elements = selected_rows * row_elements;
  if (memory_elements == 0) return true;
  std::vector<hsize_t> mdims(dims); mdims[0] = selected_rows;
  const H5Id memory_space(std::getenv("SHAPED") ? H5Screate_simple(rank, mdims.data(), nullptr) : H5Screate_simple(1, &memory_elements, nullptr), H5Sclose);
  if (!memory_space.valid()) return false;
  return H5Dread(dataset, mem_type, memory_space.get(), file_space.get(), H5P_DEFAULT, buffer) >= 0;
}

}  // namespace avtrain::data
