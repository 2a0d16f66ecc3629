// HostBlockCache (core/block_cache.h): size classes, reuse of freed blocks, the bounds on what it keeps, and
// tensors built on recycled memory.
#include "core/block_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/memory_release.h"
#include "core/tensor.h"

namespace myriad {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;  // under ASan every block goes to malloc/free
#else
constexpr bool kCaching = true;
#endif

TEST(BlockCache, ClassesCoverTheRequestWithinAQuarter) {
  for (size_t bytes = 1; bytes <= HostBlockCache::kMaxBlock; bytes = bytes < 4096 ? bytes + 1 : bytes * 5 / 4 + 7) {
    const size_t c = HostBlockCache::class_size(bytes);
    ASSERT_GE(c, bytes);
    ASSERT_EQ(c % HostBlockCache::kAlign, 0u) << bytes;
    if (bytes > 256) {
      ASSERT_LE(c, bytes + bytes / 4) << bytes;
    }
    // Monotone: a larger request never gets a smaller class.
    ASSERT_LE(HostBlockCache::class_size(bytes - (bytes > 1 ? 1 : 0)), c);
  }
  EXPECT_EQ(HostBlockCache::class_size(HostBlockCache::kMaxBlock + 1), 0u);
  EXPECT_EQ(HostBlockCache::class_size(1000), 1024u);
  EXPECT_EQ(HostBlockCache::class_size(257), 320u);
}

TEST(BlockCache, ReusesAFreedBlockOfTheSameClass) {
  HostBlockCache& cache = HostBlockCache::global();
  cache.release_all();
  void* a = cache.allocate(3000);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(a) % HostBlockCache::kAlign, 0u);
  std::memset(a, 0x5a, 3000);  // the whole request is writable
  cache.deallocate(a, 3000);
  EXPECT_EQ(cache.cached_bytes(), kCaching ? HostBlockCache::class_size(3000) : 0u);
  void* b = cache.allocate(2900);  // same class (2560 < 2900 <= 3072)
  if (kCaching) {
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.deallocate(b, 2900);
  cache.release_all();
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(BlockCache, KeepsNoLargeBlocksAndAtMostItsBudget) {
  HostBlockCache& cache = HostBlockCache::global();
  cache.release_all();
  void* big = cache.allocate(HostBlockCache::kMaxBlock + 64);
  cache.deallocate(big, HostBlockCache::kMaxBlock + 64);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // Free more blocks of 4 MiB than the budget holds: the surplus goes back to the system.
  std::vector<void*> blocks;
  const size_t n = HostBlockCache::kMaxCached / HostBlockCache::kMaxBlock + 4;
  for (size_t i = 0; i < n; ++i) blocks.push_back(cache.allocate(HostBlockCache::kMaxBlock));
  for (void* p : blocks) cache.deallocate(p, HostBlockCache::kMaxBlock);
  EXPECT_LE(cache.cached_bytes(), HostBlockCache::kMaxCached);
  if (kCaching) {
    EXPECT_EQ(cache.cached_bytes(), HostBlockCache::kMaxCached);
  }
  cache.release_all();
}

TEST(BlockCache, ThreadsAllocatingAndFreeingTogetherLeaveItConsistent) {
  HostBlockCache& cache = HostBlockCache::global();
  cache.release_all();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache, t] {
      std::vector<std::pair<void*, size_t>> held;
      for (int i = 0; i < 2000; ++i) {
        const size_t bytes = 64 + size_t((i * 37 + t * 11) % 5000);
        void* p = cache.allocate(bytes);
        std::memset(p, t, bytes);
        held.emplace_back(p, bytes);
        if (held.size() > 8) {
          cache.deallocate(held.front().first, held.front().second);
          held.erase(held.begin());
        }
      }
      for (auto& [p, b] : held) cache.deallocate(p, b);
    });
  for (std::thread& th : threads) th.join();
  EXPECT_LE(cache.cached_bytes(), HostBlockCache::kMaxCached);
  cache.release_all();
  EXPECT_EQ(cache.cached_bytes(), 0u);
}

TEST(BlockCache, TensorsOnRecycledMemory) {
  // A recycled block still holds its last contents: zeros() must clear it, empty() need not.
  for (int round = 0; round < 3; ++round) {
    {
      Tensor t = Tensor::empty({33, 17});
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 7.0f;
    }
    const Tensor z = Tensor::zeros({33, 17});
    for (int64_t i = 0; i < z.numel(); ++i) ASSERT_EQ(z.data<float>()[i], 0.0f);
  }
}

// Giving memory back: the block cache empties (what it held is freed) and the allocator purges without harm to
// live allocations.
TEST(ReleaseFreeMemory, EmptiesTheBlockCacheAndKeepsLiveMemory) {
  HostBlockCache& cache = HostBlockCache::global();
  void* kept = cache.allocate(size_t(1) << 20);
  std::memset(kept, 7, size_t(1) << 20);
  cache.deallocate(cache.allocate(size_t(2) << 20), size_t(2) << 20);
  std::vector<char> big(size_t(64) << 20, 1);
  big.clear();
  big.shrink_to_fit();
  release_free_memory();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  const unsigned char* k = static_cast<const unsigned char*>(kept);
  EXPECT_EQ(k[0], 7);
  EXPECT_EQ(k[(size_t(1) << 20) - 1], 7);
  cache.deallocate(kept, size_t(1) << 20);
}

}  // namespace
}  // namespace myriad
