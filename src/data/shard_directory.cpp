#include "data/shard_directory.hpp"

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"

namespace avtrain::data {

std::vector<std::string> list_shard_files(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(directory, ec)) throw Error(directory + ": no such shard directory");
  if (!fs::is_directory(directory, ec)) throw Error(directory + ": not a directory (expected a directory of *.h5 shards)");
  std::vector<std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, ec)) {
    if (entry.path().extension() == ".h5" && !entry.is_directory()) files.push_back(entry.path().string());
  }
  if (ec) throw Error(directory + ": cannot list the directory: " + ec.message());
  if (files.empty()) throw Error(directory + ": holds no shard (*.h5) files");
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace avtrain::data
