// The dry run's activation bytes under precision.mode fp8 (measure_micro_batches, what --dry-run
// prints): an FP8 linear's input is kept as the E4M3 copy its forward made (1 byte an element and a
// 4-byte scale) in place of the 2-byte bf16 copy, so every layer holding an FP8 linear keeps less than
// in bf16; a layer whose linears are all left in bf16 (both blocks of a net of two under
// fp8_first_last_bf16) keeps what bf16 does.
#include <gtest/gtest.h>

#include "train/memory_probe.hpp"

namespace avtrain {
namespace {

data::SetInfo small_set() {
  data::SetInfo s;
  s.sample_rate = 4000;
  s.fps = 4;
  s.num_classes = 5;
  s.audio_samples = 600;
  s.frames = 4;
  s.height = 8;
  s.width = 8;
  s.channels = 3;
  return s;
}

ModelConfig small_model() {
  ModelConfig m;
  m.width = 16;
  m.depth = 2;
  m.heads = 2;
  m.mlp_ratio = 2;
  m.audio_window = 64;
  m.audio_hop = 32;
  m.mel_bins = 8;
  m.tubelet_frames = 2;
  m.patch = 4;
  return m;
}

MicroBatchMemory kept(PrecisionMode mode, bool first_last_bf16 = false) {
  PrecisionConfig p;
  p.mode = mode;
  p.fp8_first_last_bf16 = first_last_bf16;
  return measure_micro_batches(small_model(), small_set(), p, Recompute::none, 1).at(3);
}

TEST(MemoryProbeFp8, EveryLayerWithAnFp8LinearKeepsItsInputInOneByte) {
  const MicroBatchMemory bf16 = kept(PrecisionMode::bf16), fp8 = kept(PrecisionMode::fp8);
  ASSERT_EQ(bf16.layers.size(), 4u);  // input, blocks.0, blocks.1, head
  ASSERT_EQ(fp8.layers.size(), 4u);
  for (std::size_t i = 0; i < bf16.layers.size(); ++i) {
    EXPECT_LT(fp8.layers[i], bf16.layers[i]) << "layer " << i;
    EXPECT_GT(fp8.layers[i], bf16.layers[i] / 2) << "layer " << i;  // only the linears' inputs halve
  }
  EXPECT_LT(fp8.kept(), bf16.kept());
  // The two blocks alike (measured as one), as in bf16.
  EXPECT_EQ(fp8.layers[1], fp8.layers[2]);
}

TEST(MemoryProbeFp8, BlocksLeftInBf16KeepBf16sBytes) {
  const MicroBatchMemory bf16 = kept(PrecisionMode::bf16), edges = kept(PrecisionMode::fp8, true);
  ASSERT_EQ(edges.layers.size(), 4u);
  EXPECT_LT(edges.layers[0], bf16.layers[0]);  // video.patch in FP8
  EXPECT_EQ(edges.layers[1], bf16.layers[1]);
  EXPECT_EQ(edges.layers[2], bf16.layers[2]);
  EXPECT_LT(edges.layers[3], bf16.layers[3]);  // head.cls in FP8
}

}  // namespace
}  // namespace avtrain
