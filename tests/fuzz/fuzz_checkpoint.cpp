// A checkpoint, as `avtrain --resume` and avtrain-export read one (src/checkpoint/stage_checkpoint.cpp,
// checkpoint_file.cpp): the input holds the stage's files (checkpoint_model.hpp: stage-0.h5, then a
// ZeRO replica's part after each kNextFile). They are opened (format version, fingerprint, counters, which
// must then be in the ranges a run writes), the fingerprint compared with the run's, then loaded as a resume loads them (every tensor of the
// store and its AdamW moments, by name, whole or from pieces), as an evaluation loads them (the
// weights alone), and read as avtrain-export reads them (every tensor the files hold under params/,
// in the shape they say). Beside libFuzzer's byte mutations, the fuzz preset changes single values of
// the files through HDF5 (hdf5_value_mutator.cpp): a byte mutation of their metadata fails its checksum.
#include <cmath>
#include <memory>
#include <optional>

#include "backend/backend.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "checkpoint_model.hpp"
#include "fuzz_input.hpp"
#include "hdf5_value_mutator.hpp"

namespace {

std::vector<std::string_view> split_files(std::string_view input) {
  std::vector<std::string_view> files;
  for (std::size_t at; (at = input.find(avtrain::fuzz::kNextFile)) != std::string_view::npos;) {
    files.push_back(input.substr(0, at));
    input.remove_prefix(at + avtrain::fuzz::kNextFile.size());
  }
  files.push_back(input);
  return files;
}

}  // namespace

// The stage's files (the fuzz preset changes their values with hdf5_value_mutator.cpp).
std::vector<std::string_view> avtrain::fuzz::hdf5_files_of(std::string_view input) { return split_files(input); }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace avtrain;
  static const std::unique_ptr<Backend> be = make_cpu_backend();
  static ParamStore* const store = [] {
    auto* s = new ParamStore;
    fuzz::add_checkpoint_model(*s);
    s->allocate(1);
    return s;
  }();
  static AdamW* const adamw = new AdamW(*be, *store, OptimConfig{});

  const fuzz::Scratch scratch;
  std::vector<std::string> files;
  for (const std::string_view bytes : split_files(fuzz::as_text(data, size))) {
    const std::size_t r = files.size();
    files.push_back(scratch.write(r == 0 ? "stage-0.h5" : "stage-0.part-" + std::to_string(r) + ".h5", bytes));
  }
  std::optional<checkpoint::Checkpoint> ck;
  fuzz::refusal_is_one_line([&] { ck.emplace(files); });
  if (!ck) return 0;
  const checkpoint::Counters& c = ck->counters();
  if (c.next_step < 0 || c.applied_steps < 0 || c.applied_steps > c.next_step || c.adamw_updates < 0 ||
      !std::isfinite(c.scaler.scale) || c.scaler.scale <= 0 || c.scaler.skipped < 0 || !std::isfinite(c.elapsed_s) ||
      c.elapsed_s < 0) {
    std::fprintf(stderr, "fuzz: a checkpoint accepted with counters out of range: step %lld, applied %lld, updates %d, "
                 "scale %g, skipped %lld, elapsed %g s\n", (long long)c.next_step, (long long)c.applied_steps,
                 c.adamw_updates, c.scaler.scale, (long long)c.scaler.skipped, c.elapsed_s);
    std::abort();
  }
  (void)checkpoint::fingerprint_difference(ck->fingerprint(), fuzz::checkpoint_fingerprint()).size();
  // Each reader on its own, as each is a program's: a resume, an evaluation, avtrain-export.
  fuzz::refusal_is_one_line([&] { ck->load(*be, *store, adamw); });
  fuzz::refusal_is_one_line([&] { ck->load(*be, *store, nullptr); });
  fuzz::refusal_is_one_line([&] {
    for (const auto& [name, shape] : ck->held("params")) (void)ck->tensor("params/" + name, shape).size();
  });
  return 0;
}
