#pragma once
// What packing one shard came to: its samples, the clips it skipped, with why, and the clips packed
// with a warning (damaged packets skipped).
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain::pack {

struct ClipFailure {
  std::int64_t line = 0;  // the clip's manifest line (or place in the tree)
  std::string path;
  double start = 0;
  std::string reason;
};

struct ShardOutcome {
  int shard = 0;
  std::int64_t samples = 0;  // 0: every clip failed and no file was written
  std::vector<ClipFailure> failures;
  std::vector<ClipFailure> warnings;  // clips packed, their reason the damaged packets skipped
};

}  // namespace avtrain::pack
