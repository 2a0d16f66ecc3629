// core/phase_profile.h: what a profile records, and what it must leave out.
#include "core/phase_profile.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <thread>

#include "core/error.h"

namespace myriad {
namespace {

void busy_for(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
  }
}

const PhaseProfile::Phase* find(const PhaseProfile& p, const std::string& name) {
  for (const PhaseProfile::Phase& ph : p.phases())
    if (ph.name == name) return &ph;
  return nullptr;
}

TEST(PhaseProfile, RecordsOutermostScopesOnTheInstallingThreadOnly) {
  {
    const PhaseScope before("not installed");  // no profile yet: nothing to record into
  }
  PhaseProfile profile;
  {
    const PhaseProfileGuard on(profile);
    for (int i = 0; i < 3; ++i) {
      const PhaseScope outer("outer");
      busy_for(0.002);
      const PhaseScope inner("inner");  // inside "outer": counted as outer's time
      busy_for(0.002);
    }
    {
      const PhaseScope other("other");
      busy_for(0.001);
    }
    std::thread([] {
      const PhaseScope elsewhere("another thread");
      busy_for(0.001);
    }).join();
#pragma omp parallel num_threads(2)
    {
      const PhaseScope region("in a region");  // the region's time belongs to the scope around it
    }
  }
  { const PhaseScope after("uninstalled"); }
  ASSERT_EQ(profile.phases().size(), 2u);
  const PhaseProfile::Phase* outer = find(profile, "outer");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->calls, 3);
  EXPECT_GE(outer->seconds, 3 * 0.004);  // both busy waits of each iteration
  const PhaseProfile::Phase* other = find(profile, "other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->calls, 1);
  EXPECT_GE(other->seconds, 0.001);
  EXPECT_DOUBLE_EQ(profile.total_seconds(), outer->seconds + other->seconds);
  EXPECT_EQ(profile.phases()[0].name, "outer");  // first-seen order
}

TEST(PhaseProfile, OneProfileAtATime) {
  PhaseProfile a, b;
  const PhaseProfileGuard on(a);
  try {
    const PhaseProfileGuard again(b);
    FAIL() << "a second profile was installed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBusy);
  }
  { const PhaseScope s("still a's"); }
  EXPECT_EQ(a.phases().size(), 1u);
  EXPECT_TRUE(b.phases().empty());
}

}  // namespace
}  // namespace myriad
