// avtrain-shards pack: decodes media files with FFmpeg into a shard set, the shards shared out over
// MPI ranks (avtrain-shards runs this program for its `pack` command). docs/packing.md.
#include <mpi.h>
#include <sched.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/rank_totals.hpp"
#include "core/error.hpp"
#include "core/stop_signals.hpp"
#include "media/clip.hpp"
#include "pack/pack_state.hpp"
#include "pack/shard_packer.hpp"

namespace po = boost::program_options;
using namespace avtrain;
using namespace avtrain::pack;

namespace {

using Clock = std::chrono::steady_clock;

struct Command {
  PackOptions pack;
  int threads = 0;
  bool overwrite = false;
  double progress_s = 5;
};

// The tick's counters, summed over the ranks.
enum Counter { kPacked, kSkipped, kFailed, kSignal, kRankDone, kCounters };
constexpr int kLag = 4;

std::optional<Command> parse(int argc, char** argv, int rank) {
  Command c;
  PackOptions& o = c.pack;
  std::string size = "32x32", pixels = "gray", compression = "gzip", on_error = "skip", media_files = "segments";
  bool float_audio = false;
  int zstd_level = 3;
  po::options_description options("avtrain-shards pack options");
  options.add_options()
      ("help,h", "print this help")
      ("manifest", po::value(&o.manifest),
       "CSV with a header: path and label (a class) or labels (\"dog,bark\": multi-label, shard format v2) required; "
       "audio_path, start, duration optional")
      ("tree", po::value(&o.tree), "a folder DIR/<class>/<file>: the class is the folder's name")
      ("audioset-csv", po::value(&o.audioset.segments),
       "AudioSet's segments CSV (YTID, start_seconds, end_seconds, \"mid,...\"): multi-label, with --class-index and --media")
      ("class-index", po::value(&o.audioset.class_index), "AudioSet's class_labels_indices.csv (index,mid,display_name)")
      ("media", po::value(&o.audioset.media), "the folder of the downloaded AudioSet files, YTID.* or YYTID.* (sub-folders too)")
      ("media-files", po::value(&media_files)->default_value(media_files),
       "segments (a file holds its 10 s segment alone, as PANNs' and AST's download scripts cut them) or videos "
       "(the whole video: the segment read from start_seconds)")
      ("out", po::value(&o.out), "the shard set's folder (created; an interrupted pack there continues)")
      ("classes", po::value(&o.classes_file), "class list, one name per line, in label order (default: the labels sorted)")
      ("val-fraction", po::value(&o.val_fraction)->default_value(0.0, "0"),
       "> 0: this share of the clips (keyed by each file's path: a file keeps its side when files are added) "
       "into OUT/val, the rest into OUT/train, both with the same class list")
      ("duration", po::value(&o.shape.seconds)->default_value(1.0), "clip length, s: longer is cut, shorter padded")
      ("sample-rate", po::value(&o.shape.sample_rate)->default_value(8000), "audio rate, Hz (resampled; mono mix-down)")
      ("float-audio", po::bool_switch(&float_audio), "store audio as float32 instead of int16 PCM")
      ("fps", po::value(&o.shape.fps)->default_value(8.0), "video frames per second (frames chosen by presentation time)")
      ("size", po::value(&size)->default_value(size), "frame WIDTHxHEIGHT: scaled to cover keeping the aspect, centre-cropped")
      ("pixels", po::value(&pixels)->default_value(pixels), "gray or rgb")
      ("shard-size", po::value(&o.shard_size)->default_value(o.shard_size), "clips of the list per shard")
      ("compression", po::value(&compression)->default_value(compression), "gzip (shuffle + deflate), zstd (shuffle + zstd, HDF5 filter 32015) or none")
      ("gzip-level", po::value(&o.gzip_level)->default_value(o.gzip_level), "deflate level 1..9")
      ("zstd-level", po::value(&zstd_level)->default_value(zstd_level), "zstd level 1..22 (--compression zstd)")
      ("on-error", po::value(&on_error)->default_value(on_error), "skip (report the clip and go on) or fail (stop the pack)")
      ("max-damaged", po::value(&o.max_damaged)->default_value(o.max_damaged, "0.05"),
       "a clip with more of a stream's packets damaged is skipped; at or under it, packed with a warning (damaged packets skipped)")
      ("threads", po::value(&c.threads)->default_value(0), "clips decoded at once per rank (0: the cores this rank may use)")
      ("overwrite", po::bool_switch(&c.overwrite), "start again in an --out that holds another pack")
      ("progress-s", po::value(&c.progress_s)->default_value(5.0), "seconds between progress lines on stderr (0: none)")
      ("debug-delay-ms", po::value(&o.debug_delay_ms)->default_value(0), "a pause after each clip (tests that interrupt a pack)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(options).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(std::string(e.what()) + " (see avtrain-shards pack --help)");
  }
  if (vm.count("help")) {
    if (rank == 0) {
      std::cout << "usage: avtrain-shards pack --manifest FILE.csv | --tree DIR | --audioset-csv FILE.csv --class-index FILE.csv\n"
                   "                           --media DIR   --out DIR [options]\n"
                   "       mpirun -n N avtrain-shards pack ...   (shards shared out over the ranks)\n\n"
                << options;
    }
    return std::nullopt;
  }
  int w = 0, h = 0;
  char x = 0;
  std::istringstream size_text(size);
  if (!(size_text >> w >> x >> h) || x != 'x' || !size_text.eof()) throw Error("--size \"" + size + "\" is not WIDTHxHEIGHT, e.g. 32x32");
  o.shape.width = w;
  o.shape.height = h;
  require(pixels == "gray" || pixels == "rgb", "--pixels \"" + pixels + "\" is neither gray nor rgb");
  o.shape.channels = pixels == "gray" ? 1 : 3;
  o.shape.audio_int16 = !float_audio;
  require(compression == "gzip" || compression == "zstd" || compression == "none",
          "--compression \"" + compression + "\" is not gzip, zstd or none");
  require(zstd_level >= 1 && zstd_level <= 22, "--zstd-level must be in 1..22");
  o.gzip = compression != "none";
  o.zstd_level = compression == "zstd" ? zstd_level : 0;
  require(on_error == "skip" || on_error == "fail", "--on-error \"" + on_error + "\" is neither skip nor fail");
  o.fail_on_error = on_error == "fail";
  require(media_files == "segments" || media_files == "videos", "--media-files \"" + media_files + "\" is neither segments nor videos");
  o.audioset.whole_videos = media_files == "videos";
  require(c.threads >= 0, "--threads must be >= 0");
  return c;
}

// The cores this rank may use: its affinity set, shared with the other ranks of the node when it is
// the whole node (no binding).
int default_threads(MPI_Comm world) {
  cpu_set_t set;
  int cores = 1;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  const int all = int(std::thread::hardware_concurrency());
  if (cores >= all && local > 1) cores = std::max(1, cores / local);
  return std::max(1, cores);
}

// Every rank runs `phase`; when one fails, the lowest such rank prints its line and all return false.
template <class Phase>
bool every_rank(MPI_Comm world, int rank, int size, Phase phase) {
  std::string error;
  try {
    phase();
  } catch (const std::exception& e) {
    error = e.what();
  }
  int first = error.empty() ? size : rank, lowest = size;
  MPI_Allreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, world);
  if (lowest == size) return true;
  if (rank == lowest) {
    std::cerr << "avtrain-shards pack: " << (rank > 0 ? "[rank " + std::to_string(rank) + "] " : "") << error << '\n';
  }
  return false;
}

// "1 clip", "3 clips", "2 classes".
std::string count_of(std::int64_t n, const std::string& one, const std::string& many = "") {
  return std::to_string(n) + " " + (n == 1 ? one : many.empty() ? one + "s" : many);
}

std::string duration_text(double s) {
  if (!std::isfinite(s)) return "?";
  const auto t = static_cast<long long>(std::llround(s));
  std::ostringstream text;
  if (t >= 3600) text << t / 3600 << "h" << (t % 3600) / 60 << "m";
  else if (t >= 60) text << t / 60 << "m" << t % 60 << "s";
  else text << t << "s";
  return text.str();
}

// The clips known unreadable before decoding (AudioSet segments without a media file, labels outside
// --classes): how many, and the first one's reason; the report lists them all.
void report_unreadable(const PackPlan& plan) {
  std::int64_t unreadable = 0;
  const ClipEntry* first = nullptr;
  for (const ClipEntry& clip : plan.list.clips) {
    if (clip.unreadable.empty()) continue;
    if (!first) first = &clip;
    ++unreadable;
  }
  if (!first) return;
  std::cerr << "avtrain-shards pack: " << count_of(unreadable, "clip") << " of " << plan.list.clips.size()
            << " cannot be packed"
            << (plan.options.fail_on_error ? ": --on-error fail stops at the first" : " and will be reported as skipped")
            << " (the first, line " << first->line << ": " << first->unreadable << ")\n";
}

// Packs one shard set (the whole input, or a side of a split) over the ranks.
int pack_set(MPI_Comm world, int rank, int size, const std::optional<Command>& command, PackPlan& plan) {
  if (!every_rank(world, rank, size, [&] {
        if (rank == 0) prepare_output(plan, command->overwrite);
      }))
    return kExitFailed;

  // Rank 0 says which shards are left; they are dealt out round-robin.
  std::vector<int> left;
  std::int64_t clips_before = 0;
  if (!every_rank(world, rank, size, [&] {
        if (rank != 0) return;
        for (int shard = 0; shard < plan.shards(); ++shard) {
          if (shard_finished(plan, shard)) clips_before += plan.end_clip(shard) - plan.first_clip(shard);
          else left.push_back(shard);
        }
      }))
    return kExitFailed;
  int count = int(left.size());
  MPI_Bcast(&count, 1, MPI_INT, 0, world);
  left.resize(std::size_t(count));
  MPI_Bcast(left.data(), count, MPI_INT, 0, world);
  MPI_Bcast(&clips_before, 1, MPI_INT64_T, 0, world);
  std::int64_t clips_left = 0;
  for (const int shard : left) clips_left += plan.end_clip(shard) - plan.first_clip(shard);

  const int threads = command->threads > 0 ? command->threads : default_threads(world);
  const std::int64_t clips_total = static_cast<std::int64_t>(plan.list.clips.size());
  if (rank == 0) {
    std::cerr << "avtrain-shards pack: " << count_of(clips_total, "clip") << ", "
              << count_of(std::int64_t(plan.list.class_names.size()), "class", "classes") << ", "
              << count_of(plan.shards(), "shard") << " into " << plan.options.out << " on "
              << count_of(size, "rank") << " x " << count_of(threads, "thread");
    if (clips_before > 0) std::cerr << "; " << count_of(plan.shards() - count, "shard") << " done before, continuing";
    std::cerr << '\n';
    report_unreadable(plan);
    if (count > 0 && count < size) {
      std::cerr << "avtrain-shards pack: only " << count << " shard" << (count > 1 ? "s" : "") << " to write for " << size
                << " ranks: " << size - count << " will wait (a smaller --shard-size shares the work out)\n";
    }
  }

  const ShardPacker packer(plan, threads);
  RankTotals totals(world, kCounters, kLag);
  std::int64_t packed = 0, skipped = 0;  // since the last tick
  std::string fatal;                     // this rank's error
  bool stop = false;                     // learned from a tick: every rank stops after the same one
  bool failed = false, signalled = false;  // why, as the tick said
  std::int64_t packed_all = 0, skipped_all = 0;  // over the ranks, as far as the ticks have told
  const Clock::time_point started = Clock::now();
  Clock::time_point last_line = started;

  auto tick = [&](bool done) {
    const std::vector<std::int64_t> values = {packed, skipped, fatal.empty() ? 0 : 1, stop_signal() != 0 ? 1 : 0, done ? 1 : 0};
    packed = skipped = 0;
    const std::vector<std::int64_t> sum = totals.add(values);
    if (sum.empty()) return;
    packed_all += sum[kPacked];
    skipped_all += sum[kSkipped];
    failed = sum[kFailed] > 0;
    signalled = sum[kSignal] > 0;
    stop = failed || signalled || sum[kRankDone] == size;
    const Clock::time_point now = Clock::now();
    if (rank == 0 && command->progress_s > 0 &&
        std::chrono::duration<double>(now - last_line).count() >= command->progress_s) {
      last_line = now;
      const double seconds = std::chrono::duration<double>(now - started).count();
      const std::int64_t done_now = packed_all + skipped_all;
      const double rate = seconds > 0 ? double(done_now) / seconds : 0.0;
      std::cerr << "avtrain-shards pack: " << clips_before + done_now << "/" << clips_total << " clips";
      if (skipped_all > 0) std::cerr << " (" << skipped_all << " skipped)";
      std::cerr.precision(3);
      std::cerr << ", " << rate << " clips/s, ETA "
                << duration_text(rate > 0 ? double(clips_left - done_now) / rate : INFINITY) << '\n';
    }
  };

  for (std::size_t p = std::size_t(rank); p < left.size() && !stop && fatal.empty() && stop_signal() == 0; p += std::size_t(size)) {
    const int shard = left[p];
    try {
      const std::optional<ShardOutcome> outcome = packer.pack(
          shard,
          [&](const BlockDone& block) {
            packed += block.packed;
            skipped += block.skipped;
            if (plan.options.fail_on_error && block.first_failure && fatal.empty()) {
              const ClipFailure& f = *block.first_failure;
              fatal = f.path + ": " + f.reason + " (line " + std::to_string(f.line) + "; --on-error fail)";
              std::cerr << "avtrain-shards pack: " << (rank > 0 ? "[rank " + std::to_string(rank) + "] " : "") << fatal << '\n';
            }
            tick(false);
            return !stop && fatal.empty();
          },
          [&] { return stop || stop_signal() != 0; });
      if (outcome) record_shard(plan, *outcome);
    } catch (const std::exception& e) {
      fatal = plan.shard_path(shard) + ": " + e.what();
      std::cerr << "avtrain-shards pack: " << (rank > 0 ? "[rank " + std::to_string(rank) + "] " : "") << fatal << '\n';
    }
  }
  while (!stop) tick(true);  // idle ticks (paced by the others) until every rank has learned the end
  totals.finish();
  MPI_Barrier(world);

  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (failed) return kExitFailed;
  if (signalled) {
    if (rank == 0) {
      std::cerr << "avtrain-shards pack: stopped by a signal; the complete shards are kept: run the same command again "
                   "to continue\n";
    }
    return kExitStoppedEarly;
  }
  int code = kExitDone;
  if (!every_rank(world, rank, size, [&] {
        if (rank != 0) return;
        const std::vector<ShardOutcome> outcomes = read_outcomes(plan);
        require(int(outcomes.size()) == plan.shards(), "some shards are not finished (" +
                                                           std::to_string(plan.shards() - int(outcomes.size())) + ")");
        std::int64_t samples = 0, failures = 0, warnings = 0, files = 0;
        for (const ShardOutcome& o : outcomes) {
          samples += o.samples;
          failures += std::int64_t(o.failures.size());
          warnings += std::int64_t(o.warnings.size());
          files += o.samples > 0 ? 1 : 0;
        }
        const std::string report = write_report(plan, outcomes);
        const double rate = seconds > 0 ? double(clips_left) / seconds : 0.0;
        std::cout.precision(3);
        std::cout << "avtrain-shards pack: " << count_of(samples, "clip") << " packed into " << count_of(files, "shard") << " in "
                  << plan.options.out << ", " << failures << " skipped, " << warnings << " with warnings";
        if (failures + warnings > 0) std::cout << " (" << report << ")";
        if (clips_left == 0) {
          std::cout << "; the pack was complete already\n";
        } else {
          std::cout << "; " << count_of(clips_left, "clip") << " decoded in " << seconds << " s, " << rate << " clips/s on "
                    << count_of(size, "rank") << " x " << count_of(threads, "thread")
                    << '\n';
        }
        if (samples == 0) {
          code = kExitFailed;
          std::cerr << "avtrain-shards pack: no clip could be packed (" << report << " says why)\n";
        }
      }))
    return kExitFailed;
  MPI_Bcast(&code, 1, MPI_INT, 0, world);
  return code;
}

int run(int argc, char** argv) {
  MPI_Comm world = MPI_COMM_WORLD;
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);

  std::optional<Command> command;
  std::vector<PackPlan> plans;  // the whole input, or --val-fraction's training and validation sides
  if (!every_rank(world, rank, size, [&] {
        command = parse(argc, argv, rank);
        if (!command) return;
        const PackPlan whole = make_plan(command->pack);
        plans = whole.options.val_fraction > 0 ? split_plans(whole) : std::vector<PackPlan>{whole};
      }))
    return kExitFailed;
  if (!command) return kExitDone;
  for (PackPlan& plan : plans) {
    const int code = pack_set(world, rank, size, command, plan);
    if (code != kExitDone) return code;
  }
  if (plans.size() == 2 && rank == 0)
    std::cout << "avtrain-shards pack: training set " << plans[0].options.out << " (" << plans[0].list.clips.size()
              << " clips), validation set " << plans[1].options.out << " (" << plans[1].list.clips.size()
              << "), the same " << count_of(std::int64_t(plans[0].list.class_names.size()), "class", "classes")
              << ": train with --data " << plans[0].options.out << " --data.val_dir " << plans[1].options.out << '\n';
  return kExitDone;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  install_stop_signals();
  media::quiet_ffmpeg_log();
  int code = kExitFailed;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "avtrain-shards pack: " << e.what() << '\n';
    MPI_Abort(MPI_COMM_WORLD, kExitFailed);
  }
  MPI_Finalize();
  return code;
}
