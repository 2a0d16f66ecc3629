// Kimi Delta Attention on the CPU (DESIGN 1.2).
//
// Recurrent form: per token, four passes over the K x V state (decay, S^T k, rank-1 update, S^T q), with the
// V axis contiguous and vectorised. Used for decode and as the backward's inner loop.
//
// Chunkwise form, per chunk of C tokens with start state S0 and in-chunk cumulative log-decay G_i = sum_{j<=i} g_j:
//   S_i = Diag(e^{G_i}) S0 + sum_{j<=i} Diag(e^{G_i - G_j}) k_j w_j^T        (WY form of the delta rule)
//   w = solve((I + Diag(beta) A), Diag(beta) (V - (k e^{G}) S0)),  A_ij = sum_c k_ic k_jc e^{G_ic - G_jc}, j < i
//   O = (q e^{G}) S0 + M W,                                       M_ij = sum_c q_ic k_jc e^{G_ic - G_jc}, j <= i
//   S_C = Diag(e^{G_C}) S0 + (k e^{G_C - G})^T W
// The products with S0 and W are sgemm calls. A and M are formed in 16 x 16 blocks, each anchored at a token
// r of the column block so that every exponent stays bounded: for an off-diagonal block r is the column block's
// last token (both factors e^{G_i - G_r}, e^{G_r - G_j} are <= 1); on the diagonal r is the block's first token
// (the factor e^{G_r - G_j} is at most e^{15 |lb|} = e^75 for lb = -5, far inside f32's range).
// NOTE: this relies on the decay lower bound (gate_lower_bound): with unbounded log-decay a 16-token span could
// overflow; DESIGN 1.2 bounds g in (lb, 0).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels.h"

namespace myriad::cpu {

namespace {

constexpr int64_t kBlock = 16;

struct HeadPtrs {
  const float *q, *k, *v, *g, *beta;
  int64_t ldk, ldv, ldb;  // row strides: H*K, H*V, H
};

HeadPtrs head_ptrs(const float* q, const float* k, const float* v, const float* g, const float* beta, const KdaShape& s,
                   int64_t b, int64_t h) {
  const int64_t row0 = b * s.T * s.H + h;
  return {q + row0 * s.K, k + row0 * s.K, v + row0 * s.V, g + row0 * s.K, beta + row0, s.H * s.K, s.H * s.V, s.H};
}

// One recurrent step on state S [K, V]: decay, delta update, output. u (V) is scratch; o may be null.
inline void recurrent_step(float* S, float* u, float* o, const float* qt, const float* kt, const float* vt,
                           const float* gt, float bt, int64_t K, int64_t V) {
  for (int64_t e = 0; e < V; ++e) u[e] = vt[e];
  for (int64_t c = 0; c < K; ++c) {
    float* Sc = S + c * V;
    const float a = fast_exp(gt[c]), kc = kt[c];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) {
      Sc[e] *= a;
      u[e] -= Sc[e] * kc;
    }
  }
  for (int64_t c = 0; c < K; ++c) {
    float* Sc = S + c * V;
    const float f = bt * kt[c];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) Sc[e] += f * u[e];
  }
  if (!o) return;
  for (int64_t e = 0; e < V; ++e) o[e] = 0.0f;
  for (int64_t c = 0; c < K; ++c) {
    const float* Sc = S + c * V;
    const float qc = qt[c];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) o[e] += Sc[e] * qc;
  }
}

// Runs fn(b, h) for every sequence and head: across threads with single-threaded sgemm when there are enough
// heads, else one after another with threaded sgemm.
template <class F>
void for_each_head(const KdaShape& s, F&& fn) {
  const int64_t n = s.B * s.H;
  const int nt = num_threads();
  // Below ~1 MFLOP per head a fork/join costs more than it saves.
  const bool worth_it = double(s.T) * double(s.K) * double(s.V) * 8.0 > 1e6;
  if (n >= nt && nt > 1 && worth_it) {
    BlasSingleThread single;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t i = 0; i < n; ++i) fn(i / s.H, i % s.H);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i / s.H, i % s.H);
  }
}

// Scratch for one head's chunk computation.
struct ChunkScratch {
  std::vector<float> G, Qt, Kt, Kh, A, M, W, L, Lq, R;
  ChunkScratch(int64_t C, int64_t K, int64_t V)
      : G(static_cast<size_t>(C * K)),
        Qt(static_cast<size_t>(C * K)),
        Kt(static_cast<size_t>(C * K)),
        Kh(static_cast<size_t>(C * K)),
        A(static_cast<size_t>(C * C)),
        M(static_cast<size_t>(C * C)),
        W(static_cast<size_t>(C * V)),
        L(static_cast<size_t>(kBlock * K)),
        Lq(static_cast<size_t>(kBlock * K)),
        R(static_cast<size_t>(kBlock * K)) {}
};

// One chunk of n tokens starting at row t0 of head p: reads state S [K, V] (the chunk's start state), writes
// o rows (if o) and replaces S by the chunk's end state.
void chunk_step(float* S, float* o, int64_t ldo, const HeadPtrs& p, int64_t t0, int64_t n, int64_t K, int64_t V,
                ChunkScratch& w) {
  float* G = w.G.data();
  for (int64_t i = 0; i < n; ++i) {
    const float* gi = p.g + (t0 + i) * p.ldk;
    float* Gi = G + i * K;
    const float* Gp = i ? G + (i - 1) * K : nullptr;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) Gi[c] = (Gp ? Gp[c] : 0.0f) + gi[c];
  }
  const float* Glast = G + (n - 1) * K;
  for (int64_t i = 0; i < n; ++i) {
    const float* qi = p.q + (t0 + i) * p.ldk;
    const float* ki = p.k + (t0 + i) * p.ldk;
    const float* Gi = G + i * K;
    float* qt = w.Qt.data() + i * K;
    float* kt = w.Kt.data() + i * K;
    float* kh = w.Kh.data() + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      const float e = fast_exp(Gi[c]);
      qt[c] = qi[c] * e;
      kt[c] = ki[c] * e;
      kh[c] = ki[c] * fast_exp(Glast[c] - Gi[c]);
    }
  }
  // A (strictly lower) and M (lower with diagonal), blockwise with bounded exponents.
  float* A = w.A.data();
  float* M = w.M.data();
  std::fill(A, A + n * n, 0.0f);
  std::fill(M, M + n * n, 0.0f);
  for (int64_t a0 = 0; a0 < n; a0 += kBlock) {
    const int64_t a1 = std::min(n, a0 + kBlock);
    for (int64_t b0 = 0; b0 <= a0; b0 += kBlock) {
      const int64_t b1 = std::min(n, b0 + kBlock);
      const int64_t r = b0 == a0 ? b0 : b1 - 1;
      const float* Gr = G + r * K;
      for (int64_t j = b0; j < b1; ++j) {
        const float* kj = p.k + (t0 + j) * p.ldk;
        const float* Gj = G + j * K;
        float* Rj = w.R.data() + (j - b0) * K;
#pragma omp simd
        for (int64_t c = 0; c < K; ++c) Rj[c] = kj[c] * fast_exp(Gr[c] - Gj[c]);
      }
      for (int64_t i = a0; i < a1; ++i) {
        const float* ki = p.k + (t0 + i) * p.ldk;
        const float* qi = p.q + (t0 + i) * p.ldk;
        const float* Gi = G + i * K;
        float* Li = w.L.data();
        float* Lqi = w.Lq.data();
#pragma omp simd
        for (int64_t c = 0; c < K; ++c) {
          const float e = fast_exp(Gi[c] - Gr[c]);
          Li[c] = ki[c] * e;
          Lqi[c] = qi[c] * e;
        }
        const int64_t jend = std::min(b1, i + 1);
        for (int64_t j = b0; j < jend; ++j) {
          const float* Rj = w.R.data() + (j - b0) * K;
          float da = 0.0f, dm = 0.0f;
#pragma omp simd reduction(+ : da, dm)
          for (int64_t c = 0; c < K; ++c) {
            da += Li[c] * Rj[c];
            dm += Lqi[c] * Rj[c];
          }
          if (j < i) A[i * n + j] = da;
          M[i * n + j] = dm;
        }
      }
    }
  }
  // W = V - Kt S0, then forward substitution w_i = beta_i (W_i - sum_{j<i} A_ij w_j).
  float* W = w.W.data();
  for (int64_t i = 0; i < n; ++i) std::memcpy(W + i * V, p.v + (t0 + i) * p.ldv, size_t(V) * sizeof(float));
  gemm(false, false, n, V, K, -1.0f, w.Kt.data(), K, S, V, 1.0f, W, V);
  for (int64_t i = 0; i < n; ++i) {
    float* Wi = W + i * V;
    for (int64_t j = 0; j < i; ++j) {
      const float aij = A[i * n + j];
      const float* Wj = W + j * V;
#pragma omp simd
      for (int64_t e = 0; e < V; ++e) Wi[e] -= aij * Wj[e];
    }
    const float bi = p.beta[(t0 + i) * p.ldb];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) Wi[e] *= bi;
  }
  // O = Qt S0 + M W
  if (o) {
    gemm(false, false, n, V, K, 1.0f, w.Qt.data(), K, S, V, 0.0f, o + t0 * ldo, ldo);
    gemm(false, false, n, V, n, 1.0f, M, n, W, V, 1.0f, o + t0 * ldo, ldo);
  }
  // S = Diag(e^{G_last}) S0 + Kh^T W
  for (int64_t c = 0; c < K; ++c) {
    const float a = fast_exp(Glast[c]);
    float* Sc = S + c * V;
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) Sc[e] *= a;
  }
  gemm(true, false, K, V, n, 1.0f, w.Kh.data(), K, W, V, 1.0f, S, V);
}

void load_state(float* S, const float* S0, const KdaShape& s, int64_t b, int64_t h) {
  const size_t kv = size_t(s.K * s.V);
  if (S0)
    std::memcpy(S, S0 + (b * s.H + h) * s.K * s.V, kv * sizeof(float));
  else
    std::fill(S, S + kv, 0.0f);
}

void check_shape(const KdaShape& s) {
  MYRIAD_REQUIRE(s.B >= 0 && s.T >= 0 && s.H >= 0 && s.K >= 0 && s.V >= 0 && s.chunk >= 1, kShape,
                 "kda: sizes must be non-negative and chunk >= 1 (B ", s.B, ", T ", s.T, ", H ", s.H, ", K ", s.K,
                 ", V ", s.V, ", chunk ", s.chunk, ")");
}

}  // namespace

void kda_recurrent_forward(float* o, float* S_out, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const float* S0, KdaShape s) {
  check_shape(s);
  for_each_head(s, [&](int64_t b, int64_t h) {
    std::vector<float> S(static_cast<size_t>(s.K * s.V)), u(static_cast<size_t>(s.V));
    load_state(S.data(), S0, s, b, h);
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    float* oh = o + (b * s.T * s.H + h) * s.V;
    for (int64_t t = 0; t < s.T; ++t)
      recurrent_step(S.data(), u.data(), oh + t * p.ldv, p.q + t * p.ldk, p.k + t * p.ldk, p.v + t * p.ldv,
                     p.g + t * p.ldk, p.beta[t * p.ldb], s.K, s.V);
    if (S_out) std::memcpy(S_out + (b * s.H + h) * s.K * s.V, S.data(), S.size() * sizeof(float));
  });
}

void kda_chunk_forward(float* o, float* S_out, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, const float* S0, KdaShape s) {
  check_shape(s);
  for_each_head(s, [&](int64_t b, int64_t h) {
    std::vector<float> S(static_cast<size_t>(s.K * s.V));
    load_state(S.data(), S0, s, b, h);
    ChunkScratch w(s.chunk, s.K, s.V);
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    float* oh = o + (b * s.T * s.H + h) * s.V;
    for (int64_t t0 = 0; t0 < s.T; t0 += s.chunk)
      chunk_step(S.data(), oh, p.ldv, p, t0, std::min(s.chunk, s.T - t0), s.K, s.V, w);
    if (S_out) std::memcpy(S_out + (b * s.H + h) * s.K * s.V, S.data(), S.size() * sizeof(float));
  });
}

void kda_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0, const float* dout,
                  const float* dS_out, const float* q, const float* k, const float* v, const float* g,
                  const float* beta, const float* S0, KdaShape s) {
  check_shape(s);
  const int64_t K = s.K, V = s.V, KV = K * V;
  const int64_t n_chunks = (s.T + s.chunk - 1) / s.chunk;
  for_each_head(s, [&](int64_t b, int64_t h) {
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    // Chunk-start states from the chunkwise forward: [n_chunks, K, V].
    std::vector<float> starts(static_cast<size_t>(std::max<int64_t>(n_chunks, 1) * KV));
    {
      std::vector<float> S(static_cast<size_t>(KV));
      load_state(S.data(), S0, s, b, h);
      ChunkScratch w(s.chunk, K, V);
      for (int64_t c = 0; c < n_chunks; ++c) {
        std::memcpy(starts.data() + c * KV, S.data(), size_t(KV) * sizeof(float));
        const int64_t t0 = c * s.chunk;
        chunk_step(S.data(), nullptr, 0, p, t0, std::min(s.chunk, s.T - t0), K, V, w);
      }
    }
    const int64_t row0 = b * s.T * s.H + h;
    float* dqh = dq + row0 * K;
    float* dkh = dk + row0 * K;
    float* dvh = dv + row0 * V;
    float* dgh = dg + row0 * K;
    float* dbh = dbeta + row0;
    const float* doh = dout + row0 * V;
    // Reverse over chunks; inside a chunk the per-token states are recomputed (C x K x V at most).
    std::vector<float> dS(static_cast<size_t>(KV), 0.0f), prev(static_cast<size_t>(s.chunk * KV)),
        dec(static_cast<size_t>(s.chunk * KV)), us(static_cast<size_t>(s.chunk * V)), du(static_cast<size_t>(V));
    if (dS_out) std::memcpy(dS.data(), dS_out + (b * s.H + h) * KV, size_t(KV) * sizeof(float));
    for (int64_t c = n_chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * s.chunk, n = std::min(s.chunk, s.T - t0);
      std::vector<float> S(starts.begin() + c * KV, starts.begin() + (c + 1) * KV);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = t0 + i;
        std::memcpy(prev.data() + i * KV, S.data(), size_t(KV) * sizeof(float));
        float* Sd = dec.data() + i * KV;
        const float* gt = p.g + t * p.ldk;
        const float* kt = p.k + t * p.ldk;
        float* u = us.data() + i * V;
        std::memcpy(u, p.v + t * p.ldv, size_t(V) * sizeof(float));
        for (int64_t cc = 0; cc < K; ++cc) {
          const float a = fast_exp(gt[cc]), kc = kt[cc];
          float* Sc = S.data() + cc * V;
          float* Dc = Sd + cc * V;
#pragma omp simd
          for (int64_t e = 0; e < V; ++e) {
            Sc[e] *= a;
            Dc[e] = Sc[e];
            u[e] -= Sc[e] * kc;
          }
        }
        const float bt = p.beta[t * p.ldb];
        for (int64_t cc = 0; cc < K; ++cc) {
          float* Sc = S.data() + cc * V;
          const float f = bt * kt[cc];
#pragma omp simd
          for (int64_t e = 0; e < V; ++e) Sc[e] += f * u[e];
        }
      }
      for (int64_t i = n - 1; i >= 0; --i) {
        const int64_t t = t0 + i;
        const float* qt = p.q + t * p.ldk;
        const float* kt = p.k + t * p.ldk;
        const float* gt = p.g + t * p.ldk;
        const float* dot = doh + t * p.ldv;
        const float* Sp = dec.data() + i * KV;
        const float* u = us.data() + i * V;
        const float bt = p.beta[t * p.ldb];
        // o = S_t^T q with S_t = S'_t + beta k u^T
        for (int64_t cc = 0; cc < K; ++cc) {
          const float* Spc = Sp + cc * V;
          float* dSc = dS.data() + cc * V;
          const float f = bt * kt[cc], qc = qt[cc];
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int64_t e = 0; e < V; ++e) {
            acc += (Spc[e] + f * u[e]) * dot[e];
            dSc[e] += qc * dot[e];
          }
          dqh[t * p.ldk + cc] += acc;
        }
        // through S_t = S'_t + beta k u^T: du = beta dS^T k; dbeta = k^T dS u; dk += beta dS u
        std::fill(du.begin(), du.end(), 0.0f);
        for (int64_t cc = 0; cc < K; ++cc) {
          const float* dSc = dS.data() + cc * V;
          const float kc = kt[cc];
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int64_t e = 0; e < V; ++e) {
            du[size_t(e)] += dSc[e] * kc;
            acc += dSc[e] * u[e];
          }
          dkh[t * p.ldk + cc] += bt * acc;
        }
        float db = 0.0f;
        for (int64_t e = 0; e < V; ++e) {
          db += du[size_t(e)] * u[e];
          du[size_t(e)] *= bt;
        }
        dbh[t * p.ldb] += db;
        // through u = v - S'^T k, then S' = Diag(alpha) S_{t-1}
        for (int64_t e = 0; e < V; ++e) dvh[t * p.ldv + e] += du[size_t(e)];
        const float* Sprev = prev.data() + i * KV;
        for (int64_t cc = 0; cc < K; ++cc) {
          const float* Spc = Sp + cc * V;
          const float* Pc = Sprev + cc * V;
          float* dSc = dS.data() + cc * V;
          const float kc = kt[cc], a = fast_exp(gt[cc]);
          float acc_k = 0.0f, acc_g = 0.0f;
#pragma omp simd reduction(+ : acc_k, acc_g)
          for (int64_t e = 0; e < V; ++e) {
            acc_k += Spc[e] * du[size_t(e)];
            const float d = dSc[e] - kc * du[size_t(e)];  // d/dS'_t
            acc_g += d * Pc[e];
            dSc[e] = d * a;  // d/dS_{t-1}
          }
          dkh[t * p.ldk + cc] -= acc_k;
          dgh[t * p.ldk + cc] += acc_g * a;
        }
      }
    }
    if (dS0) {
      float* d = dS0 + (b * s.H + h) * KV;
      for (int64_t i = 0; i < KV; ++i) d[i] += dS[size_t(i)];
    }
  });
}

}  // namespace myriad::cpu
