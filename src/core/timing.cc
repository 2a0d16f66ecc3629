#include "core/timing.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace myriad {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {
Timing summarize(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  Timing t;
  t.reps = int(times.size());
  if (t.reps > 0) {
    t.best_s = times.front();
    t.median_s = times[times.size() / 2];
  }
  return t;
}
}  // namespace

Timing time_repeats(const std::function<void()>& fn, double budget_s, int min_reps, int max_reps) {
  fn();  // warm-up
  std::vector<double> times;
  const double start = now_seconds();
  while (int(times.size()) < max_reps && (int(times.size()) < min_reps || now_seconds() - start < budget_s)) {
    const double t0 = now_seconds();
    fn();
    times.push_back(now_seconds() - t0);
  }
  return summarize(std::move(times));
}

TimingPair time_interleaved(const std::function<void()>& a, const std::function<void()>& b, double budget_s,
                            int min_reps, int max_reps) {
  a();  // warm-up
  b();
  std::vector<double> ta, tb;
  const double start = now_seconds();
  while (int(ta.size()) < max_reps && (int(ta.size()) < min_reps || now_seconds() - start < budget_s)) {
    double t0 = now_seconds();
    a();
    ta.push_back(now_seconds() - t0);
    t0 = now_seconds();
    b();
    tb.push_back(now_seconds() - t0);
  }
  return {summarize(std::move(ta)), summarize(std::move(tb))};
}

}  // namespace myriad
