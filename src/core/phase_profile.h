// Where a step's wall time goes, phase by phase (what `bench serve` breaks a decode step into): a PhaseProfile
// installed by a PhaseProfileGuard collects the time of every PhaseScope entered on the installing thread, outermost
// scopes only (a scope inside another is counted in its parent), and none inside OpenMP regions (the workers'
// time is the region's, measured by the scope around it). With no profile installed a scope costs one relaxed
// atomic load: the scopes stay in the serving forward.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace myriad {

class PhaseProfile {
 public:
  struct Phase {
    std::string name;
    double seconds = 0.0;
    int64_t calls = 0;
  };
  void add(const char* name, double seconds);
  // In the order each phase was first seen.
  const std::vector<Phase>& phases() const { return phases_; }
  double total_seconds() const;

 private:
  std::vector<Phase> phases_;
};

// Installs a profile for the guard's lifetime (one at a time in the process; kBusy while another is).
class PhaseProfileGuard {
 public:
  explicit PhaseProfileGuard(PhaseProfile& profile);
  ~PhaseProfileGuard();
  PhaseProfileGuard(const PhaseProfileGuard&) = delete;
  PhaseProfileGuard& operator=(const PhaseProfileGuard&) = delete;
};

class PhaseScope {
 public:
  explicit PhaseScope(const char* name);  // a string literal: kept by pointer
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseProfile* profile_ = nullptr;  // null: not recorded (none installed, another thread, nested, in a region)
  const char* name_;
  double start_ = 0.0;
};

}  // namespace myriad
