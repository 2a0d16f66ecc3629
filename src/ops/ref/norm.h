// Reference RMSNorm (plain and the per-head gated form), L2 normalisation and the AttnRes read. T = float or double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

// The AttnRes read (docs/design.md §1.4) of C candidates v[c] [rows, N] with u = w_norm * w_proj [N]:
//   r[t, c] = 1 / sqrt(mean_j v[c][t, j]^2 + eps),  s[t, c] = r[t, c] sum_j u_j v[c][t, j],
//   p[t, :] = softmax(s[t, :]),  out[t] = sum_c p[t, c] v[c][t].
// p and r [rows, C] are kept for the backward.
template <class T>
void attn_res_read_forward(T* out, T* p, T* r, const T* const* v, int64_t C, int64_t rows, int64_t N, const T* u,
                           T eps) {
  for (int64_t t = 0; t < rows; ++t) {
    T mx = -INFINITY;
    for (int64_t c = 0; c < C; ++c) {
      T ss = 0, a = 0;
      for (int64_t j = 0; j < N; ++j) ss += v[c][t * N + j] * v[c][t * N + j], a += u[j] * v[c][t * N + j];
      r[t * C + c] = T(1) / std::sqrt(ss / T(N) + eps);
      p[t * C + c] = r[t * C + c] * a;  // the score, until the softmax below
      mx = std::max(mx, p[t * C + c]);
    }
    T z = 0;
    for (int64_t c = 0; c < C; ++c) z += (p[t * C + c] = std::exp(p[t * C + c] - mx));
    for (int64_t c = 0; c < C; ++c) p[t * C + c] /= z;
    for (int64_t j = 0; j < N; ++j) {
      T o = 0;
      for (int64_t c = 0; c < C; ++c) o += p[t * C + c] * v[c][t * N + j];
      out[t * N + j] = o;
    }
  }
}

// Its backward, accumulated: dv[c] += d out / d v[c] (dv[c] may be null: not wanted), du [N] += d out / d u.
// With a_c = u . v_c: dp_c = dout . v_c, ds_c = p_c (dp_c - sum_c' p_c' dp_c'), and
//   dv_c += p_c dout + ds_c (r_c u - a_c r_c^3 v_c / N),   du += sum_c ds_c r_c v_c.
template <class T>
void attn_res_read_backward(T* const* dv, T* du, const T* dout, const T* const* v, const T* p, const T* r, int64_t C,
                            int64_t rows, int64_t N, const T* u) {
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<T> dp(static_cast<size_t>(C)), a(static_cast<size_t>(C));
    T pbar = 0;
    for (int64_t c = 0; c < C; ++c) {
      T d = 0, aa = 0;
      for (int64_t j = 0; j < N; ++j) d += dout[t * N + j] * v[c][t * N + j], aa += u[j] * v[c][t * N + j];
      dp[size_t(c)] = d, a[size_t(c)] = aa;
      pbar += p[t * C + c] * d;
    }
    for (int64_t c = 0; c < C; ++c) {
      const T pc = p[t * C + c], rc = r[t * C + c], ds = pc * (dp[size_t(c)] - pbar);
      for (int64_t j = 0; j < N; ++j) {
        const T vj = v[c][t * N + j];
        if (dv[c])
          dv[c][t * N + j] += pc * dout[t * N + j] + ds * (rc * u[j] - a[size_t(c)] * rc * rc * rc * vj / T(N));
        du[j] += ds * rc * vj;
      }
    }
  }
}

}  // namespace myriad::ref
