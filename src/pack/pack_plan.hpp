#pragma once
// What a pack will write: its options, its clips and classes, and which clips go into which shard.
// Shard k holds the clips k*shard_size .. (k+1)*shard_size-1 of the list that decode (in list order),
// so the set depends on the inputs and options alone — not on ranks, threads or interruptions.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "media/clip.hpp"
#include "pack/audioset_csv.hpp"
#include "pack/clip_list.hpp"

namespace avtrain::pack {

struct PackOptions {
  std::string manifest;      // a CSV manifest, or
  std::string tree;          // a DIR/<class>/<file> tree, or
  AudiosetInput audioset;    // AudioSet's segments CSV (audioset.segments), class index and media folder
  std::string out;           // the shard set's folder
  std::string classes_file;  // the class list (one name per line); empty: from the input
  media::ClipShape shape;    // seconds, sample rate, fps, frames, height, width, channels, audio type
  std::int64_t shard_size = 1024;  // clips of the list per shard
  bool gzip = true;
  int gzip_level = 4;
  int zstd_level = 0;  // > 0 (--compression zstd): zstd at this level in place of deflate
  double val_fraction = 0;     // > 0: a keyed share of the clips goes to OUT/val, the rest to OUT/train
  bool fail_on_error = false;  // --on-error fail: the first bad clip stops the pack
  double max_damaged = 0.05;   // a clip with more of a stream's packets damaged is skipped (else: a warning)
  int debug_delay_ms = 0;      // a pause after each clip, for tests that interrupt a pack (not part of the set)
};

struct PackPlan {
  PackOptions options;
  ClipList list;

  int shards() const;
  std::int64_t first_clip(int shard) const;
  std::int64_t end_clip(int shard) const;
  std::string shard_path(int shard) const;  // OUT/shard-NNNNN.h5
  // Everything the set depends on (the options and a digest of the clip list), for OUT/.pack/plan.json
  // and the shards' packed_with attribute.
  nlohmann::json description() const;
};

// Reads the input and the class list. Throws Error for a bad option or input (naming it).
PackPlan make_plan(const PackOptions& options);

// Whether a clip goes to validation under --val-fraction: FNV-1a of its identity (its file's path
// relative to the tree or the manifest's folder, and its start where it has one; an AudioSet segment:
// YTID#t=start_seconds), as a number in [0, 1), below the fraction. A clip keeps its side whatever else is added to or taken from the input.
bool in_validation(const PackPlan& whole, const ClipEntry& clip);

// The plans of a split pack (options.val_fraction > 0): the clips for training into OUT/train and
// those for validation into OUT/val, each with the whole input's class list (so the two sets match).
// Throws Error when a side would get no clip.
std::vector<PackPlan> split_plans(const PackPlan& whole);

// The shard's samples' /source text: the file, "#t=START" when the clip starts later, and the audio file.
std::string source_text(const ClipEntry& clip);

}  // namespace avtrain::pack
