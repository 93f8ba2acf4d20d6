#include "pack/clip_list.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace avtrain::pack {

namespace {

double seconds_field(const std::string& where, const std::string& column, const std::string& text) {
  if (text.empty()) return 0;
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(value) || value < 0) {
    throw Error(where + ": " + column + " = \"" + text + "\" is not a number of seconds >= 0");
  }
  return value;
}

std::vector<std::string> sorted_unique(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string().front() == '.'; }

}  // namespace

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

std::vector<std::string> split_csv_record(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"' && trim(fields.back()).empty()) {
      fields.back().clear();
      quoted = true;
    } else if (c == ',') {
      fields.back() = trim(fields.back());
      fields.emplace_back();
    } else if (c == '"') {
      throw Error("a quote inside an unquoted field");
    } else {
      fields.back() += c;
    }
  }
  if (quoted) throw Error("a quoted field is not closed");
  fields.back() = trim(fields.back());
  return fields;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos && trim(text) == text) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::vector<std::string> read_class_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the class list (--classes)");
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (!seen.insert(line).second) throw Error(path + ":" + std::to_string(number) + ": class \"" + line + "\" is listed twice");
    names.push_back(line);
  }
  if (names.empty()) throw Error(path + ": the class list (--classes) names no class");
  return names;
}

std::vector<std::string> split_label_list(const std::string& list) {
  if (trim(list).empty()) throw Error("the label set is empty");
  std::vector<std::string> names = split_csv_record(list);
  std::set<std::string> seen;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) throw Error("the label list \"" + list + "\" has an empty name (name " + std::to_string(i + 1) + ")");
    if (!seen.insert(names[i]).second) throw Error("the label list \"" + list + "\" names \"" + names[i] + "\" twice");
  }
  return names;
}

ClassPlaces places_of(const std::vector<std::string>& class_names) {
  ClassPlaces places;
  for (std::size_t i = 0; i < class_names.size(); ++i) places.emplace(class_names[i], static_cast<int>(i));
  return places;
}

std::vector<int> class_set(const std::vector<std::string>& names, const ClassPlaces& places, const std::string& where) {
  std::vector<int> set;
  for (const std::string& name : names) {
    const auto at = places.find(name);
    if (at == places.end()) throw Error("\"" + name + "\" is not in " + where);
    set.push_back(at->second);
  }
  std::sort(set.begin(), set.end());
  return set;
}

ClipList read_manifest(const std::string& manifest, const std::vector<std::string>& classes) {
  std::ifstream in(manifest);
  if (!in) throw Error(manifest + ": cannot read the manifest (--manifest)");
  const fs::path base = fs::path(manifest).parent_path();
  std::string line;
  if (!std::getline(in, line)) throw Error(manifest + ": the manifest is empty (expected a header: path,label,...)");
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // a UTF-8 byte-order mark
  std::vector<std::string> header;
  try {
    header = split_csv_record(line);
  } catch (const Error& e) {
    throw Error(manifest + ":1: " + e.what());
  }
  static const std::vector<std::string> known = {"path", "label", "labels", "audio_path", "start", "duration"};
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (std::find(known.begin(), known.end(), header[i]) == known.end()) {
      throw Error(manifest + ":1: unknown column \"" + header[i] +
                  "\" (columns: path, label or labels required; audio_path, start, duration)");
    }
    if (!column.emplace(header[i], i).second) throw Error(manifest + ":1: column \"" + header[i] + "\" appears twice");
  }
  if (!column.count("path")) throw Error(manifest + ":1: the header has no column \"path\"");
  if (column.count("label") && column.count("labels"))
    throw Error(manifest + ":1: the header has both \"label\" (one class a clip) and \"labels\" (a list): keep one");
  if (!column.count("label") && !column.count("labels")) throw Error(manifest + ":1: the header has no column \"label\"");
  const bool multi_label = column.count("labels") > 0;
  const char* label_column = multi_label ? "labels" : "label";
  const auto resolve = [&](const std::string& p) {
    if (p.empty() || fs::path(p).is_absolute()) return p;
    return (base / p).lexically_normal().string();
  };

  ClipList list;
  list.multi_label = multi_label;
  std::vector<std::vector<std::string>> names;  // per clip
  std::int64_t number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (trim(line).empty()) continue;
    const std::string where = manifest + ":" + std::to_string(number);
    std::vector<std::string> fields;
    try {
      fields = split_csv_record(line);
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    if (fields.size() != header.size()) {
      throw Error(where + ": " + std::to_string(fields.size()) + " fields, the header has " + std::to_string(header.size()));
    }
    const auto field = [&](const char* name) { return column.count(name) ? fields[column.at(name)] : std::string(); };
    ClipEntry clip;
    clip.line = number;
    clip.path = resolve(field("path"));
    clip.audio_path = resolve(field("audio_path"));
    clip.label_field = field(label_column);
    clip.start = seconds_field(where, "start", field("start"));
    clip.duration = seconds_field(where, "duration", field("duration"));
    if (clip.path.empty()) throw Error(where + ": the path is empty");
    if (!multi_label && clip.label_field.empty()) throw Error(where + ": the label is empty");
    try {
      names.push_back(multi_label ? split_label_list(clip.label_field) : std::vector<std::string>{clip.label_field});
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    list.clips.push_back(std::move(clip));
  }
  if (list.clips.empty()) throw Error(manifest + ": the manifest lists no clip");
  if (classes.empty()) {
    std::vector<std::string> all;
    for (const auto& set : names) all.insert(all.end(), set.begin(), set.end());
    list.class_names = sorted_unique(std::move(all));
  } else {
    list.class_names = classes;
  }
  const ClassPlaces places = places_of(list.class_names);
  for (std::size_t i = 0; i < list.clips.size(); ++i) {
    ClipEntry& clip = list.clips[i];
    try {
      clip.classes = class_set(names[i], places, "the class list (--classes)");
    } catch (const Error& e) {
      // One class a clip: --classes may leave classes out, their clips are reported and skipped.
      if (!multi_label) clip.unreadable = "label \"" + clip.label_field + "\" is not in the class list";
      else throw Error(manifest + ":" + std::to_string(clip.line) + ": " + e.what());
    }
  }
  return list;
}

ClipList read_tree(const std::string& directory, const std::vector<std::string>& classes) {
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) throw Error(directory + ": is not a directory (--tree)");
  std::vector<fs::path> class_dirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, ec)) {
    if (entry.is_directory() && !hidden(entry.path())) class_dirs.push_back(entry.path());
  }
  std::sort(class_dirs.begin(), class_dirs.end());
  if (class_dirs.empty()) throw Error(directory + ": holds no class folder (--tree expects DIR/<class>/<file>)");
  ClipList list;
  std::vector<std::string> names;
  for (const fs::path& class_dir : class_dirs) {
    names.push_back(class_dir.filename().string());
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(class_dir, ec); it != fs::recursive_directory_iterator(); ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() || it->is_symlink()) files.push_back(it->path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      ClipEntry clip;
      clip.line = static_cast<std::int64_t>(list.clips.size()) + 1;
      clip.path = file.string();
      clip.label_field = names.back();
      list.clips.push_back(std::move(clip));
    }
  }
  if (list.clips.empty()) throw Error(directory + ": its class folders hold no file");
  list.class_names = classes.empty() ? names : classes;
  const ClassPlaces places = places_of(list.class_names);
  for (ClipEntry& clip : list.clips) {
    const auto at = places.find(clip.label_field);
    if (at != places.end()) clip.classes = {at->second};
    else clip.unreadable = "label \"" + clip.label_field + "\" is not in the class list";
  }
  return list;
}

}  // namespace avtrain::pack
