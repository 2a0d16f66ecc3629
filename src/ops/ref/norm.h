// Reference RMSNorm (plain and the per-head gated form) and L2 normalisation. T = float or double.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/ref/elementwise.h"

namespace myriad::ref {

template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, const T* g, int64_t rows, int64_t N, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * N;
    T ss = 0;
    for (int64_t j = 0; j < N; ++j) ss += xr[j] * xr[j];
    const T rs = T(1) / std::sqrt(ss / T(N > 0 ? N : 1) + eps);
    rstd[r] = rs;
    for (int64_t j = 0; j < N; ++j) y[r * N + j] = xr[j] * rs * w[j] * (g ? sigmoid(g[r * N + j]) : T(1));
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, T* dg, const T* dy, const T* x, const T* w, const T* g, const T* rstd, int64_t rows,
                      int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    const T rs = rstd[r];
    T dot = 0;  // sum_j (dn_j * w_j) * x_j, where dn = dy * gate
    for (int64_t j = 0; j < N; ++j) {
      const int64_t i = r * N + j;
      const T gate = g ? sigmoid(g[i]) : T(1);
      const T dn = dy[i] * gate;
      if (g) dg[i] += dy[i] * x[i] * rs * w[j] * gate * (T(1) - gate);
      dw[j] += dn * x[i] * rs;
      dot += dn * w[j] * x[i];
    }
    for (int64_t j = 0; j < N; ++j) {
      const int64_t i = r * N + j;
      const T dn = dy[i] * (g ? sigmoid(g[i]) : T(1));
      dx[i] += rs * (dn * w[j] - x[i] * rs * rs * dot / T(N));
    }
  }
}

template <class T>
void l2norm_forward(T* y, T* rnorm, const T* x, int64_t rows, int64_t N, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T ss = 0;
    for (int64_t j = 0; j < N; ++j) ss += x[r * N + j] * x[r * N + j];
    rnorm[r] = T(1) / std::sqrt(ss + eps);
    for (int64_t j = 0; j < N; ++j) y[r * N + j] = x[r * N + j] * rnorm[r];
  }
}

template <class T>
void l2norm_backward(T* dx, const T* dy, const T* y, const T* rnorm, int64_t rows, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    T dot = 0;
    for (int64_t j = 0; j < N; ++j) dot += y[r * N + j] * dy[r * N + j];
    for (int64_t j = 0; j < N; ++j) dx[r * N + j] += rnorm[r] * (dy[r * N + j] - y[r * N + j] * dot);
  }
}

}  // namespace myriad::ref
