// Arena: a bump allocator for activations, so a training or decode step allocates nothing from the heap
// in its hot loops. Memory is carved from large blocks; reset() makes it all reusable at once (the blocks
// are kept, so after the first step a same-shaped step allocates nothing). A block that runs out chains a
// new one; existing pointers never move. peak() reports the high-water mark, which is what a memory
// benchmark (e.g. gradient checkpointing) reads.
#pragma once

#include <cstddef>
#include <vector>

namespace myriad {

class Arena {
 public:
  explicit Arena(size_t block_bytes = size_t(64) << 20);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* allocate(size_t bytes, size_t align = 64);
  void reset();  // everything allocated since construction/reset is invalid afterwards
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const;  // bytes held in blocks

 private:
  struct Block {
    char* data;
    size_t size;
    size_t top;
  };
  std::vector<Block> blocks_;
  size_t current_ = 0;
  size_t block_bytes_;
  size_t used_ = 0;
  size_t peak_ = 0;
};

// Scope that resets an arena on exit.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& arena) : arena_(arena) {}
  ~ArenaScope() { arena_.reset(); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
};

}  // namespace myriad
