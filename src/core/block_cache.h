// HostBlockCache: freed host (cpu) tensor blocks kept by size class and handed out again, so a step that
// allocates the same shapes every time (a decode step, a training step) stops calling malloc after its first
// run. Why: glibc serves blocks of 1 KiB and more from its bins, and every such request first consolidates the
// small chunks freed since (malloc_consolidate); with the dozens of small objects a step creates and frees, that
// path was ~17% of a q8 batch-1 decode token on 2 cores.
//
// Size classes: multiples of 64 bytes up to 256, then four per power of two (1.25, 1.5, 1.75, 2 x 2^k), so a
// block is at most 25% larger than asked. Blocks above kMaxBlock are never cached, and at most kMaxCached bytes are
// held in all; the rest goes straight back to free(), so a training run's peak memory grows by at most kMaxCached.
// Thread-safe (one mutex: a lock is ~20 ns uncontended, a malloc of a large block several hundred).
// Under AddressSanitizer every block goes straight to malloc/free, so use-after-free stays visible.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <vector>

namespace myriad {

class HostBlockCache {
 public:
  static constexpr size_t kAlign = 64;                  // one cache line, what AVX-512 loads like
  static constexpr size_t kMaxBlock = size_t(4) << 20;  // larger blocks are not kept
  static constexpr size_t kMaxCached = size_t(64) << 20;

  // A block of at least `bytes` (>= 1), kAlign-aligned; throws kOutOfMemory.
  void* allocate(size_t bytes);
  // `bytes` is what allocate() was given for p.
  void deallocate(void* p, size_t bytes);
  void release_all();  // frees every cached block
  size_t cached_bytes() const;

  // The size a request of `bytes` is rounded up to (its class); 0 for bytes > kMaxBlock (not cached).
  static size_t class_size(size_t bytes);
  static HostBlockCache& global();

 private:
  HostBlockCache() = default;
  static constexpr int kClasses = 60;  // 4 up to 256 bytes, then 4 per power of two up to kMaxBlock
  static int class_index(size_t bytes);

  mutable std::mutex mu_;
  std::array<std::vector<void*>, kClasses> free_;
  size_t cached_ = 0;
};

}  // namespace myriad
