// Floats as SIMD values through the GCC/Clang vector extension, for kernels where the auto-vectoriser would keep
// an accumulator in memory or fall back to scalar code:
//   F8   eight floats: one AVX2 register (half an AVX-512 one);
//   FVec one register of the build target: 16 floats with AVX-512, else 8. Vectors wider than the hardware are
//        lowered through memory, hence the choice by target.
// NOTE: GCC warns (-Wpsabi) that returning such a type by value has another ABI on targets without the matching
// extension (e.g. a build without -march=native); these helpers are inline and used by file-local kernels only,
// so no call crosses that boundary, and the warning is silenced for the files that include this header.
#pragma once

#include <cstdint>
#include <cstring>

#pragma GCC diagnostic ignored "-Wpsabi"

namespace myriad::cpu {

using F8 = float __attribute__((vector_size(32)));
#if defined(__AVX512F__)
using FVec = float __attribute__((vector_size(64)));
#else
using FVec = F8;
#endif
template <class V>
constexpr int64_t kLanes = int64_t(sizeof(V) / sizeof(float));

template <class V>
inline V load_v(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
inline void store_v(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace myriad::cpu
