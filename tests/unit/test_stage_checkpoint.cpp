// A run's state through stage checkpoint files: what two stages write, one stage (another cut)
// loads by name, bit for bit, with the counters; a tensor of another shape and a fingerprint that
// differs are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "checkpoint/stage_checkpoint.hpp"
#include "core/error.hpp"

namespace avtrain::checkpoint {
namespace {

// A stage file as the trainer writes it: the state copied out, then written.
void write_stage(const std::string& path, Backend& be, ParamStore& store, AdamW& adamw, const Counters& c,
                 const nlohmann::json& f) {
  StageSnapshot taken;
  taken.take(be, store, &adamw, c, f);
  checkpoint::write_stage(path, taken);
}

namespace fs = std::filesystem;

// The layers a..c of a small model, registered into one store or cut into two.
void add_layers(ParamStore& s, const std::vector<std::string>& modules, int width = 4) {
  for (const std::string& m : modules) {
    s.add(m, "weight", {width, 3}, Init::normal, 0.5f, true);
    s.add(m, "bias", {width}, Init::zeros, 0.0f, false);
  }
}

std::vector<float> host(Backend& be, const Buffer& b) {
  std::vector<float> h(b.size());
  be.download(h.data(), b.data(), b.bytes());
  return h;
}

// Takes a few optimizer steps so that the moments and the weights hold something.
void train(Backend& be, ParamStore& s, AdamW& opt, int steps) {
  for (int k = 0; k < steps; ++k) {
    std::vector<float> g(s.total_size());
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i + 7 * k));
    be.upload(s.grads().data(), g.data(), g.size() * sizeof(float));
    opt.step(1e-2f);
  }
}

class StageCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("avtrain_stage_ckpt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  fs::path dir_;
  OptimConfig optim;
  nlohmann::json fingerprint = {{"model", {{"width", 4}}}, {"seed", 1}};
};

TEST_F(StageCheckpoint, TwoStagesWrittenLoadIntoOneStoreBitForBitWithTheCounters) {
  auto be = make_cpu_backend();
  ParamStore s0, s1;
  add_layers(s0, {"a", "b"});
  add_layers(s1, {"c"});
  s0.allocate(1);
  s1.allocate(1);
  AdamW o0(*be, s0, optim), o1(*be, s1, optim);
  train(*be, s0, o0, 3);
  train(*be, s1, o1, 3);
  Counters c;
  c.next_step = 42;
  c.applied_steps = 40;
  c.adamw_updates = 3;
  c.scaler = {32768.0, 17, 1, 2};
  write_stage(path("stage-0.h5"), *be, s0, o0, c, fingerprint);
  write_stage(path("stage-1.h5"), *be, s1, o1, c, fingerprint);

  ParamStore whole;
  add_layers(whole, {"a", "b", "c"});
  whole.allocate(2);  // other weights: all of them must be replaced
  AdamW ow(*be, whole, optim);
  const Checkpoint ck({path("stage-0.h5"), path("stage-1.h5")});
  EXPECT_EQ(ck.fingerprint(), fingerprint);
  EXPECT_EQ(ck.counters().next_step, 42);
  EXPECT_EQ(ck.counters().applied_steps, 40);
  EXPECT_EQ(ck.counters().scaler.scale, 32768.0);
  EXPECT_EQ(ck.counters().scaler.growth_tracker, 17);
  EXPECT_EQ(ck.counters().scaler.skipped, 2);
  ck.load(*be, whole, &ow);
  EXPECT_EQ(ow.updates(), 3);
  const auto wv = host(*be, whole.values()), wm = host(*be, ow.first_moments()), wsq = host(*be, ow.second_moments());
  for (auto* part : {&s0, &s1}) {
    AdamW& o = part == &s0 ? o0 : o1;
    const auto pv = host(*be, part->values()), pm = host(*be, o.first_moments()), psq = host(*be, o.second_moments());
    for (const ParamInfo& p : part->params()) {
      const ParamInfo* q = nullptr;
      for (const ParamInfo& x : whole.params())
        if (x.name == p.name) q = &x;
      ASSERT_NE(q, nullptr) << p.name;
      EXPECT_EQ(std::memcmp(wv.data() + q->offset, pv.data() + p.offset, p.size * sizeof(float)), 0) << p.name;
      EXPECT_EQ(std::memcmp(wm.data() + q->offset, pm.data() + p.offset, p.size * sizeof(float)), 0) << p.name;
      EXPECT_EQ(std::memcmp(wsq.data() + q->offset, psq.data() + p.offset, p.size * sizeof(float)), 0) << p.name;
    }
  }
}

TEST_F(StageCheckpoint, AMissingTensorOrAnotherShapeIsNamed) {
  auto be = make_cpu_backend();
  ParamStore s;
  add_layers(s, {"a"});
  s.allocate(1);
  AdamW o(*be, s, optim);
  write_stage(path("stage-0.h5"), *be, s, o, Counters{}, fingerprint);
  const Checkpoint ck({path("stage-0.h5")});
  // The message of loading `ck` into a model of these layers and width ("" when it loads).
  auto load_error = [&](const std::vector<std::string>& modules, int width) {
    ParamStore store;
    add_layers(store, modules, width);
    store.allocate(1);
    AdamW opt(*be, store, optim);
    try {
      ck.load(*be, store, &opt);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(load_error({"a", "b"}, 4).find("no file of it holds params/b.weight"), std::string::npos);
  EXPECT_NE(load_error({"a"}, 8).find("params/a.weight has another shape"), std::string::npos);
  EXPECT_EQ(load_error({"a"}, 4), "");
}

TEST_F(StageCheckpoint, AWeightsOnlyLoadReadsNoMoments) {
  auto be = make_cpu_backend();
  ParamStore s;
  add_layers(s, {"a"});
  s.allocate(1);
  AdamW o(*be, s, optim);
  train(*be, s, o, 2);
  write_stage(path("stage-0.h5"), *be, s, o, Counters{}, fingerprint);
  ParamStore t;
  add_layers(t, {"a"});
  t.allocate(2);
  AdamW ot(*be, t, optim);
  Checkpoint({path("stage-0.h5")}).load(*be, t, nullptr);
  EXPECT_EQ(host(*be, t.values()), host(*be, s.values()));
  EXPECT_EQ(host(*be, ot.first_moments()), std::vector<float>(t.total_size(), 0.0f));
  EXPECT_EQ(ot.updates(), 0);
}

// Under ZeRO each replica writes the file of its part: parts cut at bounds that fall inside tensors
// (a piece) and around them (whole), in fp32 (the masters whole) and with bf16 working copies (the
// masters split, written by part too). Loaded into one unsplit store, the files give the values and
// moments of the same steps on the whole store, bit for bit; without a replica's file, the load
// names the tensor whose pieces leave a gap.
TEST_F(StageCheckpoint, ReplicasPartsLoadAsTheWholeStageBitForBit) {
  auto be = make_cpu_backend();
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "masters split (bf16 working copies)" : "fp32");
    auto model = [&](ParamStore& s) {
      add_layers(s, {"a", "b", "c"});
      if (split)
        for (ParamId id = 0; id < ParamId(s.params().size()); id += 2) s.set_working_dtype(id, DType::bf16);
    };
    ParamStore whole;
    model(whole);
    whole.allocate(1);
    AdamW ow(*be, whole, optim);
    train(*be, whole, ow, 3);
    const std::vector<std::size_t> bounds = {0, 10, 29, whole.total_size()};  // cuts a.weight, b.weight
    const std::vector<float> values = host(*be, whole.values());
    std::vector<std::string> files;
    for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
      const FlatPart part{bounds[r], bounds[r + 1]};
      ParamStore s;
      model(s);
      if (split) s.keep_masters_of(part);
      s.allocate(1);
      AdamW o(*be, s, optim, part);
      train(*be, s, o, 3);
      s.load(values);  // what the all-gather leaves: every replica holds the whole weights
      Counters c;
      c.adamw_updates = o.updates();
      StageSnapshot taken;
      taken.take_part(*be, s, o, r == 0, c, fingerprint);
      files.push_back(path(r == 0 ? "stage-0.h5" : "stage-0.part-" + std::to_string(r) + ".h5"));
      checkpoint::write_stage(files.back(), taken);
    }
    ParamStore loaded;
    add_layers(loaded, {"a", "b", "c"});
    loaded.allocate(2);
    AdamW ol(*be, loaded, optim);
    Checkpoint(files).load(*be, loaded, &ol);
    EXPECT_EQ(host(*be, loaded.values()), host(*be, whole.values()));
    EXPECT_EQ(host(*be, ol.first_moments()), host(*be, ow.first_moments()));
    EXPECT_EQ(host(*be, ol.second_moments()), host(*be, ow.second_moments()));
    EXPECT_EQ(ol.updates(), ow.updates());
    try {
      Checkpoint({files[0], files[2]}).load(*be, loaded, &ol);
      ADD_FAILURE() << "loaded without replica 1's file";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(split ? "params/a.weight: its pieces end at element 10 of 12"
                                                 : "adamw/m/a.weight: its pieces end at element 10 of 12"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(FingerprintDifference, NamesTheFirstFieldThatDiffers) {
  const nlohmann::json a = {{"model", {{"width", 128}, {"depth", 4}}}, {"seed", 1}, {"global_batch", 64}};
  nlohmann::json b = a;
  EXPECT_EQ(fingerprint_difference(a, b), "");
  b["model"]["width"] = 64;
  EXPECT_EQ(fingerprint_difference(a, b), "model.width: 128 in the checkpoint, 64 in this run");
  b = a;
  b["precision"] = "bf16";
  EXPECT_EQ(fingerprint_difference(a, b), "precision: absent from the checkpoint");
  b = a;
  b.erase("seed");
  EXPECT_EQ(fingerprint_difference(a, b), "seed: in the checkpoint, absent from this run");
}

}  // namespace
}  // namespace avtrain::checkpoint
