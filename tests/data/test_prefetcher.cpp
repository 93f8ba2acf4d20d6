#include <thread>
// The prefetcher returns exactly what a direct read returns, in submission order, and forwards errors.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "data/prefetcher.hpp"
#include "data/synthetic.hpp"
#include "temp_dir.hpp"

namespace avtrain::data {
namespace {

void expect_same(const MicroBatch& a, const MicroBatch& b) {
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.audio, b.audio);
  EXPECT_EQ(a.audio_len, b.audio_len);
  EXPECT_EQ(a.video, b.video);
  EXPECT_EQ(a.video_len, b.video_len);
  EXPECT_EQ(a.label, b.label);
}

class PrefetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions o;
    o.out_dir = dir.str();
    o.shards = 3;
    o.samples_per_shard = 6;
    o.audio_samples = 300;
    o.frames = 4;
    o.height = 16;
    o.width = 16;
    write_synthetic(o);
    set = ShardSet::open(dir.str());
  }
  test::TempDir dir;
  std::unique_ptr<ShardSet> set;
  const std::vector<std::vector<std::int64_t>> batches = {{0, 1, 2, 3}, {17, 5, 6, 5}, {12}, {9, 8, 7, 11, 10}};
};

TEST_F(PrefetcherTest, ReturnsWhatADirectReadReturns) {
  std::vector<MicroBatch> direct;
  for (const auto& indices : batches) direct.push_back(set->read(indices));  // before the reader thread exists
  Prefetcher prefetcher(*set);
  std::vector<std::future<MicroBatch>> pending;
  for (const auto& indices : batches) pending.push_back(prefetcher.submit(indices));
  for (std::size_t i = 0; i < batches.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(i));
    expect_same(pending[i].get(), direct[i]);
  }
}

TEST_F(PrefetcherTest, ForwardsAnErrorAndKeepsReading) {
  const MicroBatch direct = set->read(batches[0]);
  Prefetcher prefetcher(*set);
  std::future<MicroBatch> bad = prefetcher.submit({0, 18});
  std::future<MicroBatch> good = prefetcher.submit(batches[0]);
  EXPECT_THROW(bad.get(), Error);
  expect_same(good.get(), direct);
}

TEST_F(PrefetcherTest, DestructorFinishesQueuedReads) {
  std::vector<std::future<MicroBatch>> pending;
  {
    Prefetcher prefetcher(*set);
    for (int repeat = 0; repeat < 20; ++repeat) {
      for (const auto& indices : batches) pending.push_back(prefetcher.submit(indices));
    }
  }
  for (std::size_t i = 0; i < pending.size(); ++i) {
    ASSERT_EQ(pending[i].wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_EQ(pending[i].get().index, batches[i % batches.size()]);
  }
}

// Several reader threads: the micro-batches come out of their futures in submission order, each the
// same bytes as the one-thread reader's (and a direct read's), whatever thread read it and when.
TEST_F(PrefetcherTest, ThreadsGiveTheOneThreadBytesInSubmissionOrder) {
  std::vector<std::vector<std::int64_t>> many;
  for (int repeat = 0; repeat < 12; ++repeat)
    for (const auto& indices : batches) many.push_back(indices);
  many.push_back({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  std::vector<MicroBatch> one;
  {
    Prefetcher single(*set, 1);
    std::vector<std::future<MicroBatch>> pending;
    for (const auto& indices : many) pending.push_back(single.submit(indices));
    for (auto& f : pending) one.push_back(f.get());
  }
  for (const int threads : {2, 4}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    Prefetcher prefetcher(*set, threads);
    EXPECT_EQ(prefetcher.threads(), threads);
    std::vector<std::future<MicroBatch>> pending;
    for (const auto& indices : many) pending.push_back(prefetcher.submit(indices, Fields::all));
    for (std::size_t i = 0; i < many.size(); ++i) expect_same(pending[i].get(), one[i]);
    // labels only, too
    const MicroBatch labels = prefetcher.submit(batches[1], Fields::labels).get();
    EXPECT_EQ(labels.label, one[1].label);
    EXPECT_TRUE(labels.audio.empty());
  }
}

// An error in one micro-batch reaches its own future; the ones around it, read on other threads, arrive whole.
TEST_F(PrefetcherTest, ThreadsForwardAnErrorToTheRightFuture) {
  const MicroBatch a = set->read(batches[0]), b = set->read(batches[3]);
  Prefetcher prefetcher(*set, 3);
  std::vector<std::future<MicroBatch>> before, after;
  for (int i = 0; i < 4; ++i) before.push_back(prefetcher.submit(batches[0]));
  std::future<MicroBatch> bad = prefetcher.submit({3, -1});
  for (int i = 0; i < 4; ++i) after.push_back(prefetcher.submit(batches[3]));
  for (auto& f : before) expect_same(f.get(), a);
  try {
    bad.get();
    FAIL() << "a negative index was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample index -1 is outside 0..17"), std::string::npos) << e.what();
  }
  for (auto& f : after) expect_same(f.get(), b);
}

TEST_F(PrefetcherTest, ThreadsFinishQueuedReadsOnDestruction) {
  std::vector<std::future<MicroBatch>> pending;
  {
    Prefetcher prefetcher(*set, 4);
    for (int repeat = 0; repeat < 20; ++repeat)
      for (const auto& indices : batches) pending.push_back(prefetcher.submit(indices));
  }
  for (std::size_t i = 0; i < pending.size(); ++i) {
    ASSERT_EQ(pending[i].wait_for(std::chrono::seconds(0)), std::future_status::ready);
    EXPECT_EQ(pending[i].get().index, batches[i % batches.size()]);
  }
}

TEST_F(PrefetcherTest, AppliesItsTransformOnTheReaderThreadAfterTheRead) {
  std::vector<MicroBatch> want;
  for (const auto& indices : batches) {  // before the reader threads exist
    want.push_back(set->read(indices));
    for (std::int32_t& l : want.back().label) l += 100;
  }
  const auto caller = std::this_thread::get_id();
  std::vector<int> on_caller(batches.size(), 1);
  Prefetcher prefetcher(*set, 2);
  std::vector<std::future<MicroBatch>> pending;
  for (std::size_t i = 0; i < batches.size(); ++i)
    pending.push_back(prefetcher.submit(batches[i], Fields::all, [&on_caller, i, caller](MicroBatch& b) {
      on_caller[i] = std::this_thread::get_id() == caller;
      for (std::int32_t& l : b.label) l += 100;
    }));
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const MicroBatch got = pending[i].get();
    EXPECT_EQ(got.label, want[i].label);
    EXPECT_EQ(got.audio, want[i].audio);
    EXPECT_EQ(got.video, want[i].video);
    EXPECT_EQ(on_caller[i], 0) << "batch " << i << " transformed on the collecting thread";
  }
}

TEST_F(PrefetcherTest, RefusesNoThreads) {
  EXPECT_THROW(Prefetcher(*set, 0), Error);
}

}  // namespace
}  // namespace avtrain::data
