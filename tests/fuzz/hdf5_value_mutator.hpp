#pragma once
// The HDF5 targets' own mutation (hdf5_value_mutator.cpp, linked into fuzz_shard and fuzz_checkpoint in
// the fuzz preset): one value of one of the input's HDF5 files changed through HDF5.
#include <string_view>
#include <vector>

namespace avtrain::fuzz {

// Defined by each target that links the mutator: the HDF5 files its input holds, as parts of it.
std::vector<std::string_view> hdf5_files_of(std::string_view input);

}  // namespace avtrain::fuzz
