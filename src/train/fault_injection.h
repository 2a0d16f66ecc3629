// Fault injection for the fault tests (tests/train/fault_test.sh): MYRIAD_FAULT_NAN="KIND@STEP" puts a NaN into a
// training run at its step STEP (the step counter before the step, as in metrics.jsonl's step - 1):
//   activation@S  the first norm weight's element 0 is NaN during step S's forward and backward (so every
//                 activation after it is NaN), and restored before the update: one skipped step, the run goes on
//   gradient@S    one gradient element is NaN after step S's backward: one skipped step, the run goes on
//   weight@S      one weight element becomes NaN for good before step S (as corrupted memory would): every later
//                 step is skipped and the run stops after max_consecutive_skips, naming the last good checkpoint
// Unset: nothing happens (one getenv at start-up).
#pragma once

#include <cstdint>
#include <string>

namespace myriad {

struct NanFault {
  enum class Kind { kNone, kActivation, kGradient, kWeight };
  Kind kind = Kind::kNone;
  int64_t step = -1;
  bool at(Kind k, int64_t s) const { return kind == k && step == s; }
};

// Parses "KIND@STEP" (kValue naming the variable for anything else); an empty string is no fault.
NanFault parse_nan_fault(const std::string& spec);
NanFault nan_fault_from_env();  // MYRIAD_FAULT_NAN

}  // namespace myriad
