#include "core/block_cache.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "core/error.h"

namespace myriad {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif

void* aligned_block(size_t bytes) {
  void* p = std::aligned_alloc(HostBlockCache::kAlign, bytes);
  MYRIAD_REQUIRE(p != nullptr, kOutOfMemory, "cpu allocation of ", bytes, " bytes failed");
  return p;
}

size_t round_to_align(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + HostBlockCache::kAlign - 1) / HostBlockCache::kAlign * HostBlockCache::kAlign;
}

}  // namespace

int HostBlockCache::class_index(size_t bytes) {
  if (bytes <= 256) return int((std::max<size_t>(bytes, 1) + 63) / 64) - 1;  // 64, 128, 192, 256
  const int k = int(std::bit_width(bytes - 1)) - 1;                          // 2^k < bytes <= 2^(k+1), k >= 8
  const size_t m = (bytes + (size_t(1) << (k - 2)) - 1) >> (k - 2);          // in 5..8 quarters of 2^k
  return 4 + (k - 8) * 4 + int(m) - 5;
}

size_t HostBlockCache::class_size(size_t bytes) {
  if (bytes > kMaxBlock) return 0;
  if (bytes <= 256) return round_to_align(bytes);
  const int k = int(std::bit_width(bytes - 1)) - 1;
  const size_t q = size_t(1) << (k - 2);
  return (bytes + q - 1) / q * q;
}

void* HostBlockCache::allocate(size_t bytes) {
  const size_t cs = class_size(bytes);
  if (!kCacheBlocks || cs == 0) return aligned_block(round_to_align(bytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<void*>& list = free_[size_t(class_index(bytes))];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      cached_ -= cs;
      return p;
    }
  }
  return aligned_block(cs);
}

void HostBlockCache::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  const size_t cs = class_size(bytes);
  if (kCacheBlocks && cs != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + cs <= kMaxCached) {
      try {
        free_[size_t(class_index(bytes))].push_back(p);
        cached_ += cs;
        return;
      } catch (...) {  // no room to remember it: free it below
      }
    }
  }
  std::free(p);
}

void HostBlockCache::release_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::vector<void*>& list : free_) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  cached_ = 0;
}

size_t HostBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

HostBlockCache& HostBlockCache::global() {
  // Never destroyed: tensors held by other statics may be freed after it would have been.
  static HostBlockCache* cache = new HostBlockCache();
  return *cache;
}

}  // namespace myriad
