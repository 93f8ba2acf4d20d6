#pragma once
// Finding the shards of a set: the *.h5 files of a directory, sorted by name.
#include <string>
#include <vector>

namespace avtrain::data {

// Throws Error when the directory is missing, is not a directory, or holds no *.h5 file.
std::vector<std::string> list_shard_files(const std::string& directory);

}  // namespace avtrain::data
