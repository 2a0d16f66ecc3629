// Wall-clock timing for benchmarks (not tests): one untimed warm-up call, then repeats until a time budget
// is spent, keeping the best and the median. Benchmarks report the best (the figure least disturbed by other
// processes on a shared machine) and keep the median alongside for noise.
#pragma once

#include <functional>

namespace myriad {

struct Timing {
  double best_s = 0.0;    // fastest call, seconds
  double median_s = 0.0;  // median call, seconds
  int reps = 0;           // timed calls
};

double now_seconds();  // steady clock

// Calls fn once untimed (page faults, cache and thread-pool warm-up), then times repeats until budget_s is
// spent, with at least min_reps and at most max_reps timed calls.
Timing time_repeats(const std::function<void()>& fn, double budget_s, int min_reps = 3, int max_reps = 10000);

// Alternates a() and b() (one untimed warm-up each), timing every call, until budget_s is spent, with at
// least min_reps calls of each: for a figure and the ceiling it is judged against, so that both sample the
// same state of a shared machine.
struct TimingPair {
  Timing a, b;
};
TimingPair time_interleaved(const std::function<void()>& a, const std::function<void()>& b, double budget_s,
                            int min_reps = 3, int max_reps = 10000);

}  // namespace myriad
