// avtrain-shards read-bench: how fast the training reader delivers a shard set's samples, with no
// model behind it. Opens the set as a run does (every header, the values as data.check_values), then reads
// shuffled micro-batches through the same Prefetcher (its reader threads) and counts samples, bytes
// and the CPU time the process spent: samples/s, MB/s decoded, MB/s read from the files, and per
// core (per CPU-second); and what opening the set read (/proc/self/io's rchar: the bytes a start
// reads before its first step). docs/data-reader.md has the table validation/data-bench.sh makes with it.
#include "app/shards_read_bench.hpp"

#include <sys/resource.h>

#include <boost/program_options.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <future>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "data/prefetcher.hpp"
#include "data/raw_chunks.hpp"
#include "data/sampler.hpp"
#include "data/shard_set.hpp"

namespace avtrain {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

// User plus system CPU seconds of the whole process (every thread) so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

// Bytes this process has read through read(2)/pread(2) so far, page cache hits included
// (/proc/self/io's rchar); -1 where the kernel does not say.
double bytes_read() {
  std::ifstream io("/proc/self/io");
  std::string key;
  double value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int read_bench(const std::vector<std::string>& args) {
  std::string dir;
  int micro_batch = 32, ahead = -1, threads = 1;
  double seconds = 10;
  std::int64_t max_batches = 0;
  std::uint64_t seed = 1;
  bool json = false;
  std::string check = "sample";
  po::options_description options("avtrain-shards read-bench options");
  options.add_options()
      ("help,h", "print this help")
      ("data", po::value(&dir)->required(), "the shard set's directory")
      ("micro-batch", po::value(&micro_batch)->default_value(micro_batch), "samples per read, as train.micro_batch")
      ("ahead", po::value(&ahead)->default_value(ahead), "micro-batches submitted ahead of the one collected (-1: 2 per reader thread)")
      ("reader-threads", po::value(&threads)->default_value(threads), "reader threads, as data.reader_threads")
      ("seconds", po::value(&seconds)->default_value(seconds), "read for about this long (whole micro-batches)")
      ("batches", po::value(&max_batches)->default_value(max_batches), "stop after this many micro-batches (0: --seconds)")
      ("seed", po::value(&seed)->default_value(seed), "the shuffle's seed (train.seed)")
      ("check-values", po::value(&check)->default_value(check), "what opening reads of the values, as data.check_values: sample or full")
      ("json", po::bool_switch(&json), "one JSON object instead of the line");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: avtrain-shards read-bench --data DIR [options]\n\n"
                 "Reads shuffled micro-batches of the set through the training reader (--reader-threads)\n"
                 "with no model behind it and prints samples/s, MB/s and the rate per core.\n\n"
              << options;
    return 0;
  }
  po::notify(vm);
  require(micro_batch >= 1, "read-bench: --micro-batch must be at least 1");
  require(ahead >= -1, "read-bench: --ahead must be at least 0 (or -1: 2 per reader thread)");
  require(threads >= 1, "read-bench: --reader-threads must be at least 1");
  if (ahead < 0) ahead = 2 * threads;
  require(seconds > 0 || max_batches > 0, "read-bench: --seconds or --batches must be positive");
  const std::optional<data::CheckValues> values = parse_enum<data::CheckValues>(check);
  require(values.has_value(), "read-bench: --check-values " + check + ": must be one of " + enum_words<data::CheckValues>());

  const auto t_open = Clock::now();
  const double cpu_open = cpu_seconds(), read_before_open = bytes_read();
  std::unique_ptr<data::ShardSet> set = data::ShardSet::open(dir, {0, 1, *values});
  const double open_s = seconds_since(t_open), open_cpu = cpu_seconds() - cpu_open;
  const double open_read = read_before_open < 0 ? -1 : bytes_read() - read_before_open;
  const data::SetInfo& info = set->info();
  require(info.total_samples >= micro_batch, "read-bench: " + dir + " holds " + std::to_string(info.total_samples) +
                                                 " samples, fewer than one micro-batch of " +
                                                 std::to_string(micro_batch));
  std::uint64_t file_bytes = 0;
  for (const data::ShardFile& f : info.shards) file_bytes += f.bytes;
  const double stored_per_sample = double(file_bytes) / double(info.total_samples);
  const double decoded_per_sample =
      double(info.audio_samples) * (info.audio_int16 ? 2.0 : 4.0) +
      double(info.frames) * info.height * info.width * info.channels;

  // The training order: every sample (no validation split), shuffled per epoch by the seed, one
  // micro-batch per step.
  data::Sampler sampler(info.total_samples, 0.0, seed, micro_batch);
  data::Prefetcher reader(*set, threads);
  std::deque<std::future<data::MicroBatch>> queued;
  std::int64_t submitted = 0, done = 0, samples = 0;
  const auto t0 = Clock::now();
  const double cpu0 = cpu_seconds(), lock0 = data::TimedHdf5Lock::held_seconds();
  auto more = [&] {
    return max_batches > 0 ? submitted < max_batches : seconds_since(t0) < seconds;
  };
  while (more() && std::int64_t(queued.size()) <= ahead) queued.push_back(reader.submit(sampler.batch(submitted++)));
  while (!queued.empty()) {
    const data::MicroBatch b = queued.front().get();
    queued.pop_front();
    ++done;
    samples += b.size;
    if (more()) queued.push_back(reader.submit(sampler.batch(submitted++)));
  }
  const double wall = seconds_since(t0), cpu = cpu_seconds() - cpu0;
  // The share of the reading's CPU time spent holding the HDF5 lock, s: threads overlap the rest, so
  // n cores give at most 1 / (s + (1 - s) / n) times one core's rate (Amdahl).
  const double lock_share = cpu > 0 ? (data::TimedHdf5Lock::held_seconds() - lock0) / cpu : 0.0;
  const auto speedup = [&](int n) { return 1.0 / (lock_share + (1.0 - lock_share) / n); };
  const double rate = double(samples) / wall;
  const double mb = 1e6;
  nlohmann::json r = {{"data", dir},
                      {"samples", samples},
                      {"micro_batch", micro_batch},
                      {"micro_batches", done},
                      {"reader_threads", threads},
                      {"seconds", wall},
                      {"cpu_seconds", cpu},
                      {"samples_per_s", rate},
                      {"decoded_mb_per_s", rate * decoded_per_sample / mb},
                      {"file_mb_per_s", rate * stored_per_sample / mb},
                      {"samples_per_cpu_s", cpu > 0 ? double(samples) / cpu : 0.0},
                      {"decoded_mb_per_sample", decoded_per_sample / mb},
                      {"stored_mb_per_sample", stored_per_sample / mb},
                      {"open_s", open_s},
                      {"open_cpu_s", open_cpu},
                      {"open_read_mb", open_read / mb},
                      {"set_samples", info.total_samples},
                      {"set_mb", double(file_bytes) / mb},
                      {"lock_share", lock_share},
                      {"speedup_limit_4_cores", speedup(4)}};
  if (json) {
    std::cout << r.dump() << "\n";
    return 0;
  }
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << "read-bench " << dir << ": " << samples << " samples in " << done
       << " micro-batches of " << micro_batch << ", " << threads << (threads == 1 ? " reader thread: " : " reader threads: ") << rate << " samples/s, "
       << rate * decoded_per_sample / mb << " MB/s decoded (" << std::setprecision(3) << decoded_per_sample / mb
       << " MB a sample), " << std::setprecision(1) << rate * stored_per_sample / mb << " MB/s of the files ("
       << std::setprecision(3) << stored_per_sample / mb << " MB a sample stored); " << std::setprecision(2) << cpu / wall << " CPU-s per s, "
       << std::setprecision(1) << (cpu > 0 ? double(samples) / cpu : 0.0) << " samples per CPU-second; opening "
       << std::setprecision(2) << open_s << " s, reading " << open_read / mb << " MB of the set's "
       << double(file_bytes) / mb << " MB (the start's checks); the HDF5 lock held " << std::setprecision(1)
       << 100 * lock_share << " % of the CPU time: 4 cores give at most " << std::setprecision(2) << speedup(4)
       << "x one core's rate\n";
  std::cout << line.str();
  return 0;
}

}  // namespace avtrain
