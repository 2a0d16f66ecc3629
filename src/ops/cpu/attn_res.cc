// The AttnRes read (docs/design.md §1.4) fused on the CPU: one pass over the candidates for the scores (each row's sum
// of squares and projection together), the softmax over the candidates, one pass for the weighted sum; the backward
// in two passes (dot products, then every gradient). Run as separate tape ops (rmsnorm, a [T, D] x [D, 1]
// product, concat, softmax, slice, broadcast multiply and add per candidate) the read made and re-read a dozen
// [T, D] tensors per candidate and was most of the "other" share of a training step. Rows split over threads;
// du, summed over rows, in one buffer per thread.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"

namespace myriad::cpu {

void attn_res_read_forward(float* out, float* p, float* r, const float* const* v, int64_t C, int64_t rows, int64_t N,
                           const float* u, float eps) {
  const int threads = rows * N * C >= (int64_t(1) << 15) ? num_threads() : 1;
  parallel_region(threads, [&](int th, int nth) {
    std::vector<float> s(static_cast<size_t>(C));
    for (int64_t t = part_begin(rows, th, nth), te = part_begin(rows, th + 1, nth); t < te; ++t) {
      float mx = -INFINITY;
      for (int64_t c = 0; c < C; ++c) {
        const float* vr = v[c] + t * N;
        float ss = 0.0f, a = 0.0f;
#pragma omp simd reduction(+ : ss, a)
        for (int64_t j = 0; j < N; ++j) ss += vr[j] * vr[j], a += u[j] * vr[j];
        const float rc = 1.0f / std::sqrt(ss / float(N) + eps);
        r[t * C + c] = rc;
        s[size_t(c)] = rc * a;
        mx = std::max(mx, s[size_t(c)]);
      }
      float z = 0.0f;
      for (int64_t c = 0; c < C; ++c) z += (s[size_t(c)] = std::exp(s[size_t(c)] - mx));
      for (int64_t c = 0; c < C; ++c) p[t * C + c] = s[size_t(c)] / z;
      float* o = out + t * N;
      const float p0 = p[t * C];
      const float* v0 = v[0] + t * N;
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) o[j] = p0 * v0[j];
      for (int64_t c = 1; c < C; ++c) {
        const float pc = p[t * C + c];
        const float* vr = v[c] + t * N;
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) o[j] += pc * vr[j];
      }
    }
  });
}

void attn_res_read_backward(float* const* dv, float* du, const float* dout, const float* const* v, const float* p,
                            const float* r, int64_t C, int64_t rows, int64_t N, const float* u) {
  const int threads = rows * N * C >= (int64_t(1) << 15) ? num_threads() : 1;
  std::vector<float> du_parts(static_cast<size_t>(threads * N), 0.0f);
  int used = 1;
  parallel_region(threads, [&](int th, int nth) {
    if (th == 0) used = nth;
    float* dut = du_parts.data() + int64_t(th) * N;
    std::vector<float> dp(static_cast<size_t>(C)), a(static_cast<size_t>(C));
    for (int64_t t = part_begin(rows, th, nth), te = part_begin(rows, th + 1, nth); t < te; ++t) {
      const float* g = dout + t * N;
      float pbar = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        const float* vr = v[c] + t * N;
        float d = 0.0f, aa = 0.0f;
#pragma omp simd reduction(+ : d, aa)
        for (int64_t j = 0; j < N; ++j) d += g[j] * vr[j], aa += u[j] * vr[j];
        dp[size_t(c)] = d, a[size_t(c)] = aa;
        pbar += p[t * C + c] * d;
      }
      for (int64_t c = 0; c < C; ++c) {
        const float pc = p[t * C + c], rc = r[t * C + c], ds = pc * (dp[size_t(c)] - pbar);
        const float su = ds * rc, sv = -ds * a[size_t(c)] * rc * rc * rc / float(N);
        const float* vr = v[c] + t * N;
        if (float* d = dv[c] ? dv[c] + t * N : nullptr) {
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) d[j] += pc * g[j] + su * u[j] + sv * vr[j];
        }
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) dut[j] += su * vr[j];
      }
    }
  });
  for (int th = 0; th < used; ++th) {
    const float* part = du_parts.data() + int64_t(th) * N;
    for (int64_t j = 0; j < N; ++j) du[j] += part[j];
  }
}

}  // namespace myriad::cpu
