// AdamW update and reductions on the CPU (one streaming pass; threaded, vectorised).
#include <cmath>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"

namespace myriad::cpu {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, AdamWParams hp) {
  const float b1 = hp.beta1, b2 = hp.beta2;
  // NOTE: bias corrections in double: beta2^step underflows float precision long before training ends.
  const float c1 = float(1.0 - std::pow(double(b1), double(hp.step)));
  const float c2 = float(1.0 - std::pow(double(b2), double(hp.step)));
  const float decay = 1.0f - hp.lr * hp.weight_decay, step = hp.lr / c1, ic2 = 1.0f / c2;
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float gi = g[i];
      const float mi = b1 * m[i] + (1.0f - b1) * gi;
      const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = p[i] * decay - step * mi / (std::sqrt(vi * ic2) + hp.eps);
    }
  });
}

double sum_all(const float* x, int64_t n) {
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

void sum_rows_accumulate(float* out, const float* x, int64_t rows, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * N;
#pragma omp simd
    for (int64_t j = 0; j < N; ++j) out[j] += xr[j];
  }
}

}  // namespace myriad::cpu
