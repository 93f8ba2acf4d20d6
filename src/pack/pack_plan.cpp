#include "pack/pack_plan.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/error.hpp"

namespace avtrain::pack {

namespace {

// FNV-1a, 64 bits: a digest of the clip list that is the same on every machine.
std::uint64_t fnv1a(const std::string& text, std::uint64_t hash = 1469598103934665603ull) {
  for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

std::string number_text(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  return text.str();
}

// A number as a person wrote it: 0.2, not 0.20000000000000001.
std::string short_number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

void check_options(const PackOptions& o) {
  const AudiosetInput& a = o.audioset;
  const int inputs = int(!o.manifest.empty()) + int(!o.tree.empty()) + int(!a.segments.empty());
  require(inputs > 0, "pack needs --manifest FILE.csv, --tree DIR or --audioset-csv FILE.csv (see --help)");
  require(inputs == 1, "pack takes one of --manifest, --tree and --audioset-csv");
  if (!a.segments.empty()) {
    require(!a.class_index.empty(), "--audioset-csv needs --class-index FILE.csv (AudioSet's class_labels_indices.csv)");
    require(!a.media.empty(), "--audioset-csv needs --media DIR (the downloaded files, YTID.* or YYTID.*)");
    require(o.classes_file.empty(), "--audioset-csv takes its classes from --class-index, not --classes");
  } else {
    require(a.class_index.empty() && a.media.empty(), "--class-index and --media go with --audioset-csv");
  }
  require(!o.out.empty(), "pack needs --out DIR");
  const media::ClipShape& s = o.shape;
  require(std::isfinite(s.seconds) && s.seconds > 0, "--duration must be a positive number of seconds");
  require(s.sample_rate >= 1000 && s.sample_rate <= 384000, "--sample-rate must be in 1000..384000 Hz");
  require(std::isfinite(s.fps) && s.fps > 0 && s.fps <= 240, "--fps must be in (0, 240]");
  require(s.height >= 1 && s.width >= 1 && s.height <= 4096 && s.width <= 4096, "--size must be WxH with sides in 1..4096");
  require(s.channels == 1 || s.channels == 3, "--pixels must be gray or rgb");
  require(o.shard_size >= 1, "--shard-size must be at least 1");
  require(o.gzip_level >= 1 && o.gzip_level <= 9, "--gzip-level must be in 1..9");
  require(o.zstd_level >= 0 && o.zstd_level <= 22, "--zstd-level must be in 1..22");
  require(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
          "--val-fraction must be in [0, 1) (0.1: a tenth of the clips for validation)");
  require(std::isfinite(o.max_damaged) && o.max_damaged >= 0 && o.max_damaged <= 1,
          "--max-damaged must be a fraction in 0..1 (0.05: 5 % of a stream's packets)");
}

}  // namespace

int PackPlan::shards() const {
  return static_cast<int>((static_cast<std::int64_t>(list.clips.size()) + options.shard_size - 1) / options.shard_size);
}

std::int64_t PackPlan::first_clip(int shard) const { return std::int64_t(shard) * options.shard_size; }

std::int64_t PackPlan::end_clip(int shard) const {
  return std::min<std::int64_t>(first_clip(shard) + options.shard_size, static_cast<std::int64_t>(list.clips.size()));
}

std::string PackPlan::shard_path(int shard) const {
  char name[32];
  std::snprintf(name, sizeof name, "shard-%05d.h5", shard);
  return (std::filesystem::path(options.out) / name).string();
}

nlohmann::json PackPlan::description() const {
  std::uint64_t digest = fnv1a("");
  for (const ClipEntry& c : list.clips) {
    digest = fnv1a(std::to_string(c.line) + '\x1f' + c.path + '\x1f' + c.audio_path + '\x1f' + c.label_field + '\x1f' +
                       number_text(c.start) + '\x1f' + number_text(c.duration) + '\x1e',
                   digest);
  }
  char digest_text[17];
  std::snprintf(digest_text, sizeof digest_text, "%016llx", static_cast<unsigned long long>(digest));
  const media::ClipShape& s = options.shape;
  const AudiosetInput& a = options.audioset;
  nlohmann::json input = !options.manifest.empty() ? nlohmann::json{{"manifest", options.manifest}}
                       : !options.tree.empty()     ? nlohmann::json{{"tree", options.tree}}
                                                   : nlohmann::json{{"audioset_csv", a.segments},
                                                                    {"class_index", a.class_index},
                                                                    {"media", a.media},
                                                                    {"media_files", a.whole_videos ? "videos" : "segments"}};
  nlohmann::json d = {{"format", "avtrain-shards pack 1"},
          {"input", input},
          {"clips", list.clips.size()},
          {"clips_digest", digest_text},
          {"classes", list.class_names},
          {"duration_s", s.seconds},
          {"sample_rate", s.sample_rate},
          {"audio", s.audio_int16 ? "int16" : "float32"},
          {"fps", s.fps},
          {"frames", s.frames},
          {"size", std::to_string(s.width) + "x" + std::to_string(s.height)},
          {"pixels", s.channels == 1 ? "gray" : "rgb"},
          {"shard_size", options.shard_size},
          {"compression", !options.gzip ? "none" : options.zstd_level > 0 ? "zstd" : "gzip"},
          {"gzip_level", options.gzip && options.zstd_level == 0 ? options.gzip_level : 0},
          {"on_error", options.fail_on_error ? "fail" : "skip"},
          {"max_damaged", options.max_damaged}};
  if (options.gzip && options.zstd_level > 0) d["zstd_level"] = options.zstd_level;  // only then: gzip packs keep their bytes
  if (options.val_fraction > 0) d["val_fraction"] = options.val_fraction;  // a side of a split pack
  if (list.multi_label) d["labels"] = "sets";  // only then: single-label packs keep their bytes
  return d;
}

bool in_validation(const PackPlan& whole, const ClipEntry& clip) {
  namespace fs = std::filesystem;
  const fs::path root = whole.options.manifest.empty() ? fs::path(whole.options.tree)
                                                       : fs::path(whole.options.manifest).parent_path();
  std::string identity = clip.key;
  if (identity.empty()) {
    identity = fs::path(clip.path).lexically_relative(root.empty() ? fs::path(".") : root).generic_string();
    if (identity.empty() || identity.rfind("..", 0) == 0) identity = clip.path;  // outside the folder: as given
    if (clip.start > 0) identity += "#t=" + number_text(clip.start);
  }
  const double u = double(fnv1a("avtrain-shards pack --val-fraction\x1f" + identity) >> 11) * 0x1.0p-53;
  return u < whole.options.val_fraction;
}

std::vector<PackPlan> split_plans(const PackPlan& whole) {
  std::vector<PackPlan> sides(2);
  const char* names[2] = {"train", "val"};
  for (int side = 0; side < 2; ++side) {
    sides[side].options = whole.options;
    sides[side].options.out = (std::filesystem::path(whole.options.out) / names[side]).string();
    sides[side].list.class_names = whole.list.class_names;
    sides[side].list.multi_label = whole.list.multi_label;
  }
  for (std::size_t i = 0; i < whole.list.clips.size(); ++i) {
    sides[in_validation(whole, whole.list.clips[i]) ? 1 : 0].list.clips.push_back(whole.list.clips[i]);
  }
  for (int side = 0; side < 2; ++side)
    require(!sides[side].list.clips.empty(),
            "--val-fraction " + short_number(whole.options.val_fraction) + ": no clip of the " +
                std::to_string(whole.list.clips.size()) + " falls to " + (side ? "validation" : "training") +
                ": " + (side ? "raise it" : "lower it"));
  return sides;
}

PackPlan make_plan(const PackOptions& options) {
  PackOptions o = options;
  o.shape.audio_samples = std::max<std::int64_t>(1, std::llround(o.shape.seconds * o.shape.sample_rate));
  o.shape.frames = std::max(1, int(std::lround(o.shape.seconds * o.shape.fps)));
  check_options(o);
  const std::vector<std::string> classes = o.classes_file.empty() ? std::vector<std::string>{} : read_class_file(o.classes_file);
  PackPlan plan;
  plan.options = o;
  plan.list = !o.manifest.empty() ? read_manifest(o.manifest, classes)
              : !o.tree.empty()    ? read_tree(o.tree, classes)
                                   : read_audioset(o.audioset);
  return plan;
}

std::string source_text(const ClipEntry& clip) {
  std::ostringstream text;
  text << clip.path;
  if (clip.start > 0 || clip.duration > 0) {
    text << "#t=" << number_text(clip.start);
    if (clip.duration > 0) text << ',' << number_text(clip.start + clip.duration);
  }
  if (!clip.audio_path.empty()) text << " audio=" << clip.audio_path;
  return text.str();
}

}  // namespace avtrain::pack
