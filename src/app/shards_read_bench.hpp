#pragma once
// avtrain-shards read-bench: the training reader's rate on a shard set, with no model behind it.
#include <string>
#include <vector>

namespace avtrain {

// args: the command's options (--data DIR, --micro-batch, --seconds, --json ...). Returns the exit code.
int read_bench(const std::vector<std::string>& args);

}  // namespace avtrain
