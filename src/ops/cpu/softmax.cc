// Softmax and log-softmax over rows on the CPU (max-subtracted, f32; rows threaded).
#include <cmath>
#include <limits>

#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels.h"

namespace myriad::cpu {

namespace {
int64_t row_grain(int64_t N) {
  return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(N, 1));
}

// y = x - max, returns log(sum exp(x - max)).
float shifted_log_sum_exp(float* y, const float* x, int64_t N) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < N; ++j) mx = std::max(mx, x[j]);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < N; ++j) {
    y[j] = x[j] - mx;
    s += fast_exp(y[j]);
  }
  return std::log(s);
}
}  // namespace

void softmax_forward(float* y, const float* x, int64_t rows, int64_t N) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * N;
      const float l = shifted_log_sum_exp(yr, x + r * N, N);
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) yr[j] = fast_exp(yr[j] - l);
    }
  });
}

void log_softmax_forward(float* y, const float* x, int64_t rows, int64_t N) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * N;
      const float l = shifted_log_sum_exp(yr, x + r * N, N);
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) yr[j] -= l;
    }
  });
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * N;
      const float* dyr = dy + r * N;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < N; ++j) dot += dyr[j] * yr[j];
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) dx[r * N + j] += yr[j] * (dyr[j] - dot);
    }
  });
}

void log_softmax_backward(float* dx, const float* dy, const float* y, int64_t rows, int64_t N) {
  parallel_for(rows, row_grain(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * N;
      const float* dyr = dy + r * N;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < N; ++j) s += dyr[j];
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) dx[r * N + j] += dyr[j] - fast_exp(yr[j]) * s;
    }
  });
}

}  // namespace myriad::cpu
