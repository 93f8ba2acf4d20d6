#pragma once
// What a pack reads: the clips (from a CSV manifest or a class-per-folder tree) and the class list.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace avtrain::pack {

struct ClipEntry {
  std::int64_t line = 0;    // input line (1 = a manifest's header), or the file's place in the tree (1-based)
  std::string path;         // video (and audio) file; relative manifest paths are resolved against its folder
  std::string audio_path;   // audio from another file, or empty
  std::string label_field;  // the label as the input wrote it (a class name, or a list): the plan's digest
  std::vector<int> classes; // the clip's set: places in ClipList::class_names, ascending; one for a single-label input
  std::string unreadable;   // why the clip cannot be packed, known before decoding (reported as skipped), or empty
  std::string key;          // what --val-fraction hashes where the path is not the clip's identity (AudioSet: YTID#t=START)
  double start = 0;         // seconds
  double duration = 0;      // seconds; 0: the pack's clip duration
};

struct ClipList {
  std::vector<ClipEntry> clips;
  std::vector<std::string> class_names;  // label index = place in this list
  bool multi_label = false;  // a set of classes a clip (shard format v2), else one (v1)
};

// A CSV manifest with a header: path and label (one class name) or labels (a list of class names,
// comma-separated: a multi-label input) required; audio_path, start, duration optional (RFC 4180
// quoting). The class list is `classes` when given, else the names sorted. Throws Error naming the
// file and line for a malformed manifest, and, for a multi-label one, for a name outside `classes`.
// A single-label clip whose label is not in `classes` is kept, unreadable (the report names it).
ClipList read_manifest(const std::string& manifest, const std::vector<std::string>& classes);

// DIR/<class>/<file> (files in sub-folders of a class folder too; hidden files skipped), classes and
// files in name order. The class list is `classes` when given, else the class folders sorted.
ClipList read_tree(const std::string& directory, const std::vector<std::string>& classes);

// One class name per line (blank lines and lines starting with # skipped); throws Error on duplicates.
std::vector<std::string> read_class_file(const std::string& path);

// Splits one CSV record (no line breaks inside fields); throws Error on a stray quote.
std::vector<std::string> split_csv_record(const std::string& line);
// The text without leading and trailing spaces, tabs and carriage returns.
std::string trim(const std::string& s);
// A field quoted for CSV when it needs it.
std::string csv_field(const std::string& text);
// A label list ("dog,bark"; a name holding a comma quoted inside it, as a CSV record): its names.
// Throws Error (without a place: the caller names it) for an empty list, an empty name, a name
// listed twice or a stray quote.
std::vector<std::string> split_label_list(const std::string& list);
// Each class name's place in a class list.
using ClassPlaces = std::map<std::string, int>;
ClassPlaces places_of(const std::vector<std::string>& class_names);
// A clip's set of names as places, ascending; throws Error (without a place: the caller names it)
// `"NAME" is not in WHERE` for the first name that has none.
std::vector<int> class_set(const std::vector<std::string>& names, const ClassPlaces& places, const std::string& where);

}  // namespace avtrain::pack
