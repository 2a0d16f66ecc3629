// See fault_injection.h.
#include "train/fault_injection.h"

#include <cstdlib>

#include "core/error.h"

namespace myriad {

NanFault parse_nan_fault(const std::string& spec) {
  NanFault f;
  if (spec.empty()) return f;
  const size_t at = spec.find('@');
  const std::string kind = spec.substr(0, at);
  f.kind = kind == "activation" ? NanFault::Kind::kActivation
           : kind == "gradient" ? NanFault::Kind::kGradient
           : kind == "weight"   ? NanFault::Kind::kWeight
                                : NanFault::Kind::kNone;
  bool ok = f.kind != NanFault::Kind::kNone && at != std::string::npos && at + 1 < spec.size();
  if (ok) {
    char* end = nullptr;
    f.step = std::strtoll(spec.c_str() + at + 1, &end, 10);
    ok = *end == '\0' && f.step >= 0;
  }
  MYRIAD_REQUIRE(ok, kValue, "MYRIAD_FAULT_NAN='", spec,
                 "': expected activation@STEP, gradient@STEP or weight@STEP with STEP >= 0");
  return f;
}

NanFault nan_fault_from_env() {
  const char* v = std::getenv("MYRIAD_FAULT_NAN");
  return parse_nan_fault(v ? v : "");
}

}  // namespace myriad
