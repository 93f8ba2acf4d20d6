#pragma once
// What makes a pack resumable: OUT/.pack/plan.json (what the set is made of) and one
// OUT/.pack/shard-NNNNN.json per finished shard (its samples and skipped clips), written after the
// shard itself is renamed into place. A shard without its record is packed again.
#include <string>
#include <vector>

#include "pack/pack_plan.hpp"
#include "pack/shard_outcome.hpp"

namespace avtrain::pack {

// Creates OUT and OUT/.pack/plan.json, or checks that the plan there is this plan (throws Error naming
// the first option that differs). Refuses an OUT that holds shards of something else. overwrite:
// removes an earlier pack's shards, state and report first. Removes left-over *.h5.tmp files.
void prepare_output(const PackPlan& plan, bool overwrite);

// The shards whose record exists (and whose file, if it has samples, is in place).
bool shard_finished(const PackPlan& plan, int shard);
// Writes the shard's record atomically (after the shard file has been committed).
void record_shard(const PackPlan& plan, const ShardOutcome& outcome);
// Every finished shard's record, in shard order.
std::vector<ShardOutcome> read_outcomes(const PackPlan& plan);
// OUT/pack-report.csv: line,path,start,status,reason for every skipped clip (status "skipped") and every
// clip packed with damaged packets skipped ("warning"), in list order.
std::string write_report(const PackPlan& plan, const std::vector<ShardOutcome>& outcomes);

}  // namespace avtrain::pack
