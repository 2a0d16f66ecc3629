// The memory profile's bookkeeping against a count kept by hand: what is charged where, what a freed tensor gives
// back, the split at the peak, and that a restart forgets tensors charged before it.
#include "core/memory_profile.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "core/tensor.h"

namespace myriad {
namespace {

std::map<std::string, size_t> by_key(const std::vector<memory_profile::Entry>& entries) {
  std::map<std::string, size_t> m;
  for (const auto& e : entries) m[e.phase + "/" + e.part] += e.bytes;
  return m;
}

TEST(MemoryProfile, ChargesEachPartAndKeepsTheSplitAtThePeak) {
  memory_profile::start();
  std::optional<Tensor> a, b, c, d;
  {
    memory_profile::Part part("a");
    a = Tensor::empty({1000});  // 4,000 bytes
    b = Tensor::empty({3000});  // 12,000: live 16,000, the peak so far
  }
  b.reset();  // live 4,000
  {
    memory_profile::Part part("b");
    memory_profile::PhaseScope phase(memory_profile::Phase::kBackward);
    c = Tensor::zeros({2000});  // live 12,000 (below the peak)
  }
  {
    memory_profile::Part outer("a");
    memory_profile::Part inner("c");        // the innermost part is charged
    d = Tensor::empty({500}, DType::kI64);  // 4,000 bytes: live 16,000, equal to the peak, not above it
  }
  memory_profile::stop();
  Tensor after = Tensor::empty({10000});  // not charged: the profile is off
  const memory_profile::Report r = memory_profile::report();
  EXPECT_EQ(r.allocations, 4u);
  EXPECT_EQ(r.peak_bytes, 16000u);
  EXPECT_EQ(r.live_bytes, 16000u);
  const auto peak = by_key(r.at_peak);
  EXPECT_EQ(peak, (std::map<std::string, size_t>{{"forward/a", 16000}}));
  const auto live = by_key(r.live);
  EXPECT_EQ(live, (std::map<std::string, size_t>{{"forward/a", 4000}, {"backward/b", 8000}, {"forward/c", 4000}}));
  // Freeing after stop() still gives back (the tensors were charged while on).
  c.reset();
  EXPECT_EQ(memory_profile::report().live_bytes, 8000u);
  // A restart forgets: a tensor charged before it releases nothing from the new count.
  memory_profile::start();
  Tensor e = Tensor::empty({250});  // 1,000 bytes, charged to "other"
  a.reset();
  d.reset();
  const memory_profile::Report r2 = memory_profile::report();
  memory_profile::stop();
  EXPECT_EQ(r2.live_bytes, 1000u);
  EXPECT_EQ(by_key(r2.live), (std::map<std::string, size_t>{{"forward/other", 1000}}));
}

TEST(MemoryProfile, OffChargesNothing) {
  memory_profile::start();
  memory_profile::stop();
  EXPECT_FALSE(memory_profile::enabled());
  Tensor t = Tensor::empty({4096});
  EXPECT_EQ(memory_profile::report().allocations, 0u);
  EXPECT_EQ(memory_profile::report().live_bytes, 0u);
}

}  // namespace
}  // namespace myriad
