// Writes the seeds of the checkpoint target's corpus (tests/fuzz/corpus/checkpoint, docs/fuzzing.md)
// into the folder given: the small stage of checkpoint_model.hpp after a few AdamW steps, written as a
// run writes it, whole (`whole`), and as two ZeRO replicas' files with the masters split (`zero2`:
// stage-0.h5 and stage-0.part-1.h5 within one input, kNextFile between them).
//   write_checkpoint_seeds DIR
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "backend/backend.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "checkpoint_model.hpp"

namespace fs = std::filesystem;
using namespace avtrain;

namespace {

void train(Backend& be, ParamStore& store, AdamW& adamw) {
  for (int step = 0; step < 3; ++step) {
    std::vector<float> g(store.total_size());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i + 7 * step));
    be.upload(store.grads().data(), g.data(), g.size() * sizeof(float));
    adamw.step(1e-2f);
  }
}

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_seed(const fs::path& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_checkpoint_seeds DIR\n");
    return 2;
  }
  const fs::path dir = argv[1];
  fs::create_directories(dir);
  const auto be = make_cpu_backend();
  checkpoint::Counters counters;
  counters.next_step = 3;
  counters.applied_steps = 3;
  counters.adamw_updates = 3;

  ParamStore whole;
  fuzz::add_checkpoint_model(whole);
  whole.allocate(1);
  AdamW adamw(*be, whole, OptimConfig{});
  train(*be, whole, adamw);
  checkpoint::StageSnapshot taken;
  taken.take(*be, whole, &adamw, counters, fuzz::checkpoint_fingerprint());
  checkpoint::write_stage((dir / "stage-0.h5").string(), taken);
  write_seed(dir / "whole", bytes_of(dir / "stage-0.h5"));
  fs::remove(dir / "stage-0.h5");

  // Two replicas, the cut inside a.weight (a piece in each file); a.weight in bf16 so the masters split.
  const std::size_t cut = 7;
  std::string zero;
  for (int r = 0; r < 2; ++r) {
    const FlatPart part = r == 0 ? FlatPart{0, cut} : FlatPart{cut, whole.total_size()};
    ParamStore s;
    fuzz::add_checkpoint_model(s);
    s.set_working_dtype(0, DType::bf16);
    s.keep_masters_of(part);
    s.allocate(1);
    AdamW o(*be, s, OptimConfig{}, part);
    train(*be, s, o);
    checkpoint::StageSnapshot replica;
    replica.take_part(*be, s, o, r == 0, counters, fuzz::checkpoint_fingerprint());
    const fs::path file = dir / (r == 0 ? "stage-0.h5" : "stage-0.part-1.h5");
    checkpoint::write_stage(file.string(), replica);
    if (r > 0) zero += fuzz::kNextFile;
    zero += bytes_of(file);
    fs::remove(file);
  }
  write_seed(dir / "zero2", zero);
  return 0;
}
