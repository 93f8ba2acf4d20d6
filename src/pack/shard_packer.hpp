#pragma once
// Packs one shard of a plan: decodes its clips in blocks, `threads` clips at a time, and appends the
// ones that decode to the shard file, in list order; the file is renamed into place when complete.
#include <functional>
#include <optional>

#include "data/shard_header.hpp"
#include "pack/pack_plan.hpp"
#include "pack/shard_outcome.hpp"

namespace avtrain::pack {

struct BlockDone {
  int packed = 0;   // clips of the block appended to the shard
  int skipped = 0;  // clips of the block that failed
  int warned = 0;   // clips of the block packed with damaged packets skipped
  const ClipFailure* first_failure = nullptr;  // of this block, when skipped > 0
};

class ShardPacker {
 public:
  ShardPacker(const PackPlan& plan, int threads);

  // Packs `shard`: after each block calls after_block, whose false abandons the shard (its temporary
  // file is removed; nothing is returned). `interrupted` is polled between clips: true ends the block
  // early (the shard is abandoned after the call to after_block). Throws Error when the shard cannot be
  // written.
  std::optional<ShardOutcome> pack(int shard, const std::function<bool(const BlockDone&)>& after_block,
                                   const std::function<bool()>& interrupted) const;

  int block_clips() const { return block_; }

 private:
  const PackPlan& plan_;
  data::ShardHeader header_;  // every shard's, but its path
  int threads_;
  int block_;                 // clips decoded at a time (by the threads)
  std::int64_t write_clips_;  // clips written at a time: fixed by the clip's size alone
};

}  // namespace avtrain::pack
