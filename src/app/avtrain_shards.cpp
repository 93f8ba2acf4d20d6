// avtrain-shards: writes synthetic shard sets, inspects/validates shard files (docs/shard-format.md)
// and measures how fast the training reader reads them (read-bench).
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "app/shards_read_bench.hpp"
#include "core/error.hpp"
#include "data/shard_directory.hpp"
#include "data/shard_reader.hpp"
#include "data/synthetic.hpp"
#include "data/value_digest.hpp"

namespace po = boost::program_options;
using namespace avtrain;
using namespace avtrain::data;

namespace {

constexpr const char* kUsage =
    "usage: avtrain-shards synth --out DIR [--shards K --samples N --seed S ...]\n"
    "       avtrain-shards pack --manifest FILE.csv | --tree DIR | --audioset-csv FILE.csv --class-index FILE.csv\n"
    "                           --media DIR   --out DIR [options]\n"
    "       avtrain-shards inspect [--check-values] FILE_OR_DIR...\n"
    "       avtrain-shards read-bench --data DIR [--micro-batch B --seconds S]\n"
    "\n"
    "  synth    write a synthetic shard set whose label needs both modalities:\n"
    "           label = tone_class * motions + motion_class\n"
    "  pack     decode audio and video files with FFmpeg into a shard set (under mpirun: over the ranks)\n"
    "  inspect  print attributes, datasets, sample counts and class histograms of shard files,\n"
    "           check them as a start does (--check-values: every value and digest); exit 1 when refused\n"
    "  read-bench  read shuffled micro-batches through the training reader with no model behind it:\n"
    "           samples/s, MB/s, the rate per core\n"
    "\n"
    "'avtrain-shards COMMAND --help' lists the options of a command.\n";

// `pack` is its own program beside this one (it links FFmpeg and MPI; synth and inspect need neither).
int pack(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path program = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "avtrain-shards-pack";
  argv[1] = const_cast<char*>("avtrain-shards pack");
  execv(program.c_str(), argv + 1);
  std::cerr << "avtrain-shards: cannot run " << program.string() << " for the pack command: " << std::strerror(errno) << '\n';
  return 1;
}

int synth(const std::vector<std::string>& args) {
  SynthOptions o;
  bool no_gzip = false;
  po::options_description options("avtrain-shards synth options");
  options.add_options()
      ("help,h", "print this help")
      ("out", po::value(&o.out_dir)->required(), "output directory (created if missing)")
      ("shards", po::value(&o.shards)->default_value(o.shards), "number of shard files")
      ("samples", po::value(&o.samples_per_shard)->default_value(o.samples_per_shard), "samples per shard")
      ("seed", po::value(&o.seed)->default_value(o.seed), "random seed; the same seed writes the same bytes")
      ("sample-rate", po::value(&o.sample_rate)->default_value(o.sample_rate), "audio sample rate, Hz")
      ("audio-samples", po::value(&o.audio_samples)->default_value(o.audio_samples), "audio samples per clip (A)")
      ("frames", po::value(&o.frames)->default_value(o.frames), "video frames per clip (F)")
      ("height", po::value(&o.height)->default_value(o.height), "frame height (H)")
      ("width", po::value(&o.width)->default_value(o.width), "frame width (W)")
      ("channels", po::value(&o.channels)->default_value(o.channels), "channels per pixel (C): 1 or 3")
      ("fps", po::value(&o.fps)->default_value(o.fps), "video frames per second")
      ("tones", po::value(&o.tone_classes)->default_value(o.tone_classes), "audio tone classes (1..64)")
      ("motions", po::value(&o.motion_classes)->default_value(o.motion_classes), "video motion classes (1..8)")
      ("noise", po::value(&o.noise)->default_value(o.noise), "noise relative to the signal")
      ("float-audio", po::bool_switch(&o.float_audio), "store audio as float32 instead of int16 PCM")
      ("multi-label", po::bool_switch(&o.multi_label),
       "format v2: each sample labelled with the set {tone, tones + motion} (tones + motions classes)")
      ("no-gzip", po::bool_switch(&no_gzip), "contiguous datasets without compression")
      ("gzip-level", po::value(&o.gzip_level)->default_value(o.gzip_level), "deflate level 1..9 (as pack's)")
      ("zstd-level", po::value(&o.zstd_level)->default_value(o.zstd_level),
       "> 0: zstd at this level 1..22 in place of deflate (shuffle + zstd, as pack --compression zstd)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: avtrain-shards synth --out DIR [options]\n\n" << options;
    return 0;
  }
  po::notify(vm);
  o.gzip = !no_gzip;
  require(o.gzip_level >= 1 && o.gzip_level <= 9, "synth: --gzip-level must be 1..9");
  require(o.zstd_level >= 0 && o.zstd_level <= 22, "synth: --zstd-level must be 0 (deflate) or 1..22");
  write_synthetic(o);
  std::cout << "wrote " << o.shards << " shards of " << o.samples_per_shard << " samples to " << o.out_dir
            << " (" << o.tone_classes * o.motion_classes << " classes)\n";
  return 0;
}

void print_layouts(const ShardReader& shard) {
  for (const DatasetLayout& layout : shard.layouts()) {
    std::cout << "  " << std::left << std::setw(11) << layout.name << std::setw(9) << layout.type
              << std::setw(26) << format_dims(layout.dims);
    if (layout.chunk_dims.empty()) {
      std::cout << "contiguous";
    } else {
      std::cout << "chunks " << format_dims(layout.chunk_dims);
      for (const std::string& filter : layout.filters) std::cout << ", " << filter;
    }
    std::cout << '\n';
  }
}

void print_histogram(const std::vector<std::int64_t>& histogram) {
  std::cout << "  classes   ";
  for (std::size_t c = 0; c < histogram.size(); ++c) {
    std::cout << (c > 0 && c % 8 == 0 ? "\n            " : "") << std::right << std::setw(4) << c << ":"
              << std::left << std::setw(7) << histogram[c];
  }
  std::cout << '\n';
}

// Prints one shard and checks it; returns its header, or nothing (after printing the error) when refused.
std::optional<ShardHeader> inspect_file(const std::string& path, const std::optional<ShardHeader>& first_of_set,
                                        bool check_every_value) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  std::cout << path;
  if (!ec) std::cout << "  (" << bytes << " bytes)";
  std::cout << '\n';
  try {
    const ShardReader shard(path);
    const ShardHeader& h = shard.header();
    std::cout << "  attributes avtrain_format = \"av-shard\", version = " << h.version
              << ", sample_rate = " << h.sample_rate << ", fps = " << h.fps << ", num_classes = " << h.num_classes
              << '\n';
    if (!h.class_names.empty()) {
      std::cout << "  class_names";
      for (std::size_t c = 0; c < h.class_names.size(); ++c) std::cout << (c ? ", " : " ") << c << ":" << h.class_names[c];
      std::cout << '\n';
    }
    if (!h.packed_with.empty()) std::cout << "  packed_with " << h.packed_with << '\n';
    if (h.digests) {
      std::cout << "  values_checked 1, digests (" << kDigestAlgorithm << ")";
      for (std::size_t d = 0; d < kDigestedDatasets.size(); ++d)
        std::cout << (d ? ", " : " ") << digested_dataset(d, h.version) << " " << hex_digest((*h.digests)[d]);
      std::cout << '\n';
    }
    print_layouts(shard);
    std::cout << "  samples   " << h.samples << '\n';
    const std::vector<std::int64_t> histogram = shard.check_values(!check_every_value);
    std::cout << "  values    ";
    if (check_every_value) {
      std::cout << (h.digests ? "every value checked, every digest matches" : "every value checked (no digests)");
    } else {
      std::cout << "lengths and labels checked" << (h.digests ? " (their digests match)" : "");
      if (!h.audio_int16) std::cout << ", float audio in " << shard.sampled_rows().size() << " row(s)";
      std::cout << "; --check-values reads every value";
    }
    std::cout << '\n';
    print_histogram(histogram);
    if (first_of_set) require_same_set(*first_of_set, h);
    std::cout << "  ok\n";
    return h;
  } catch (const Error& e) {
    std::cout << "  REFUSED\n" << std::flush;
    std::cerr << "avtrain-shards: " << e.what() << '\n';
    return std::nullopt;
  }
}

int inspect(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  bool check_every_value = false;
  po::options_description options("avtrain-shards inspect options");
  options.add_options()("help,h", "print this help")(
      "check-values", po::bool_switch(&check_every_value),
      "read every value: lengths, labels and float audio in range, and every dataset against its digest where the "
      "shard records them (as data.check_values full); without it, the checks of a start (data.check_values sample)");
  po::options_description hidden;
  hidden.add_options()("path", po::value(&paths));
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("path", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << "usage: avtrain-shards inspect [--check-values] FILE_OR_DIR...\n"
                 "  a directory is checked as one shard set: its *.h5 files must agree with each other\n\n"
              << options;
    return 0;
  }
  require(!paths.empty(), "inspect needs at least one shard file or directory (see --help)");

  bool all_ok = true;
  for (const std::string& path : paths) {
    if (!std::filesystem::is_directory(path)) {
      all_ok = inspect_file(path, std::nullopt, check_every_value).has_value() && all_ok;
      continue;
    }
    std::optional<ShardHeader> first;
    std::int64_t samples = 0;
    bool set_ok = true;
    const std::vector<std::string> files = list_shard_files(path);
    for (const std::string& file : files) {
      const std::optional<ShardHeader> header = inspect_file(file, first, check_every_value);
      set_ok = header.has_value() && set_ok;
      if (header && !first) first = header;
      if (header) samples += header->samples;
    }
    std::cout << "set " << path << ": " << files.size() << " shards, " << samples << " samples, "
              << (set_ok ? "ok" : "REFUSED") << '\n';
    all_ok = all_ok && set_ok;
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "synth") return synth(args);
    if (command == "inspect") return inspect(args);
    if (command == "pack") return pack(argv);
    if (command == "read-bench") return read_bench(args);
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "avtrain-shards: " << (command.empty() ? "no command given" : "unknown command '" + command + "'")
              << " (expected synth, pack, inspect or read-bench; see avtrain-shards --help)\n";
    return 1;
  } catch (const po::error& e) {
    std::cerr << "avtrain-shards: " << e.what() << " (see avtrain-shards " << command << " --help)\n";
  } catch (const std::exception& e) {
    std::cerr << "avtrain-shards: " << e.what() << '\n';
  }
  return 1;
}
