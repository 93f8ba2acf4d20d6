#pragma once
// Reading a set of rows (first-dimension indices) of a dataset by runs of consecutive rows.
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

// Reads the rows of the runs into buffer, densely, in increasing row order. Returns false when HDF5 fails.
// One H5Dread per run, each a single block whose memory space has the block's shape: HDF5 1.10 maps a union
// (H5S_SELECT_OR) selection, or a memory space of another shape, to chunks element by element, which made a
// 256-row batch 5x slower with gzip chunks and 3x slower contiguous (docs/shard-format.md, "Reading").
bool read_row_runs(hid_t dataset, hid_t mem_type, const std::vector<RowRun>& runs, void* buffer);

}  // namespace avtrain::data
