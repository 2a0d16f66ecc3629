// Vectorisable float math (portable C++, no intrinsics) for the CPU kernels and for host-side loops above them
// (the sampler). glibc's expf/tanhf are scalar calls that stop GCC from
// vectorising a loop (its SIMD variants need -ffast-math, which we do not want globally: it breaks NaN
// checks). These are branch-free, call-free, so loops under `#pragma omp simd` become AVX2/AVX-512 code.
// NOTE: fast_exp has a relative error below 2e-7 over [-87, 88] (Cody-Waite range reduction and a
// degree-6 polynomial); results saturate to 0 / a large finite value outside that range.
#pragma once

#include <cstdint>
#include <cstring>

namespace myriad {

#pragma omp declare simd
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // rint (not round): round-to-nearest-even vectorises without -ffast-math; round() becomes a scalar libm call.
  const float n = __builtin_rintf(x * 1.44269504088896341f);
  // x - n ln2 in two parts for accuracy
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

#pragma omp declare simd
inline float fast_sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

#pragma omp declare simd
inline float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1): accurate to ~1e-7 absolute and exactly +-1 in saturation, but near 0 the
  // subtraction cancels (relative error ~6e-8 / |x|). Below |x| = 0.04 the odd Taylor series is used instead
  // (next term 62/2835 x^9 < 1e-14 relative): SiTU's b tanh(u / b) must reach SwiGLU's u as b grows.
  const float big = 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
  const float x2 = x * x;
  const float small = x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f))));
  return x2 < 0.0016f ? small : big;
}

#pragma omp declare simd
inline float fast_softplus(float x) {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|); log1p via log of a float we build from bits would need
  // another polynomial, so use the identity with a short series only where it is accurate enough.
  const float ax = x < 0 ? -x : x;
  const float t = fast_exp(-ax);  // in (0, 1]
  // log1p(t) for t in (0, 1]: log1p(t) = 2 atanh(t / (2 + t)), series in z = t/(2+t) <= 1/3
  const float z = t / (2.0f + t);
  const float z2 = z * z;
  const float l =
      2.0f * z * (1.0f + z2 * (1.0f / 3 + z2 * (1.0f / 5 + z2 * (1.0f / 7 + z2 * (1.0f / 9 + z2 * (1.0f / 11))))));
  return (x > 0 ? x : 0.0f) + l;
}

}  // namespace myriad
