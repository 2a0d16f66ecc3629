// Rotary position embedding on the rotated columns only (CPU). Rows (token, head) are independent.
#include <algorithm>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"

namespace myriad::cpu {

namespace {
template <bool kBackward>
void rope_apply(float* out, const float* in, const float* cos, const float* sin, int64_t T, int64_t heads, int64_t N,
                RopeLayout l) {
  const int64_t half = l.rot / 2;
  parallel_for(T * heads, std::max<int64_t>(1, 4096 / std::max<int64_t>(N, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t t = r / heads;
      const float* xr = in + r * N;
      float* yr = out + r * N;
      const float* cr = cos + t * half;
      const float* sr = sin + t * half;
      // pass-through columns (backward accumulates, forward copies)
      for (int64_t j = 0; j < N; ++j) {
        if (j >= l.col0 && j < l.col0 + l.rot) continue;
        if (kBackward)
          yr[j] += xr[j];
        else
          yr[j] = xr[j];
      }
      const int64_t sa = l.interleaved ? 2 : 1;
      const float* xa = xr + l.col0;
      const float* xb = xr + l.col0 + (l.interleaved ? 1 : half);
      float* ya = yr + l.col0;
      float* yb = yr + l.col0 + (l.interleaved ? 1 : half);
#pragma omp simd
      for (int64_t j = 0; j < half; ++j) {
        const float a = xa[j * sa], b = xb[j * sa], c = cr[j], s = sr[j];
        if (kBackward) {  // transpose of the rotation
          ya[j * sa] += a * c + b * s;
          yb[j * sa] += -a * s + b * c;
        } else {
          ya[j * sa] = a * c - b * s;
          yb[j * sa] = a * s + b * c;
        }
      }
    }
  });
}
}  // namespace

void rope_forward(float* y, const float* x, const float* cos, const float* sin, int64_t T, int64_t heads, int64_t N,
                  RopeLayout layout) {
  rope_apply<false>(y, x, cos, sin, T, heads, N, layout);
}

void rope_backward(float* dx, const float* dy, const float* cos, const float* sin, int64_t T, int64_t heads, int64_t N,
                   RopeLayout layout) {
  rope_apply<true>(dx, dy, cos, sin, T, heads, N, layout);
}

}  // namespace myriad::cpu
