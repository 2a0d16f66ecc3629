// Reference cross-entropy (full logits), top-k, gather / scatter-add, embedding, AdamW. T = float or double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "ops/kernels.h"

namespace myriad::ref {

template <class T>
int64_t cross_entropy_forward(T* loss, T* lse, const T* h, const T* W, const int64_t* targets, int64_t Tn, int64_t D,
                              int64_t V, int64_t ignore_index, const T* weights = nullptr, T* nll = nullptr) {
  std::vector<T> logits(static_cast<size_t>(V));
  T total = 0;
  int64_t count = 0;
  for (int64_t t = 0; t < Tn; ++t) {
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < V; ++c) {
      T d = 0;
      for (int64_t e = 0; e < D; ++e) d += h[t * D + e] * W[c * D + e];
      logits[size_t(c)] = d;
      mx = std::max(mx, d);
    }
    T s = 0;
    for (int64_t c = 0; c < V; ++c) s += std::exp(logits[size_t(c)] - mx);
    lse[t] = mx + std::log(s);
    if (nll) nll[t] = 0;
    if (targets[t] == ignore_index) continue;
    const T x = lse[t] - logits[size_t(targets[t])];
    if (nll) nll[t] = x;
    total += weights ? weights[t] * x : x;
    ++count;
  }
  *loss = weights ? total : count ? total / T(count) : T(0);
  return count;
}

template <class T>
void cross_entropy_backward(T* dh, T* dW, T dloss, const T* h, const T* W, const int64_t* targets, const T* lse,
                            int64_t Tn, int64_t D, int64_t V, int64_t ignore_index, const T* weights = nullptr) {
  int64_t count = 0;
  for (int64_t t = 0; t < Tn; ++t) count += targets[t] != ignore_index;
  if (!count) return;
  for (int64_t t = 0; t < Tn; ++t) {
    if (targets[t] == ignore_index) continue;
    for (int64_t c = 0; c < V; ++c) {
      T d = 0;
      for (int64_t e = 0; e < D; ++e) d += h[t * D + e] * W[c * D + e];
      const T scale = weights ? dloss * weights[t] : dloss / T(count);
      const T g = (std::exp(d - lse[t]) - (c == targets[t] ? T(1) : T(0))) * scale;
      for (int64_t e = 0; e < D; ++e) {
        dh[t * D + e] += g * W[c * D + e];
        dW[c * D + e] += g * h[t * D + e];
      }
    }
  }
}

// Stable sort by value descending, index ascending among equals.
template <class T>
void topk(int32_t* idx, T* val, const T* x, int64_t rows, int64_t N, int64_t k) {
  std::vector<int32_t> order(static_cast<size_t>(N));
  for (int64_t r = 0; r < rows; ++r) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[r * N + a] > x[r * N + b]; });
    for (int64_t j = 0; j < k; ++j) {
      idx[r * k + j] = order[size_t(j)];
      val[r * k + j] = x[r * N + order[size_t(j)]];
    }
  }
}

template <class T>
void gather_rows(T* out, const T* src, const int32_t* idx, int64_t n, int64_t src_rows, int64_t N) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) out[i * N + j] = src[int64_t(idx[i]) * N + j];
}

template <class T>
void scatter_add_rows(T* dst, const T* src, const int32_t* idx, const T* w, int64_t n, int64_t dst_rows, int64_t N) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < N; ++j) dst[int64_t(idx[i]) * N + j] += (w ? w[i] : T(1)) * src[i * N + j];
}

template <class T>
void scatter_add_rows_backward(T* dsrc, T* dw, const T* ddst, const T* src, const int32_t* idx, const T* w, int64_t n,
                               int64_t dst_rows, int64_t N) {
  for (int64_t i = 0; i < n; ++i) {
    T dot = 0;
    for (int64_t j = 0; j < N; ++j) {
      const T g = ddst[int64_t(idx[i]) * N + j];
      dsrc[i * N + j] += (w ? w[i] : T(1)) * g;
      dot += g * src[i * N + j];
    }
    if (dw) dw[i] += dot;
  }
}

template <class T>
void embedding_forward(T* out, const T* table, const int64_t* ids, int64_t Tn, int64_t V, int64_t D) {
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t e = 0; e < D; ++e) out[t * D + e] = table[ids[t] * D + e];
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int64_t* ids, int64_t Tn, int64_t V, int64_t D) {
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t e = 0; e < D; ++e) dtable[ids[t] * D + e] += dout[t * D + e];
}

template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, int64_t n, AdamWParams hp) {
  const T b1 = hp.beta1, b2 = hp.beta2;
  const T c1 = T(1) - std::pow(b1, T(hp.step)), c2 = T(1) - std::pow(b2, T(hp.step));
  for (int64_t i = 0; i < n; ++i) {
    p[i] -= T(hp.lr) * T(hp.weight_decay) * p[i];
    m[i] = b1 * m[i] + (T(1) - b1) * g[i];
    v[i] = b2 * v[i] + (T(1) - b2) * g[i] * g[i];
    p[i] -= T(hp.lr) * (m[i] / c1) / (std::sqrt(v[i] / c2) + T(hp.eps));
  }
}

}  // namespace myriad::ref
