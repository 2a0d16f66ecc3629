// Softmax and log-softmax over rows on the CPU (max-subtracted, f32; rows threaded).
#include <cmath>
#include <limits>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd_vec.h"
#include "ops/fast_math.h"

namespace myriad::cpu {

namespace {
int64_t row_grain(int64_t N) {
  return std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(N, 1));
}

// y = x - max, returns log(sum exp(x - max)).
float shifted_log_sum_exp(float* y, const float* x, int64_t N) {
  const float mx = max_of(x, N);
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < N; ++j) {
    y[j] = x[j] - mx;
    s += fast_exp(y[j]);
  }
  return std::log(s);
}
}  // namespace

float max_of(const float* x, int64_t n) {
  constexpr int64_t L = kLanes<FVec>;
  float mx = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  if (n >= 2 * L) {
    // Two accumulators (the max has a latency of a few cycles), combined lane by lane, then across lanes.
    // Both start at -inf, so a NaN input never enters a lane (u > a is false for it).
    FVec a = {}, b = {};
    a -= std::numeric_limits<float>::infinity();
    b -= std::numeric_limits<float>::infinity();
    for (; j + 2 * L <= n; j += 2 * L) {
      const FVec u = load_v<FVec>(x + j), v = load_v<FVec>(x + j + L);
      a = u > a ? u : a;
      b = v > b ? v : b;
    }
    a = b > a ? b : a;
    float lanes[L];
    store_v(lanes, a);
    for (int64_t i = 0; i < L; ++i) mx = std::max(mx, lanes[i]);
  }
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

float exp_shifted_sum(float* x, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    x[j] = fast_exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

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
