// RMSNorm (plain and per-head gated) and L2 normalisation on the CPU. Rows are independent: threads take
// row ranges. Parameter gradients (dw) are reduced from per-thread partial sums, so there are no races and
// the result does not depend on scheduling beyond f32 summation order.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/fast_math.h"

namespace myriad::cpu {

namespace {
int64_t row_grain(int64_t N) {
  return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(N, 1));
}
}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, const float* g, int64_t rows, int64_t N,
                     float eps) {
  parallel_for(rows, row_grain(N), [&, w](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * N;
      float* yr = y + r * N;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < N; ++j) ss += xr[j] * xr[j];
      const float rs = 1.0f / std::sqrt(ss / float(N > 0 ? N : 1) + eps);
      rstd[r] = rs;
      if (g) {
        const float* gr = g + r * N;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) yr[j] = xr[j] * rs * w[j] * fast_sigmoid(gr[j]);
      } else {
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) yr[j] = xr[j] * rs * w[j];
      }
    }
  });
}

void rmsnorm_backward(float* dx, float* dw, float* dg, const float* dy, const float* x, const float* w, const float* g,
                      const float* rstd, int64_t rows, int64_t N) {
  if (rows == 0 || N == 0) return;
  const int nt = num_threads();
  std::vector<float> dw_part(size_t(nt) * size_t(N), 0.0f);
  std::vector<float> dn_buf(size_t(nt) * size_t(N));
  parallel_for(rows, row_grain(N), [&, w](int64_t r0, int64_t r1) {
    // NOTE: w is captured by value: read through the closure, GCC reloads and gathers it in every SIMD lane.
    const float* __restrict wl = w;
    const int tid = omp_in_parallel() ? omp_get_thread_num() : 0;
    float* dwp = dw_part.data() + size_t(tid) * size_t(N);
    float* dn = dn_buf.data() + size_t(tid) * size_t(N);
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * N;
      const float* dyr = dy + r * N;
      float* dxr = dx + r * N;
      const float rs = rstd[r];
      if (g) {
        const float* gr = g + r * N;
        float* dgr = dg + r * N;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) {
          const float s = fast_sigmoid(gr[j]);
          dgr[j] += dyr[j] * xr[j] * rs * wl[j] * s * (1.0f - s);
          dn[j] = dyr[j] * s;
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) dn[j] = dyr[j];
      }
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < N; ++j) {
        dwp[j] += dn[j] * xr[j] * rs;
        dot += dn[j] * wl[j] * xr[j];
      }
      const float c = rs * rs * dot / float(N);
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) dxr[j] += rs * (dn[j] * wl[j] - xr[j] * c);
    }
  });
  for (int t = 0; t < nt; ++t) {
    const float* p = dw_part.data() + size_t(t) * size_t(N);
#pragma omp simd
    for (int64_t j = 0; j < N; ++j) dw[j] += p[j];
  }
}

void l2norm_forward(float* y, float* rnorm, const float* x, int64_t rows, int64_t N, float eps) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * N;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < N; ++j) ss += xr[j] * xr[j];
      const float rn = 1.0f / std::sqrt(ss + eps);
      rnorm[r] = rn;
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) y[r * N + j] = xr[j] * rn;
    }
  });
}

void l2norm_backward(float* dx, const float* dy, const float* y, const float* rnorm, int64_t rows, int64_t N) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * N;
      const float* dyr = dy + r * N;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < N; ++j) dot += yr[j] * dyr[j];
      const float rn = rnorm[r];
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) dx[r * N + j] += rn * (dyr[j] - yr[j] * dot);
    }
  });
}

}  // namespace myriad::cpu
