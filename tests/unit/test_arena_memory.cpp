// ArenaMemory: first fit inside one block, zeroed ranges, merging on release, a full arena named.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/arena_memory.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"

namespace avtrain {
namespace {

TEST(ArenaMemory, HandsOutAlignedZeroedRangesInsideItsBlock) {
  ArenaMemory arena(host_memory(), 4096, "device.arena_mb");
  auto* a = static_cast<unsigned char*>(arena.allocate(100));
  auto* b = static_cast<unsigned char*>(arena.allocate(300));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(b - a, 256);  // 100 bytes take one 256-byte unit
  EXPECT_EQ(arena.in_use(), 256u + 512u);
  std::memset(b, 0xab, 300);
  arena.deallocate(b);
  auto* c = static_cast<unsigned char*>(arena.allocate(300));
  EXPECT_EQ(c, b);  // first fit reuses the released range
  for (int i = 0; i < 300; ++i) ASSERT_EQ(c[i], 0) << i;  // and hands it out zeroed
  EXPECT_EQ(arena.peak_bytes(), 768u);
}

TEST(ArenaMemory, ReleasedNeighboursMergeSoALargerRangeFits) {
  ArenaMemory arena(host_memory(), 1024, "device.arena_mb");
  void* a = arena.allocate(256);
  void* b = arena.allocate(256);
  void* c = arena.allocate(256);
  void* d = arena.allocate(256);
  EXPECT_THROW(arena.allocate(1), Error);
  arena.deallocate(b);
  arena.deallocate(c);  // b and c merge: 512 contiguous bytes
  void* bc = arena.allocate(512);
  EXPECT_EQ(bc, b);
  arena.deallocate(a);
  arena.deallocate(bc);
  arena.deallocate(d);
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_NO_THROW(arena.deallocate(arena.allocate(1024)));  // everything merged back into one range
}

TEST(ArenaMemory, AFullArenaNamesItsSizeOption) {
  ArenaMemory arena(host_memory(), 512, "device.arena_mb");
  arena.allocate(512);
  try {
    arena.allocate(4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raise device.arena_mb"), std::string::npos) << e.what();
  }
}

TEST(ArenaMemory, BuffersAllocateFromTheInstalledArenaAndReturnToIt) {
  ArenaMemory arena(host_memory(), 1 << 20, "device.arena_mb");
  {
    const TensorMemoryScope scope(arena);
    Buffer x;
    x.resize(1000);
    EXPECT_EQ(arena.in_use(), 4096u);  // 4000 bytes in 256-byte units
    const std::vector<float> values(1000, 2.5f);
    x.upload(values.data(), values.size());
    std::vector<float> back(1000);
    x.download(back.data());
    EXPECT_EQ(back, values);
  }
  EXPECT_EQ(arena.in_use(), 0u);  // the buffer went back to the arena it came from
  Buffer y;
  y.resize(10);  // the scope has ended: host memory again
  EXPECT_EQ(arena.in_use(), 0u);
}

}  // namespace
}  // namespace avtrain
