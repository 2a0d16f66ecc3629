// Memory profile: where the tensor bytes of a step are at its peak. While on, every tensor allocated through a
// device allocator (Tensor::empty and what builds on it) is charged to the current part of the model (a scope the
// model opens: "mla", "moe", ...) in the current phase (forward, the recompute of a checkpointed layer, or the
// backward, where each tape node is charged to the part that recorded it), and its bytes are released when its
// storage dies. The profile keeps the live bytes per (phase, part) and, each time the total reaches a new high,
// a copy of that split: the split at the peak, which answers "what holds the memory" when RSS alone cannot.
// Only allocations made while it is on are counted (weights and optimizer state made before are not), and memory
// that is not a tensor (a kernel's std::vector scratch, the allocator's own) is not seen: compare with RSS.
// Off by default: then it costs one relaxed atomic load per allocation. Thread-safe (one mutex while on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace myriad::memory_profile {

enum class Phase { kForward, kRecompute, kBackward };
const char* phase_name(Phase phase);

// Starts counting from zero (forgets what an earlier profile saw; tensors it charged release nothing later).
void start();
void stop();
bool enabled();

// The part new allocations are charged to while it lives (a string literal: kept by pointer). Nested: innermost.
class Part {
 public:
  explicit Part(const char* name);
  ~Part();
  Part(const Part&) = delete;
  Part& operator=(const Part&) = delete;

 private:
  const char* prev_;
};

class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase prev_;
};

// The part allocations are charged to now ("other" outside every Part), for the tape to remember per node.
const char* current_part();

// An allocation of `bytes`: charged to the current (phase, part) when on; returns the slot to release it from
// (-1 when off: nothing to release).
int charge(size_t bytes);
void release(int slot, size_t bytes);

struct Entry {
  std::string phase, part;
  size_t bytes = 0;
};
struct Report {
  size_t peak_bytes = 0;       // the highest total of live charged bytes
  size_t live_bytes = 0;       // live now
  size_t allocations = 0;      // how many charges
  std::vector<Entry> at_peak;  // the split at the peak, largest first, parts with 0 bytes left out
  std::vector<Entry> live;     // the split now, the same way
};
Report report();

}  // namespace myriad::memory_profile
