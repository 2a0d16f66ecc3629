#include "core/arena.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace myriad {

Arena::Arena(size_t block_bytes) : block_bytes_(std::max<size_t>(block_bytes, 4096)) {}

Arena::~Arena() {
  for (auto& b : blocks_) std::free(b.data);
}

void* Arena::allocate(size_t bytes, size_t align) {
  MYRIAD_CHECK(align > 0 && (align & (align - 1)) == 0, "alignment ", align, " is not a power of two");
  bytes = std::max<size_t>(bytes, 1);
  for (; current_ < blocks_.size(); ++current_) {
    Block& b = blocks_[current_];
    const size_t start = (b.top + align - 1) & ~(align - 1);
    if (start + bytes <= b.size) {
      used_ += start + bytes - b.top;
      b.top = start + bytes;
      peak_ = std::max(peak_, used_);
      return b.data + start;
    }
  }
  const size_t size = std::max(block_bytes_, (bytes + align + 63) / 64 * 64);
  char* data = static_cast<char*>(std::aligned_alloc(64, (size + 63) / 64 * 64));
  MYRIAD_REQUIRE(data != nullptr, kOutOfMemory, "arena: cannot allocate a block of ", size, " bytes");
  blocks_.push_back({data, size, 0});
  current_ = blocks_.size() - 1;
  return allocate(bytes, align);
}

void Arena::reset() {
  for (auto& b : blocks_) b.top = 0;
  current_ = 0;
  used_ = 0;
}

size_t Arena::capacity() const {
  size_t c = 0;
  for (const auto& b : blocks_) c += b.size;
  return c;
}

}  // namespace myriad
