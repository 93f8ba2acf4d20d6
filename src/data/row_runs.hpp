#pragma once
// Reading a set of rows (first-dimension indices) of a dataset with one hyperslab selection and one H5Dread.
#include <hdf5.h>

#include <cstdint>
#include <vector>

namespace avtrain::data {

struct RowRun {
  hsize_t first = 0;
  hsize_t count = 0;
};

// Consecutive rows merged into runs; rows must be sorted ascending and unique.
std::vector<RowRun> row_runs(const std::vector<std::int64_t>& sorted_rows);

// Selects the union of the runs (H5S_SELECT_OR) in the dataset's file space and reads it with one H5Dread
// into buffer, densely, rows in increasing order. Returns false when HDF5 fails.
bool read_row_runs(hid_t dataset, hid_t mem_type, const std::vector<RowRun>& runs, void* buffer);

}  // namespace avtrain::data
