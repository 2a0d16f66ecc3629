// Reference sequence ops: causal depthwise conv1d with carried state, RoPE, causal attention (materialises
// the full score matrix: it is the oracle, not the fast path). T = float or double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/kernels.h"

namespace myriad::ref {

template <class T>
void conv1d_forward(T* y, T* state_out, const T* x, const T* w, const T* state_in, int64_t B, int64_t Tn, int64_t C,
                    int64_t W) {
  const int64_t S = W - 1;
  auto xx = [&](int64_t b, int64_t t, int64_t c) -> T {  // t indexes concat(state_in, x)
    if (t < S) return state_in ? state_in[(b * S + t) * C + c] : T(0);
    return x[(b * Tn + t - S) * C + c];
  };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < C; ++c) {
        T acc = 0;
        for (int64_t j = 0; j < W; ++j) acc += w[c * W + j] * xx(b, t + j, c);
        y[(b * Tn + t) * C + c] = acc;
      }
    if (state_out)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < C; ++c) state_out[(b * S + s) * C + c] = xx(b, Tn + s, c);
  }
}

template <class T>
void conv1d_backward(T* dx, T* dw, T* dstate_in, const T* dy, const T* x, const T* w, const T* state_in, int64_t B,
                     int64_t Tn, int64_t C, int64_t W) {
  const int64_t S = W - 1;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Tn; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const T g = dy[(b * Tn + t) * C + c];
        for (int64_t j = 0; j < W; ++j) {
          const int64_t tt = t + j;
          if (tt < S) {
            if (dstate_in) dstate_in[(b * S + tt) * C + c] += w[c * W + j] * g;
            if (state_in) dw[c * W + j] += g * state_in[(b * S + tt) * C + c];
          } else {
            dx[(b * Tn + tt - S) * C + c] += w[c * W + j] * g;
            dw[c * W + j] += g * x[(b * Tn + tt - S) * C + c];
          }
        }
      }
}

// Pair index of rotated column j (0 <= j < R/2): (first, second) column offsets within the row.
inline void rope_pair(const RopeLayout& l, int64_t j, int64_t* a, int64_t* b) {
  if (l.interleaved) {
    *a = l.col0 + 2 * j;
    *b = *a + 1;
  } else {
    *a = l.col0 + j;
    *b = l.col0 + j + l.rot / 2;
  }
}

template <class T>
void rope_forward(T* y, const T* x, const T* cos, const T* sin, int64_t Tn, int64_t heads, int64_t N, RopeLayout l) {
  const int64_t half = l.rot / 2;
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const T* xr = x + (t * heads + h) * N;
      T* yr = y + (t * heads + h) * N;
      for (int64_t j = 0; j < N; ++j) yr[j] = xr[j];
      for (int64_t j = 0; j < half; ++j) {
        int64_t a, b;
        rope_pair(l, j, &a, &b);
        const T c = cos[t * half + j], s = sin[t * half + j];
        yr[a] = xr[a] * c - xr[b] * s;
        yr[b] = xr[a] * s + xr[b] * c;
      }
    }
}

template <class T>
void rope_backward(T* dx, const T* dy, const T* cos, const T* sin, int64_t Tn, int64_t heads, int64_t N, RopeLayout l) {
  const int64_t half = l.rot / 2;
  for (int64_t t = 0; t < Tn; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const T* dyr = dy + (t * heads + h) * N;
      T* dxr = dx + (t * heads + h) * N;
      std::vector<bool> rotated(size_t(N), false);
      for (int64_t j = 0; j < half; ++j) {
        int64_t a, b;
        rope_pair(l, j, &a, &b);
        rotated[size_t(a)] = rotated[size_t(b)] = true;
        const T c = cos[t * half + j], s = sin[t * half + j];
        dxr[a] += dyr[a] * c + dyr[b] * s;
        dxr[b] += -dyr[a] * s + dyr[b] * c;
      }
      for (int64_t j = 0; j < N; ++j)
        if (!rotated[size_t(j)]) dxr[j] += dyr[j];
    }
}

// Full-matrix attention: P = softmax(scale * q k^T over the keys query i sees), out = P v. sees(b, i, j): whether
// query i of sequence b reads key j (causal: j <= i; all keys when not; block-sparse: sparse_sees below).
template <class T, class Sees>
void masked_attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, AttentionShape s, Sees sees) {
  const int64_t group = s.H / s.Hk;
  std::vector<T> p(static_cast<size_t>(s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.T; ++i) {
        const T* qi = q + ((b * s.T + i) * s.H + h) * s.Dk;
        T mx = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < s.T; ++j) {
          if (!sees(b, i, j)) continue;
          const T* kj = k + ((b * s.T + j) * s.Hk + hk) * s.Dk;
          T d = 0;
          for (int64_t e = 0; e < s.Dk; ++e) d += qi[e] * kj[e];
          p[size_t(j)] = d * T(s.scale);
          mx = std::max(mx, p[size_t(j)]);
        }
        T sum = 0;
        for (int64_t j = 0; j < s.T; ++j)
          if (sees(b, i, j)) sum += std::exp(p[size_t(j)] - mx);
        const T l = mx + std::log(sum);
        lse[(b * s.H + h) * s.T + i] = l;
        T* oi = out + ((b * s.T + i) * s.H + h) * s.Dv;
        for (int64_t e = 0; e < s.Dv; ++e) oi[e] = 0;
        for (int64_t j = 0; j < s.T; ++j) {
          if (!sees(b, i, j)) continue;
          const T pj = std::exp(p[size_t(j)] - l);
          const T* vj = v + ((b * s.T + j) * s.Hk + hk) * s.Dv;
          for (int64_t e = 0; e < s.Dv; ++e) oi[e] += pj * vj[e];
        }
      }
    }
}

template <class T, class Sees>
void masked_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                               const T* v, AttentionShape s, Sees sees) {
  const int64_t group = s.H / s.Hk;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < s.T; ++i) {
        const T* qi = q + ((b * s.T + i) * s.H + h) * s.Dk;
        const T* doi = dout + ((b * s.T + i) * s.H + h) * s.Dv;
        const T* oi = out + ((b * s.T + i) * s.H + h) * s.Dv;
        T delta = 0;  // rowsum(dO * O)
        for (int64_t e = 0; e < s.Dv; ++e) delta += doi[e] * oi[e];
        const T l = lse[(b * s.H + h) * s.T + i];
        for (int64_t j = 0; j < s.T; ++j) {
          if (!sees(b, i, j)) continue;
          const T* kj = k + ((b * s.T + j) * s.Hk + hk) * s.Dk;
          const T* vj = v + ((b * s.T + j) * s.Hk + hk) * s.Dv;
          T d = 0;
          for (int64_t e = 0; e < s.Dk; ++e) d += qi[e] * kj[e];
          const T p = std::exp(d * T(s.scale) - l);
          T dp = 0;
          for (int64_t e = 0; e < s.Dv; ++e) {
            dp += doi[e] * vj[e];
            dv[((b * s.T + j) * s.Hk + hk) * s.Dv + e] += p * doi[e];
          }
          const T ds = p * (dp - delta) * T(s.scale);
          for (int64_t e = 0; e < s.Dk; ++e) {
            dq[((b * s.T + i) * s.H + h) * s.Dk + e] += ds * kj[e];
            dk[((b * s.T + j) * s.Hk + hk) * s.Dk + e] += ds * qi[e];
          }
        }
      }
    }
}

inline auto causal_sees(bool causal) {
  return [causal](int64_t, int64_t i, int64_t j) { return !causal || j <= i; };
}

template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, AttentionShape s) {
  masked_attention_forward(out, lse, q, k, v, s, causal_sees(s.causal));
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, AttentionShape s) {
  masked_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, s, causal_sees(s.causal));
}

// Block-sparse (ops/kernels.h SparseAttentionShape), written from its definition: query i sees key j <= i when j's
// block is one of its chosen ones or j lies at or after the start of its (local_blocks + 1) last blocks.
inline auto sparse_sees(const SparseAttentionShape& s, const int32_t* blocks) {
  return [s, blocks](int64_t b, int64_t i, int64_t j) {
    if (j > i) return false;
    if (j / s.block >= std::max<int64_t>(0, i / s.block - s.local_blocks)) return true;
    const int32_t* c = blocks + (b * s.attn.T + i) * s.top_k;
    return std::find(c, c + s.top_k, int32_t(j / s.block)) != c + s.top_k;
  };
}

}  // namespace myriad::ref
