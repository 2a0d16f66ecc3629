// Whether absolute time bounds apply to this build. The "within 2 s" figures hold for the optimised build;
// the sanitizer builds (ASan + UBSan at -O0, TSan at -O1) run 3-20x slower, so there a test checks only that time
// grows linearly with the input (a ratio between two sizes), which is what a quadratic path would break.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MYRIAD_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MYRIAD_SANITIZED_BUILD 1
#endif
#endif

namespace myriad::testing_support {
#if defined(MYRIAD_SANITIZED_BUILD)
inline constexpr bool kTimeBoundsApply = false;
#else
inline constexpr bool kTimeBoundsApply = true;
#endif
}  // namespace myriad::testing_support
