#pragma once
// What a pack reads: the clips (from a CSV manifest or a class-per-folder tree) and the class list.
#include <cstdint>
#include <string>
#include <vector>

namespace avtrain::pack {

struct ClipEntry {
  std::int64_t line = 0;   // manifest line (1 = the header), or the file's place in the tree (1-based)
  std::string path;        // video (and audio) file; relative manifest paths are resolved against its folder
  std::string audio_path;  // audio from another file, or empty
  std::string label;       // class name
  double start = 0;        // seconds
  double duration = 0;     // seconds; 0: the pack's clip duration
};

struct ClipList {
  std::vector<ClipEntry> clips;
  std::vector<std::string> class_names;  // label index = place in this list
};

// A CSV manifest with a header: path,label required; audio_path, start, duration optional (RFC 4180
// quoting). The class list is `classes` when given, else the labels sorted. Throws Error naming the
// file and line for a malformed manifest.
ClipList read_manifest(const std::string& manifest, const std::vector<std::string>& classes);

// DIR/<class>/<file> (files in sub-folders of a class folder too; hidden files skipped), classes and
// files in name order. The class list is `classes` when given, else the class folders sorted.
ClipList read_tree(const std::string& directory, const std::vector<std::string>& classes);

// One class name per line (blank lines and lines starting with # skipped); throws Error on duplicates.
std::vector<std::string> read_class_file(const std::string& path);

// Splits one CSV record (no line breaks inside fields); throws Error on a stray quote.
std::vector<std::string> split_csv_record(const std::string& line);
// A field quoted for CSV when it needs it.
std::string csv_field(const std::string& text);

}  // namespace avtrain::pack
