#include "core/memory_profile.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

namespace myriad::memory_profile {

namespace {

struct Slot {
  Phase phase;
  const char* part;
};

struct State {
  std::mutex mu;
  uint64_t generation = 0;  // start() makes earlier slots' releases no-ops
  std::vector<Slot> slots;  // (phase, part) pairs seen, in order
  std::vector<size_t> live, at_peak;
  size_t total = 0, peak = 0, allocations = 0;
};

State& state() {
  static State s;
  return s;
}

std::atomic<bool> g_on{false};
// The model's control flow runs on one thread; kernels' worker threads allocate within its scopes, so the part and
// phase are process-wide rather than per thread.
std::atomic<const char*> g_part{"other"};
std::atomic<Phase> g_phase{Phase::kForward};

// Slots carry the generation in their upper bits so a tensor charged before a restart releases nothing.
constexpr int kSlotBits = 16;

}  // namespace

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kBackward:
      return "backward";
  }
  return "?";
}

void start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.generation;
  s.slots.clear();
  s.live.clear();
  s.at_peak.clear();
  s.total = s.peak = s.allocations = 0;
  g_on.store(true, std::memory_order_relaxed);
}

void stop() {
  g_on.store(false, std::memory_order_relaxed);
}

bool enabled() {
  return g_on.load(std::memory_order_relaxed);
}

Part::Part(const char* name) : prev_(g_part.exchange(name, std::memory_order_relaxed)) {}
Part::~Part() {
  g_part.store(prev_, std::memory_order_relaxed);
}

PhaseScope::PhaseScope(Phase phase) : prev_(g_phase.exchange(phase, std::memory_order_relaxed)) {}
PhaseScope::~PhaseScope() {
  g_phase.store(prev_, std::memory_order_relaxed);
}

const char* current_part() {
  return g_part.load(std::memory_order_relaxed);
}

int charge(size_t bytes) {
  if (!enabled()) return -1;
  State& s = state();
  const Phase phase = g_phase.load(std::memory_order_relaxed);
  const char* part = g_part.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(s.mu);
  size_t i = 0;
  while (i < s.slots.size() && !(s.slots[i].phase == phase && std::strcmp(s.slots[i].part, part) == 0)) ++i;
  if (i == s.slots.size()) {
    if (i + 1 >= (size_t(1) << kSlotBits)) return -1;  // more parts than anyone names: not counted
    s.slots.push_back({phase, part});
    s.live.push_back(0);
  }
  s.live[i] += bytes;
  s.total += bytes;
  ++s.allocations;
  if (s.total > s.peak) {
    s.peak = s.total;
    s.at_peak = s.live;
  }
  return int((s.generation % 32768) << kSlotBits | i);
}

void release(int slot, size_t bytes) {
  if (slot < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (uint64_t(slot >> kSlotBits) != s.generation % 32768) return;
  const size_t i = size_t(slot) & ((size_t(1) << kSlotBits) - 1);
  if (i >= s.live.size()) return;
  s.live[i] -= std::min(bytes, s.live[i]);
  s.total -= std::min(bytes, s.total);
}

Report report() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Report r;
  r.peak_bytes = s.peak;
  r.live_bytes = s.total;
  r.allocations = s.allocations;
  const auto split = [&](const std::vector<size_t>& bytes) {
    std::vector<Entry> out;
    for (size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i] > 0) out.push_back({phase_name(s.slots[i].phase), s.slots[i].part, bytes[i]});
    std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.bytes > b.bytes; });
    return out;
  };
  r.at_peak = split(s.at_peak);
  r.live = split(s.live);
  return r;
}

}  // namespace myriad::memory_profile
