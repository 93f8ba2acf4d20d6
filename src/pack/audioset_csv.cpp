#include "pack/audioset_csv.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace avtrain::pack {

namespace {

bool ends_with(const std::string& s, const std::string& end) {
  return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// A whole number >= 0 written as digits alone; -1 otherwise.
long long whole_number(const std::string& text) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(text);
}

double seconds(const std::string& where, const char* column, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || !std::isfinite(value) || value < 0)
    throw Error(where + ": " + column + " = \"" + text + "\" is not a number of seconds >= 0");
  return value;
}

bool youtube_id(const std::string& id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

// Reads the lines of a CSV file: calls row(line number, fields) for each line that is not blank or a
// `#` comment; a stray quote is an Error naming the line.
template <class Row>
void for_each_record(const std::string& path, const char* what, Row row) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the " + std::string(what));
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (number == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
    const std::string text = trim(line);
    if (text.empty() || text.front() == '#') continue;
    std::vector<std::string> fields;
    try {
      fields = split_csv_record(text);
    } catch (const Error& e) {
      throw Error(path + ":" + std::to_string(number) + ": " + e.what());
    }
    row(number, fields);
  }
}

}  // namespace

ClassIndex read_class_index(const std::string& path) {
  ClassIndex index;
  std::map<std::string, std::int64_t> mid_line;
  std::vector<std::int64_t> index_line;
  bool header = true;
  for_each_record(path, "class index (--class-index)", [&](std::int64_t number, const std::vector<std::string>& f) {
    const std::string where = path + ":" + std::to_string(number);
    if (header) {
      header = false;
      if (f != std::vector<std::string>{"index", "mid", "display_name"})
        throw Error(where + ": the header is not index,mid,display_name (AudioSet's class_labels_indices.csv)");
      return;
    }
    if (f.size() != 3) throw Error(where + ": " + std::to_string(f.size()) + " fields, expected 3 (index,mid,display_name)");
    const long long i = whole_number(f[0]);
    if (i < 0) throw Error(where + ": index = \"" + f[0] + "\" is not a whole number >= 0");
    if (std::size_t(i) < index_line.size())
      throw Error(where + ": index " + f[0] + " is listed twice (line " + std::to_string(index_line[std::size_t(i)]) + ")");
    if (std::size_t(i) != index.display_names.size())
      throw Error(where + ": index " + f[0] + ", expected " + std::to_string(index.display_names.size()) +
                  ": the classes must be numbered 0..N-1 in order");
    if (f[1].empty()) throw Error(where + ": the mid is empty");
    if (f[2].empty()) throw Error(where + ": the display_name is empty");
    if (const auto seen = mid_line.find(f[1]); seen != mid_line.end())
      throw Error(where + ": mid \"" + f[1] + "\" is listed twice (line " + std::to_string(seen->second) + ")");
    mid_line.emplace(f[1], number);
    index_line.push_back(number);
    index.by_mid.emplace(f[1], static_cast<int>(i));
    index.display_names.push_back(f[2]);
  });
  if (header) throw Error(path + ": the class index is empty (expected the header index,mid,display_name)");
  if (index.display_names.empty()) throw Error(path + ": the class index lists no class");
  return index;
}

MediaFolder::MediaFolder(const std::string& directory) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) throw Error(directory + ": is not a directory (--media)");
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(directory, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw Error(directory + ": cannot list the media folder: " + ec.message());
    const std::string name = it->path().filename().string();
    if (name.front() == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (ends_with(name, ".part") || ends_with(name, ".ytdl")) continue;
    if (it->is_regular_file() || it->is_symlink()) files.push_back(it->path());
  }
  if (ec) throw Error(directory + ": cannot list the media folder: " + ec.message());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    by_stem_.emplace(name.substr(0, name.find('.')), file.string());
  }
}

std::string MediaFolder::find(const std::string& ytid) const {
  if (const auto at = by_stem_.find(ytid); at != by_stem_.end()) return at->second;
  if (const auto at = by_stem_.find("Y" + ytid); at != by_stem_.end()) return at->second;
  return "";
}

ClipList read_audioset(const AudiosetInput& input) {
  const ClassIndex index = read_class_index(input.class_index);
  const MediaFolder media(input.media);
  const std::string index_name = "the class index (" + input.class_index + ")";
  ClipList list;
  list.multi_label = true;
  list.class_names = index.display_names;
  for_each_record(input.segments, "segments (--audioset-csv)", [&](std::int64_t number, const std::vector<std::string>& f) {
    const std::string where = input.segments + ":" + std::to_string(number);
    if (f.size() != 4)
      throw Error(where + ": " + std::to_string(f.size()) + " fields, expected 4 (YTID, start_seconds, end_seconds, positive_labels)");
    if (f == std::vector<std::string>{"YTID", "start_seconds", "end_seconds", "positive_labels"}) return;  // a header line
    if (!youtube_id(f[0])) throw Error(where + ": YTID \"" + f[0] + "\" is not a YouTube id (letters, digits, - and _)");
    const double start = seconds(where, "start_seconds", f[1]);
    const double end = seconds(where, "end_seconds", f[2]);
    if (end <= start) throw Error(where + ": end_seconds " + f[2] + " is not after start_seconds " + f[1]);
    ClipEntry clip;
    clip.line = number;
    clip.label_field = f[3];
    clip.key = f[0] + "#t=" + f[1];
    clip.start = input.whole_videos ? start : 0;
    clip.duration = end - start;
    try {
      clip.classes = class_set(split_label_list(f[3]), index.by_mid, index_name);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    clip.path = media.find(f[0]);
    if (clip.path.empty()) {
      clip.path = (fs::path(input.media) / f[0]).string();
      clip.unreadable = "no media file " + f[0] + ".* or Y" + f[0] + ".* in " + input.media;
    }
    list.clips.push_back(std::move(clip));
  });
  if (list.clips.empty()) throw Error(input.segments + ": lists no segment");
  return list;
}

}  // namespace avtrain::pack
