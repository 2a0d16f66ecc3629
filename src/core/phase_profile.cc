#include "core/phase_profile.h"

#include <omp.h>

#include <thread>

#include "core/error.h"
#include "core/timing.h"

namespace myriad {

namespace {
std::atomic<PhaseProfile*> g_profile{nullptr};
std::atomic<std::thread::id> g_owner{};
thread_local int t_depth = 0;  // open scopes on this thread (recorded or not)
}  // namespace

void PhaseProfile::add(const char* name, double seconds) {
  for (Phase& p : phases_)
    if (p.name == name) {
      p.seconds += seconds;
      ++p.calls;
      return;
    }
  phases_.push_back({name, seconds, 1});
}

double PhaseProfile::total_seconds() const {
  double s = 0.0;
  for (const Phase& p : phases_) s += p.seconds;
  return s;
}

PhaseProfileGuard::PhaseProfileGuard(PhaseProfile& profile) {
  PhaseProfile* none = nullptr;
  MYRIAD_REQUIRE(g_profile.compare_exchange_strong(none, &profile), kBusy,
                 "phase profile: another profile is already being collected");
  g_owner.store(std::this_thread::get_id());
}

PhaseProfileGuard::~PhaseProfileGuard() {
  g_profile.store(nullptr);
}

PhaseScope::PhaseScope(const char* name) : name_(name) {
  PhaseProfile* p = g_profile.load(std::memory_order_relaxed);
  if (p != nullptr && t_depth == 0 && !omp_in_parallel() && g_owner.load() == std::this_thread::get_id()) {
    profile_ = p;
    start_ = now_seconds();
  }
  ++t_depth;
}

PhaseScope::~PhaseScope() {
  --t_depth;
  if (profile_ != nullptr) profile_->add(name_, now_seconds() - start_);
}

}  // namespace myriad
