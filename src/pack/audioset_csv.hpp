#pragma once
// AudioSet's own CSV layout as Google publishes it: a segments file (balanced_train_segments.csv:
// `#` comment lines, then `YTID, start_seconds, end_seconds, "mid,mid,..."`), a class index
// (class_labels_indices.csv: `index,mid,display_name`), and a folder of the downloaded media, one
// file a YouTube id (YTID.* or, as PANNs' and AST's download scripts name them, YYTID.*).
#include <map>
#include <string>
#include <vector>

#include "pack/clip_list.hpp"

namespace avtrain::pack {

struct AudiosetInput {
  std::string segments;      // the segments CSV
  std::string class_index;   // the class index CSV
  std::string media;         // the folder of downloaded files
  bool whole_videos = false; // a file is the whole video (the segment read from start_seconds), else the segment alone
};

struct ClassIndex {
  std::vector<std::string> display_names;  // in index order: the shards' class_names
  ClassPlaces by_mid;                      // "/m/09x0r" -> its index
};

// Throws Error naming the file and line for a header other than index,mid,display_name, an index
// that is not the row's place (0..N-1 in order), a mid listed twice, an empty mid or name.
ClassIndex read_class_index(const std::string& path);

// The media files of a folder (and its sub-folders; hidden files and unfinished downloads, *.part
// and *.ytdl, skipped) by the name before their first dot. A name found twice: the first in path order.
class MediaFolder {
 public:
  explicit MediaFolder(const std::string& directory);
  // The file for a YouTube id: ID.* or else YID.*; empty when there is none.
  std::string find(const std::string& ytid) const;

 private:
  std::map<std::string, std::string> by_stem_;
};

// The segments as clips, their sets of classes as places in the class index, multi_label. Throws Error
// naming the file and line for a malformed row (its field count, a YTID, a number, an empty or
// malformed label list, a mid not in the class index). A segment without a media file is kept,
// unreadable ("no media file ..."): the pack reports and skips it (or stops, --on-error fail).
ClipList read_audioset(const AudiosetInput& input);

}  // namespace avtrain::pack
