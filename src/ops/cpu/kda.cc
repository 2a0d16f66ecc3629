// Kimi Delta Attention on the CPU (docs/design.md §1.2).
//
// Recurrent form: per token, four passes over the K x V state (decay, S^T k, rank-1 update, S^T q), with the
// V axis contiguous and vectorised. Used for decode; its backward (kda_recurrent_backward) is the recurrent
// form's training cost and an independent check of the chunkwise backward.
//
// Chunkwise form, per chunk of C tokens with start state S0 and in-chunk cumulative log-decay G_i = sum_{j<=i} g_j:
//   S_i = Diag(e^{G_i}) S0 + sum_{j<=i} Diag(e^{G_i - G_j}) k_j w_j^T        (WY form of the delta rule)
//   W = solve((I + Diag(beta) A), Diag(beta) (V - (k e^{G}) S0)),  A_ij = sum_c k_ic k_jc e^{G_ic - G_jc}, j < i
//   O = (q e^{G}) S0 + M W,                                       M_ij = sum_c q_ic k_jc e^{G_ic - G_jc}, j <= i
//   S_C = Diag(e^{G_C}) S0 + (k e^{G_C - G})^T W
// The products with S0 and W are sgemm calls; A and M are formed in 16-token column blocks (see BlockFactors).
// Backward (kda_backward) runs the same formulas in reverse, per chunk, all products again sgemm or the block
// kernels: dW = M^T dO + Kh dS_C, a back substitution for dR = d(W / beta), dA = -dR W^T, dM = dO W^T, and
// dS0 = Diag(e^{G_C}) dS_C + Qt^T dO - Kt^T dR carried to the previous chunk.
// The block anchors keep every factor within e^{+-40} when the log-decay is bounded (gate_lower_bound -5: at most 8
// tokens of decay > -5 on either side of the anchor). The unbounded softplus gate can decay far more within a block:
// a diagonal block whose decay on either side of its anchor exceeds 40 (per channel) is formed pair by pair
// instead (exact, every exponent <= 0; slower, and only where the decay is that strong).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/simd_vec.h"
#include "ops/fast_math.h"
#include "ops/serial_blas.h"

namespace myriad::cpu {

namespace {

constexpr int64_t kBlock = 16;
// The backward keeps the saved quantities of at most this many chunks at a time (~1.3 MB per head at C = K = V
// = 64), recomputing one segment's forward from its start state.
constexpr int64_t kSegmentChunks = 16;

struct HeadPtrs {
  const float *q, *k, *v, *g, *beta;
  int64_t ldk, ldv, ldb;  // row strides: H*K, H*V, H
};

HeadPtrs head_ptrs(const float* q, const float* k, const float* v, const float* g, const float* beta, const KdaShape& s,
                   int64_t b, int64_t h) {
  const int64_t row0 = b * s.T * s.H + h;
  return {q + row0 * s.K, k + row0 * s.K, v + row0 * s.V, g + row0 * s.K, beta + row0, s.H * s.K, s.H * s.V, s.H};
}

using Vec = FVec;  // one register of the target (simd_vec.h)
constexpr int64_t kVec = kLanes<Vec>;

// One recurrent step on state S [K, V]: decay, delta update, output. u (max(K, V)) is scratch; o may be null.
// With V a multiple of the vector width, each tile of columns of S (one register wide) is done in two passes over
// K with u and o in registers (the state is in L1); otherwise plain passes over whole rows.
inline void recurrent_step(float* __restrict S, float* __restrict u, float* __restrict o, const float* qt,
                           const float* kt, const float* vt, const float* gt, float bt, int64_t K, int64_t V) {
  if (V % kVec == 0) {
    float* alpha = u;  // the per-channel decays, once per step
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) alpha[c] = fast_exp(gt[c]);
    // Per tile: u = v - (Diag(alpha) S)^T k, then S = Diag(alpha) S + beta k u^T and o = S^T q, storing S once.
    // Four partial sums over c break the multiply-add dependency chains.
    for (int64_t e0 = 0; e0 < V; e0 += kVec) {
      Vec u0 = load_v<Vec>(vt + e0), u1 = {}, u2 = {}, u3 = {};
      int64_t c = 0;
      for (; c + 4 <= K; c += 4) {
        const float* Sc = S + c * V + e0;
        u0 -= load_v<Vec>(Sc) * (alpha[c] * kt[c]);
        u1 -= load_v<Vec>(Sc + V) * (alpha[c + 1] * kt[c + 1]);
        u2 -= load_v<Vec>(Sc + 2 * V) * (alpha[c + 2] * kt[c + 2]);
        u3 -= load_v<Vec>(Sc + 3 * V) * (alpha[c + 3] * kt[c + 3]);
      }
      for (; c < K; ++c) u0 -= load_v<Vec>(S + c * V + e0) * (alpha[c] * kt[c]);
      const Vec ut = (u0 + u1) + (u2 + u3);
      Vec o0 = {}, o1 = {};
      for (c = 0; c < K; ++c) {
        float* Sc = S + c * V + e0;
        const Vec x = load_v<Vec>(Sc) * alpha[c] + ut * (bt * kt[c]);
        store_v(Sc, x);
        if (c & 1)
          o1 += x * qt[c];
        else
          o0 += x * qt[c];
      }
      if (o) store_v(o + e0, o0 + o1);
    }
    return;
  }
  for (int64_t e = 0; e < V; ++e) u[e] = vt[e];
  for (int64_t c = 0; c < K; ++c) {
    float* Sc = S + c * V;
    const float a = fast_exp(gt[c]), kc = kt[c];
    for (int64_t e = 0; e < V; ++e) {
      Sc[e] *= a;
      u[e] -= Sc[e] * kc;
    }
  }
  for (int64_t c = 0; c < K; ++c) {
    float* Sc = S + c * V;
    const float f = bt * kt[c];
    for (int64_t e = 0; e < V; ++e) Sc[e] += f * u[e];
  }
  if (!o) return;
  for (int64_t e = 0; e < V; ++e) o[e] = 0.0f;
  for (int64_t c = 0; c < K; ++c) {
    const float* Sc = S + c * V;
    const float qc = qt[c];
    for (int64_t e = 0; e < V; ++e) o[e] += Sc[e] * qc;
  }
}

// Runs fn(b, h) for every sequence and head: across threads with single-threaded sgemm when there are enough
// heads, else one after another with threaded sgemm.
template <class F>
void for_each_head(const KdaShape& s, F&& fn) {
  const int64_t n = s.B * s.H;
  const int nt = num_threads();
  // Below ~0.25 MFLOP in all a fork/join costs more than it saves (a decode token's 8 heads of 64 x 64 are above).
  const bool worth_it = double(n) * double(s.T) * double(s.K) * double(s.V) * 8.0 > 2.5e5;
  if (n >= nt && nt > 1 && worth_it) {
    ops::ScopedSerialBlas single;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t i = 0; i < n; ++i) fn(i / s.H, i % s.H);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i / s.H, i % s.H);
  }
}

// A[i, j] = L_i . YT[:, j] and M[i, j] = Lq_i . YT[:, j] for i < rows, j < cols <= 16 (YT is [K, 16],
// zero-padded past cols; row stride ldc). Four rows at a time: eight registers of 16 accumulators, so the
// multiply-adds are independent chains sharing each load of YT.
inline void block_products(float* __restrict A, float* __restrict M, int64_t ldc, const float* __restrict L,
                           const float* __restrict Lq, int64_t ldx, const float* __restrict YT, int64_t rows,
                           int64_t cols, int64_t K) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    float a0[kBlock] = {}, a1[kBlock] = {}, a2[kBlock] = {}, a3[kBlock] = {};
    float m0[kBlock] = {}, m1[kBlock] = {}, m2[kBlock] = {}, m3[kBlock] = {};
    const float *l = L + i * ldx, *lq = Lq + i * ldx;
    for (int64_t c = 0; c < K; ++c) {
      const float* y = YT + c * kBlock;
      const float l0 = l[c], l1 = l[ldx + c], l2 = l[2 * ldx + c], l3 = l[3 * ldx + c];
      const float q0 = lq[c], q1 = lq[ldx + c], q2 = lq[2 * ldx + c], q3 = lq[3 * ldx + c];
#pragma omp simd
      for (int64_t j = 0; j < kBlock; ++j) {
        a0[j] += l0 * y[j];
        a1[j] += l1 * y[j];
        a2[j] += l2 * y[j];
        a3[j] += l3 * y[j];
        m0[j] += q0 * y[j];
        m1[j] += q1 * y[j];
        m2[j] += q2 * y[j];
        m3[j] += q3 * y[j];
      }
    }
    for (int64_t j = 0; j < cols; ++j) {
      A[i * ldc + j] = a0[j], A[(i + 1) * ldc + j] = a1[j], A[(i + 2) * ldc + j] = a2[j], A[(i + 3) * ldc + j] = a3[j];
      M[i * ldc + j] = m0[j], M[(i + 1) * ldc + j] = m1[j], M[(i + 2) * ldc + j] = m2[j], M[(i + 3) * ldc + j] = m3[j];
    }
  }
  for (; i < rows; ++i) {
    float a[kBlock] = {}, m[kBlock] = {};
    for (int64_t c = 0; c < K; ++c) {
      const float* y = YT + c * kBlock;
      const float l0 = L[i * ldx + c], q0 = Lq[i * ldx + c];
#pragma omp simd
      for (int64_t j = 0; j < kBlock; ++j) {
        a[j] += l0 * y[j];
        m[j] += q0 * y[j];
      }
    }
    for (int64_t j = 0; j < cols; ++j) A[i * ldc + j] = a[j], M[i * ldc + j] = m[j];
  }
}

// Per-chunk quantities that do not need the state: the cumulative log-decay and the decayed q and k.
//   G [n, K] = cumsum(g), eG = e^G, Qt = q e^G, Kt = k e^G, Kh = k e^{G_last - G}.
struct ChunkDecays {
  std::vector<float> G, eG, Qt, Kt, Kh;
  ChunkDecays(int64_t C, int64_t K)
      : G(size_t(C * K)), eG(size_t(C * K)), Qt(size_t(C * K)), Kt(size_t(C * K)), Kh(size_t(C * K)) {}
  void compute(const HeadPtrs& p, int64_t t0, int64_t n, int64_t K) {
    for (int64_t i = 0; i < n; ++i) {
      const float* gi = p.g + (t0 + i) * p.ldk;
      float* Gi = G.data() + i * K;
      const float* Gp = i ? Gi - K : nullptr;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) Gi[c] = (Gp ? Gp[c] : 0.0f) + gi[c];
    }
    const float* Glast = G.data() + (n - 1) * K;
    for (int64_t i = 0; i < n; ++i) {
      const float* qi = p.q + (t0 + i) * p.ldk;
      const float* ki = p.k + (t0 + i) * p.ldk;
      const float* Gi = G.data() + i * K;
      float *e = eG.data() + i * K, *qt = Qt.data() + i * K, *kt = Kt.data() + i * K, *kh = Kh.data() + i * K;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        e[c] = fast_exp(Gi[c]);
        qt[c] = qi[c] * e[c];
        kt[c] = ki[c] * e[c];
        kh[c] = ki[c] * fast_exp(Glast[c] - Gi[c]);
      }
    }
  }
};

// The in-chunk decay products are formed per 16-token column block J = [b0, b1) anchored at a token r, so that
// every exponent stays bounded:
//   L_i = k_i e^{G_i - G_r}, Lq_i = q_i e^{G_i - G_r}  (rows)     R_j = k_j e^{G_r - G_j}  (columns of J)
//   A_ij = L_i . R_j,  M_ij = Lq_i . R_j.
// Rows below the block use r = b1 - 1 (both factors <= 1); the diagonal block uses its middle token, so each
// factor is within e^{+-8|lb|} (e^{+-40} at lb = -5), which also keeps the backward's products of gradients with
// these factors far from f32's subnormal range.
struct BlockFactors {
  int64_t Kp;                              // K rounded up to 16: the row stride; the padding stays zero
  std::vector<float> E, L, Lq, RT, Rr, F;  // E, L, Lq [C, Kp]; RT [Kp, 16]; Rr, F [16, Kp]
  BlockFactors(int64_t C, int64_t K)
      : Kp((K + kBlock - 1) / kBlock * kBlock),
        E(size_t(C * Kp)),
        L(size_t(C * Kp)),
        Lq(size_t(C * Kp)),
        RT(size_t(Kp * kBlock)),
        Rr(size_t(kBlock * Kp)),
        F(size_t(kBlock * Kp)) {}
  // Column factors of tokens [b0, b1) anchored at r: F_j = e^{G_r - G_j}, Rr_j = k_j F_j, and RT = Rr^T padded.
  void columns(const float* G, const HeadPtrs& p, int64_t t0, int64_t b0, int64_t b1, int64_t r, int64_t K) {
    const float* Gr = G + r * K;
    std::fill(RT.begin(), RT.end(), 0.0f);
    for (int64_t j = b0; j < b1; ++j) {
      const float* kj = p.k + (t0 + j) * p.ldk;
      const float* Gj = G + j * K;
      float *f = F.data() + (j - b0) * Kp, *rr = Rr.data() + (j - b0) * Kp;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        f[c] = fast_exp(Gr[c] - Gj[c]);
        rr[c] = kj[c] * f[c];
      }
      for (int64_t c = 0; c < K; ++c) RT[size_t(c * kBlock + (j - b0))] = rr[c];
    }
  }
  // Row factors of tokens [a0, a1) anchored at r: E_i = e^{G_i - G_r}, L_i = k_i E_i, Lq_i = q_i E_i (row i - a0).
  void rows(const float* G, const HeadPtrs& p, int64_t t0, int64_t a0, int64_t a1, int64_t r, int64_t K) {
    const float* Gr = G + r * K;
    for (int64_t i = a0; i < a1; ++i) {
      const float* ki = p.k + (t0 + i) * p.ldk;
      const float* qi = p.q + (t0 + i) * p.ldk;
      const float* Gi = G + i * K;
      float *e = E.data() + (i - a0) * Kp, *l = L.data() + (i - a0) * Kp, *lq = Lq.data() + (i - a0) * Kp;
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        e[c] = fast_exp(Gi[c] - Gr[c]);
        l[c] = ki[c] * e[c];
        lq[c] = qi[c] * e[c];
      }
    }
  }
};

// The backward of one block pair (dA, dM [rows, bw], row stride ldd) through A = L Rr^T and M = Lq Rr^T, in
// 16-wide tiles of the K axis with the accumulators in registers (dq, dk, dG: row stride Kp):
//   rows:    dL = dA Rr, dLq = dM Rr;  dq += dLq E, dk += dL E, dG += dL L + dLq Lq     (dq, dk, dG at row a0)
//   columns: dRr = dA^T L + dM^T Lq;   dk += dRr F, dG -= dRr Rr                        (dk, dG at row b0)
// G's anchor terms are left out: A and M depend on G only through G_i - G_j, so they cancel.
inline void block_row_grads(const float* __restrict dA, const float* __restrict dM, int64_t ldd, const BlockFactors& f,
                            int64_t rows, int64_t bw, float* __restrict dq, float* __restrict dk,
                            float* __restrict dG) {
  const int64_t Kp = f.Kp;
  auto finish = [&](int64_t i, int64_t c0, const float* dl, const float* dlq) {
    const float *e = f.E.data() + i * Kp + c0, *l = f.L.data() + i * Kp + c0, *lq = f.Lq.data() + i * Kp + c0;
    float *q = dq + i * Kp + c0, *k = dk + i * Kp + c0, *g = dG + i * Kp + c0;
#pragma omp simd
    for (int64_t c = 0; c < kBlock; ++c) {
      q[c] += dlq[c] * e[c];
      k[c] += dl[c] * e[c];
      g[c] += dl[c] * l[c] + dlq[c] * lq[c];
    }
  };
  for (int64_t c0 = 0; c0 < Kp; c0 += kBlock) {
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4) {
      float l0[kBlock] = {}, l1[kBlock] = {}, l2[kBlock] = {}, l3[kBlock] = {};
      float q0[kBlock] = {}, q1[kBlock] = {}, q2[kBlock] = {}, q3[kBlock] = {};
      const float *a = dA + i * ldd, *m = dM + i * ldd;
      for (int64_t j = 0; j < bw; ++j) {
        const float* y = f.Rr.data() + j * Kp + c0;
        const float a0 = a[j], a1 = a[ldd + j], a2 = a[2 * ldd + j], a3 = a[3 * ldd + j];
        const float m0 = m[j], m1 = m[ldd + j], m2 = m[2 * ldd + j], m3 = m[3 * ldd + j];
#pragma omp simd
        for (int64_t c = 0; c < kBlock; ++c) {
          l0[c] += a0 * y[c];
          l1[c] += a1 * y[c];
          l2[c] += a2 * y[c];
          l3[c] += a3 * y[c];
          q0[c] += m0 * y[c];
          q1[c] += m1 * y[c];
          q2[c] += m2 * y[c];
          q3[c] += m3 * y[c];
        }
      }
      finish(i, c0, l0, q0);
      finish(i + 1, c0, l1, q1);
      finish(i + 2, c0, l2, q2);
      finish(i + 3, c0, l3, q3);
    }
    for (; i < rows; ++i) {
      float l0[kBlock] = {}, q0[kBlock] = {};
      for (int64_t j = 0; j < bw; ++j) {
        const float* y = f.Rr.data() + j * Kp + c0;
        const float a0 = dA[i * ldd + j], m0 = dM[i * ldd + j];
#pragma omp simd
        for (int64_t c = 0; c < kBlock; ++c) {
          l0[c] += a0 * y[c];
          q0[c] += m0 * y[c];
        }
      }
      finish(i, c0, l0, q0);
    }
  }
}

inline void block_col_grads(const float* __restrict dA, const float* __restrict dM, int64_t ldd, const BlockFactors& f,
                            int64_t rows, int64_t bw, float* __restrict dk, float* __restrict dG) {
  const int64_t Kp = f.Kp;
  auto finish = [&](int64_t j, int64_t c0, const float* dr) {
    const float *fj = f.F.data() + j * Kp + c0, *rr = f.Rr.data() + j * Kp + c0;
    float *k = dk + j * Kp + c0, *g = dG + j * Kp + c0;
#pragma omp simd
    for (int64_t c = 0; c < kBlock; ++c) {
      k[c] += dr[c] * fj[c];
      g[c] -= dr[c] * rr[c];
    }
  };
  for (int64_t c0 = 0; c0 < Kp; c0 += kBlock) {
    int64_t j = 0;
    for (; j + 4 <= bw; j += 4) {
      float r0[kBlock] = {}, r1[kBlock] = {}, r2[kBlock] = {}, r3[kBlock] = {};
      for (int64_t i = 0; i < rows; ++i) {
        const float *l = f.L.data() + i * Kp + c0, *lq = f.Lq.data() + i * Kp + c0;
        const float *a = dA + i * ldd + j, *m = dM + i * ldd + j;
        const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], m0 = m[0], m1 = m[1], m2 = m[2], m3 = m[3];
#pragma omp simd
        for (int64_t c = 0; c < kBlock; ++c) {
          r0[c] += a0 * l[c] + m0 * lq[c];
          r1[c] += a1 * l[c] + m1 * lq[c];
          r2[c] += a2 * l[c] + m2 * lq[c];
          r3[c] += a3 * l[c] + m3 * lq[c];
        }
      }
      finish(j, c0, r0);
      finish(j + 1, c0, r1);
      finish(j + 2, c0, r2);
      finish(j + 3, c0, r3);
    }
    for (; j < bw; ++j) {
      float r0[kBlock] = {};
      for (int64_t i = 0; i < rows; ++i) {
        const float *l = f.L.data() + i * Kp + c0, *lq = f.Lq.data() + i * Kp + c0;
        const float a0 = dA[i * ldd + j], m0 = dM[i * ldd + j];
#pragma omp simd
        for (int64_t c = 0; c < kBlock; ++c) r0[c] += a0 * l[c] + m0 * lq[c];
      }
      finish(j, c0, r0);
    }
  }
}

// Forward substitution over rows of W (row stride V): W_i = beta_i (W_i - sum_{j<i} A_ij W_j), keeping the
// bracket in R (if not null). 16 columns at a time in a register when V allows, so no row is stored and reloaded
// per term.
void forward_substitution(float* __restrict W, float* __restrict R, const float* __restrict A, int64_t lda,
                          const float* beta, int64_t ldb, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i) {
    float* Wi = W + i * V;
    const float* a = A + i * lda;
    if (V % kBlock == 0) {
      for (int64_t e0 = 0; e0 < V; e0 += kBlock) {
        float acc[kBlock];
        for (int64_t e = 0; e < kBlock; ++e) acc[e] = Wi[e0 + e];
        for (int64_t j = 0; j < i; ++j) {
          const float aij = a[j];
          const float* Wj = W + j * V + e0;
#pragma omp simd
          for (int64_t e = 0; e < kBlock; ++e) acc[e] -= aij * Wj[e];
        }
        for (int64_t e = 0; e < kBlock; ++e) Wi[e0 + e] = acc[e];
      }
    } else {
      for (int64_t j = 0; j < i; ++j)
        for (int64_t e = 0; e < V; ++e) Wi[e] -= a[j] * W[j * V + e];
    }
    if (R) std::memcpy(R + i * V, Wi, size_t(V) * sizeof(float));
    const float bi = beta[i * ldb];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) Wi[e] *= bi;
  }
}

// Largest exponent a diagonal block's anchored factors may carry (e^40 ~ 2.4e17: products with k, q and the
// backward's gradients stay far from f32's overflow and subnormal ranges).
constexpr float kAnchorExponentLimit = 40.0f;

// Whether the diagonal block [b0, b1) anchored at r keeps its factors e^{G_i - G_r}, e^{G_r - G_j} within
// e^kAnchorExponentLimit (G decreases along the chunk, so the extremes are the block's ends).
bool anchored_block_safe(const float* G, int64_t b0, int64_t b1, int64_t r, int64_t K) {
  const float *G0 = G + b0 * K, *Gr = G + r * K, *G1 = G + (b1 - 1) * K;
  float worst = 0.0f;
  for (int64_t c = 0; c < K; ++c) worst = std::max(worst, std::max(G0[c] - Gr[c], Gr[c] - G1[c]));
  return worst <= kAnchorExponentLimit;
}

// The diagonal block [b0, b1) pair by pair: A_ij = sum_c k_ic k_jc e^{G_ic - G_jc} (j < i), M_ij = the same with
// q_i (j <= i); row stride ldc, element (i, j) at [(i - b0) ldc + (j - b0)].
void pairwise_block(float* A, float* M, int64_t ldc, const float* G, const HeadPtrs& p, int64_t t0, int64_t b0,
                    int64_t b1, int64_t K) {
  for (int64_t i = b0; i < b1; ++i) {
    const float *qi = p.q + (t0 + i) * p.ldk, *ki = p.k + (t0 + i) * p.ldk, *Gi = G + i * K;
    for (int64_t j = b0; j <= i; ++j) {
      const float *kj = p.k + (t0 + j) * p.ldk, *Gj = G + j * K;
      float a = 0.0f, m = 0.0f;
#pragma omp simd reduction(+ : a, m)
      for (int64_t c = 0; c < K; ++c) {
        const float e = kj[c] * fast_exp(Gi[c] - Gj[c]);
        a += ki[c] * e;
        m += qi[c] * e;
      }
      A[(i - b0) * ldc + (j - b0)] = j < i ? a : 0.0f;
      M[(i - b0) * ldc + (j - b0)] = m;
    }
  }
}

// The backward of pairwise_block: with e_c = e^{G_ic - G_jc} and t_c = (dA_ij k_ic + dM_ij q_ic) k_jc e_c,
//   dq_i += dM_ij k_j e,  dk_i += dA_ij k_j e,  dk_j += (dA_ij k_i + dM_ij q_i) e,  dG_i += t,  dG_j -= t.
// dq, dk, dG have row stride ldg and start at row b0.
void pairwise_block_grads(const float* dA, const float* dM, int64_t ldd, const float* G, const HeadPtrs& p, int64_t t0,
                          int64_t b0, int64_t b1, int64_t K, float* dq, float* dk, float* dG, int64_t ldg) {
  for (int64_t i = b0; i < b1; ++i) {
    const float *qi = p.q + (t0 + i) * p.ldk, *ki = p.k + (t0 + i) * p.ldk, *Gi = G + i * K;
    float *dqi = dq + (i - b0) * ldg, *dki = dk + (i - b0) * ldg, *dGi = dG + (i - b0) * ldg;
    for (int64_t j = b0; j <= i; ++j) {
      const float a = j < i ? dA[(i - b0) * ldd + (j - b0)] : 0.0f, m = dM[(i - b0) * ldd + (j - b0)];
      const float *kj = p.k + (t0 + j) * p.ldk, *Gj = G + j * K;
      float *dkj = dk + (j - b0) * ldg, *dGj = dG + (j - b0) * ldg;
      for (int64_t c = 0; c < K; ++c) {
        const float e = fast_exp(Gi[c] - Gj[c]);
        const float kje = kj[c] * e, w = (a * ki[c] + m * qi[c]) * e;
        dqi[c] += m * kje;
        dki[c] += a * kje;
        dkj[c] += w;
        const float t = w * kj[c];
        dGi[c] += t;
        dGj[c] -= t;
      }
    }
  }
}

// Calls fn(b0, b1, a0, a1, r) for each column block [b0, b1) and row range [a0, a1) with its anchor r: the
// diagonal block, then (if any) all rows below it.
template <class F>
void for_each_block(int64_t n, F&& fn) {
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = std::min(n, b0 + kBlock);
    fn(b0, b1, b0, b1, b0 + (b1 - b0 - 1) / 2);
    if (b1 < n) fn(b0, b1, b1, n, b1 - 1);
  }
}

// What one chunk's backward needs from its forward: the start state S0 [K, V], A and M [C, C] (row stride C),
// W = solve(...) and R = W / beta (before the beta scaling) [C, V].
struct ChunkSaved {
  float *S0, *A, *M, *W, *R;
};

// Scratch for one head's chunk computation.
struct ChunkScratch {
  int64_t C;  // the chunk size: row stride of A and M
  ChunkDecays d;
  BlockFactors f;
  std::vector<float> A, M, W;
  ChunkScratch(int64_t chunk, int64_t K, int64_t V)
      : C(chunk), d(chunk, K), f(chunk, K), A(size_t(C * C)), M(size_t(C * C)), W(size_t(C * V)) {}
};

// One chunk of n tokens starting at row t0 of head p: reads state S [K, V] (the chunk's start state), writes
// o rows (if o) and replaces S by the chunk's end state. With save, also keeps what the backward needs.
void chunk_step(float* S, float* o, int64_t ldo, const HeadPtrs& p, int64_t t0, int64_t n, int64_t K, int64_t V,
                ChunkScratch& w, const ChunkSaved* save = nullptr) {
  const int64_t C = w.C;
  w.d.compute(p, t0, n, K);
  const float* G = w.d.G.data();
  const float* Glast = G + (n - 1) * K;
  if (save) std::memcpy(save->S0, S, size_t(K * V) * sizeof(float));
  // A (strictly lower) and M (lower with diagonal), row stride C.
  float* A = save ? save->A : w.A.data();
  float* M = save ? save->M : w.M.data();
  std::fill(A, A + n * C, 0.0f);
  std::fill(M, M + n * C, 0.0f);
  for_each_block(n, [&](int64_t b0, int64_t b1, int64_t a0, int64_t a1, int64_t r) {
    if (a0 == b0 && !anchored_block_safe(G, b0, b1, r, K))
      return pairwise_block(A + a0 * C + b0, M + a0 * C + b0, C, G, p, t0, b0, b1, K);
    w.f.columns(G, p, t0, b0, b1, r, K);
    w.f.rows(G, p, t0, a0, a1, r, K);
    block_products(A + a0 * C + b0, M + a0 * C + b0, C, w.f.L.data(), w.f.Lq.data(), w.f.Kp, w.f.RT.data(), a1 - a0,
                   b1 - b0, K);
    if (a0 == b0)  // diagonal block: keep j < i in A, j <= i in M
      for (int64_t i = a0; i < a1; ++i)
        for (int64_t j = i; j < b1; ++j) {
          A[i * C + j] = 0.0f;
          if (j > i) M[i * C + j] = 0.0f;
        }
  });
  // W = V - Kt S0, then forward substitution w_i = beta_i (W_i - sum_{j<i} A_ij w_j); R_i is the bracket.
  float* W = save ? save->W : w.W.data();
  for (int64_t i = 0; i < n; ++i) std::memcpy(W + i * V, p.v + (t0 + i) * p.ldv, size_t(V) * sizeof(float));
  gemm(false, false, n, V, K, -1.0f, w.d.Kt.data(), K, S, V, 1.0f, W, V);
  forward_substitution(W, save ? save->R : nullptr, A, C, p.beta + t0 * p.ldb, p.ldb, n, V);
  // O = Qt S0 + M W
  if (o) {
    gemm(false, false, n, V, K, 1.0f, w.d.Qt.data(), K, S, V, 0.0f, o + t0 * ldo, ldo);
    gemm(false, false, n, V, n, 1.0f, M, C, W, V, 1.0f, o + t0 * ldo, ldo);
  }
  // S = Diag(e^{G_last}) S0 + Kh^T W
  for (int64_t c = 0; c < K; ++c) {
    const float a = fast_exp(Glast[c]);
    float* Sc = S + c * V;
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) Sc[e] *= a;
  }
  gemm(true, false, K, V, n, 1.0f, w.d.Kh.data(), K, W, V, 1.0f, S, V);
}

// Gradient rows of one head: [T] rows with strides ldk (dq, dk, dg), ldv (dv, dout) and ldb (dbeta).
struct HeadGrads {
  float *dq, *dk, *dv, *dg, *db;
  const float* dout;
};

// Scratch for one chunk's backward.
struct BackScratch {
  ChunkDecays d;
  BlockFactors f;
  std::vector<float> dW, dA, dM, dQt, dKt, dKh, dQl, dKl, dGl, dGlast;  // dQl, dKl, dGl: row stride f.Kp
  BackScratch(int64_t C, int64_t K, int64_t V)
      : d(C, K),
        f(C, K),
        dW(size_t(C * V)),
        dA(size_t(C * C)),
        dM(size_t(C * C)),
        dQt(size_t(C * K)),
        dKt(size_t(C * K)),
        dKh(size_t(C * K)),
        dQl(size_t(C * f.Kp)),
        dKl(size_t(C * f.Kp)),
        dGl(size_t(C * f.Kp)),
        dGlast(size_t(K)) {}
};

// Backward through one chunk (the forward's formulas above, in reverse). dS holds the gradient of the chunk's
// end state on entry and of its start state on return; the token gradients accumulate into g.
void chunk_backward(float* dS, const ChunkSaved& sv, const HeadPtrs& p, const HeadGrads& g, int64_t t0, int64_t n,
                    int64_t C, int64_t K, int64_t V, BackScratch& w) {
  w.d.compute(p, t0, n, K);
  const float* G = w.d.G.data();
  const float* Glast = G + (n - 1) * K;
  const float* dO = g.dout + t0 * p.ldv;
  float *dW = w.dW.data(), *dA = w.dA.data(), *dM = w.dM.data();
  // dW = M^T dO + Kh dS_end; dM = dO W^T on the lower triangle; dQt = dO S0^T; dKh = W dS_end^T.
  gemm(true, false, n, V, n, 1.0f, sv.M, C, dO, p.ldv, 0.0f, dW, V);
  gemm(false, false, n, V, K, 1.0f, w.d.Kh.data(), K, dS, V, 1.0f, dW, V);
  gemm(false, true, n, n, V, 1.0f, dO, p.ldv, sv.W, V, 0.0f, dM, C);
  gemm(false, true, n, K, V, 1.0f, dO, p.ldv, sv.S0, V, 0.0f, w.dQt.data(), K);
  gemm(false, true, n, K, V, 1.0f, sv.W, V, dS, V, 0.0f, w.dKh.data(), K);
  // The decay of S0 into S_end: d/dG_last = e^{G_last} sum_e S0 dS_end.
  float* dGlast = w.dGlast.data();
  for (int64_t c = 0; c < K; ++c) {
    const float* s0 = sv.S0 + c * V;
    const float* ds = dS + c * V;
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t e = 0; e < V; ++e) acc += s0[e] * ds[e];
    dGlast[c] = fast_exp(Glast[c]) * acc;
  }
  // Back substitution through w_i = beta_i (u_i - sum_{j<i} A_ij w_j): dR_i = beta_i (dW_i - sum_{i'>i} A_i'i dR_i'),
  // dbeta_i = (dW_i - ...) . R_i. dW becomes dR in place.
  for (int64_t i = n - 1; i >= 0; --i) {
    float* di = dW + i * V;
    const float* Ri = sv.R + i * V;
    float db = 0.0f;
#pragma omp simd reduction(+ : db)
    for (int64_t e = 0; e < V; ++e) db += di[e] * Ri[e];
    g.db[(t0 + i) * p.ldb] += db;
    const float bi = p.beta[(t0 + i) * p.ldb];
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) di[e] *= bi;
    for (int64_t j = 0; j < i; ++j) {
      const float aij = sv.A[i * C + j];
      float* dj = dW + j * V;
#pragma omp simd
      for (int64_t e = 0; e < V; ++e) dj[e] -= aij * di[e];
    }
  }
  const float* dR = dW;
  // dA = -dR W^T (strictly lower); dKt = -dR S0^T; dv += dR.
  gemm(false, true, n, n, V, -1.0f, dR, V, sv.W, V, 0.0f, dA, C);
  gemm(false, true, n, K, V, -1.0f, dR, V, sv.S0, V, 0.0f, w.dKt.data(), K);
  for (int64_t i = 0; i < n; ++i) {
    float* dv = g.dv + (t0 + i) * p.ldv;
    const float* dr = dR + i * V;
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) dv[e] += dr[e];
    for (int64_t j = i; j < n; ++j) {
      dA[i * C + j] = 0.0f;
      if (j > i) dM[i * C + j] = 0.0f;
    }
  }
  // dS_start = Diag(e^{G_last}) dS_end + Qt^T dO - Kt^T dR
  for (int64_t c = 0; c < K; ++c) {
    const float a = fast_exp(Glast[c]);
    float* ds = dS + c * V;
#pragma omp simd
    for (int64_t e = 0; e < V; ++e) ds[e] *= a;
  }
  gemm(true, false, K, V, n, 1.0f, w.d.Qt.data(), K, dO, p.ldv, 1.0f, dS, V);
  gemm(true, false, K, V, n, -1.0f, w.d.Kt.data(), K, dR, V, 1.0f, dS, V);
  // Through Qt = q e^G, Kt = k e^G, Kh = k e^{G_last - G}: local dq, dk, dG.
  const int64_t Kp = w.f.Kp;  // row stride of the local dq, dk, dG
  float *dQl = w.dQl.data(), *dKl = w.dKl.data(), *dGl = w.dGl.data();
  for (int64_t i = 0; i < n; ++i) {
    const float *e = w.d.eG.data() + i * K, *Gi = G + i * K;
    const float *qt = w.d.Qt.data() + i * K, *kt = w.d.Kt.data() + i * K, *kh = w.d.Kh.data() + i * K;
    const float *dqt = w.dQt.data() + i * K, *dkt = w.dKt.data() + i * K, *dkh = w.dKh.data() + i * K;
    float *dq = dQl + i * Kp, *dk = dKl + i * Kp, *dG = dGl + i * Kp;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      dq[c] = dqt[c] * e[c];
      dk[c] = dkt[c] * e[c] + dkh[c] * fast_exp(Glast[c] - Gi[c]);
      dG[c] = dqt[c] * qt[c] + dkt[c] * kt[c] - dkh[c] * kh[c];
      dGlast[c] += dkh[c] * kh[c];
    }
  }
  // Through A_ij = L_i . R_j and M_ij = Lq_i . R_j, block by block with the forward's anchors. G enters only as
  // G_i - G_j, so the anchor's own terms cancel and are left out.
  for_each_block(n, [&](int64_t b0, int64_t b1, int64_t a0, int64_t a1, int64_t r) {
    if (a0 == b0 && !anchored_block_safe(G, b0, b1, r, K))
      return pairwise_block_grads(dA + a0 * C + b0, dM + a0 * C + b0, C, G, p, t0, b0, b1, K, dQl + b0 * Kp,
                                  dKl + b0 * Kp, dGl + b0 * Kp, Kp);
    w.f.columns(G, p, t0, b0, b1, r, K);
    w.f.rows(G, p, t0, a0, a1, r, K);
    block_row_grads(dA + a0 * C + b0, dM + a0 * C + b0, C, w.f, a1 - a0, b1 - b0, dQl + a0 * Kp, dKl + a0 * Kp,
                    dGl + a0 * Kp);
    block_col_grads(dA + a0 * C + b0, dM + a0 * C + b0, C, w.f, a1 - a0, b1 - b0, dKl + b0 * Kp, dGl + b0 * Kp);
  });
  // G = cumsum(g): dg_t = sum_{i >= t} dG_i (dG_last included); then everything into the head's rows.
  float* acc = dGlast;
  for (int64_t i = n - 1; i >= 0; --i) {
    const float *dq = dQl + i * Kp, *dk = dKl + i * Kp, *dG = dGl + i * Kp;
    float *gq = g.dq + (t0 + i) * p.ldk, *gk = g.dk + (t0 + i) * p.ldk, *gg = g.dg + (t0 + i) * p.ldk;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      acc[c] += dG[c];
      gq[c] += dq[c];
      gk[c] += dk[c];
      gg[c] += acc[c];
    }
  }
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

namespace {

// torch.nn.functional.softplus (beta 1, threshold 20): z itself above 20, where log1p(e^z) rounds to z in f32.
inline float softplus(float z) {
  return z > 20.0f ? z : std::log1p(std::exp(z));
}

}  // namespace

void kda_gate_forward(float* g, const float* f, const float* A_log, const float* dt_bias, int64_t T, int64_t H,
                      int64_t K, float lower_bound) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(A_log[h]);
      for (int64_t c = 0; c < K; ++c) {
        const int64_t i = (t * H + h) * K + c;
        const float z = f[i] + dt_bias[h * K + c];
        g[i] = std::isinf(lower_bound) ? -a * softplus(z) : lower_bound / (1.0f + std::exp(-a * z));
      }
    }
}

void kda_gate_backward(float* df, float* dA_log, float* ddt_bias, const float* dg, const float* f, const float* A_log,
                       const float* dt_bias, int64_t T, int64_t H, int64_t K, float lower_bound) {
  const bool unbounded = std::isinf(lower_bound);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float a = std::exp(A_log[h]);
      float da_sum = 0.0f;
      for (int64_t c = 0; c < K; ++c) {
        const int64_t i = (t * H + h) * K + c;
        const float z = f[i] + dt_bias[h * K + c];
        float dz, da;  // d loss / dz and d loss / dA_log of this element
        if (unbounded) {
          dz = -dg[i] * a / (1.0f + std::exp(-z));
          da = -dg[i] * a * softplus(z);
        } else {
          const float s = 1.0f / (1.0f + std::exp(-a * z));
          dz = dg[i] * lower_bound * s * (1.0f - s) * a;
          da = dz * z;
        }
        if (df) df[i] += dz;
        if (ddt_bias) ddt_bias[h * K + c] += dz;
        da_sum += da;
      }
      if (dA_log) dA_log[h] += da_sum;
    }
}

void kda_recurrent_forward(float* o, float* S_out, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const float* S0, KdaShape s) {
  check_shape(s);
  for_each_head(s, [&](int64_t b, int64_t h) {
    // The state is updated in S_out's slice of this head when there is one (in place when S_out == S0: decode
    // then neither allocates nor copies the state), else in a per-thread scratch.
    const size_t kv = size_t(s.K * s.V);
    thread_local std::vector<float> scratch, u;
    if (u.size() < size_t(std::max(s.K, s.V))) u.resize(size_t(std::max(s.K, s.V)));
    float* S = nullptr;
    if (S_out) {
      S = S_out + (b * s.H + h) * s.K * s.V;
      if (S0 != S_out) load_state(S, S0, s, b, h);
    } else {
      if (scratch.size() < kv) scratch.resize(kv);
      S = scratch.data();
      load_state(S, S0, s, b, h);
    }
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    float* oh = o + (b * s.T * s.H + h) * s.V;
    for (int64_t t = 0; t < s.T; ++t)
      recurrent_step(S, u.data(), oh + t * p.ldv, p.q + t * p.ldk, p.k + t * p.ldk, p.v + t * p.ldv, p.g + t * p.ldk,
                     p.beta[t * p.ldb], s.K, s.V);
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
  const int64_t K = s.K, V = s.V, KV = K * V, C = s.chunk;
  const int64_t n_chunks = (s.T + C - 1) / C;
  const int64_t n_segments = (n_chunks + kSegmentChunks - 1) / kSegmentChunks;
  for_each_head(s, [&](int64_t b, int64_t h) {
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    const int64_t row0 = b * s.T * s.H + h;
    const HeadGrads hg{dq + row0 * K, dk + row0 * K, dv + row0 * V, dg + row0 * K, dbeta + row0, dout + row0 * V};
    ChunkScratch fw(C, K, V);
    // Segment-start states ([n_segments, K, V]); one segment needs no pass of its own.
    std::vector<float> seg_starts(static_cast<size_t>(std::max<int64_t>(n_segments, 1) * KV)),
        S(static_cast<size_t>(KV));
    load_state(S.data(), S0, s, b, h);
    std::memcpy(seg_starts.data(), S.data(), size_t(KV) * sizeof(float));
    for (int64_t c = 0; c < (n_segments - 1) * kSegmentChunks; ++c) {
      chunk_step(S.data(), nullptr, 0, p, c * C, std::min(C, s.T - c * C), K, V, fw);
      if ((c + 1) % kSegmentChunks == 0)
        std::memcpy(seg_starts.data() + (c + 1) / kSegmentChunks * KV, S.data(), size_t(KV) * sizeof(float));
    }
    // Per segment, in reverse: the forward again keeping each chunk's saved quantities, then the chunks backward.
    const int64_t per_chunk = KV + 2 * C * C + 2 * C * V;
    std::vector<float> saved(size_t(std::min(n_chunks, kSegmentChunks) * per_chunk));
    auto slot = [&](int64_t i) {
      float* base = saved.data() + i * per_chunk;
      return ChunkSaved{base, base + KV, base + KV + C * C, base + KV + 2 * C * C, base + KV + 2 * C * C + C * V};
    };
    std::vector<float> dS(size_t(KV), 0.0f);
    if (dS_out) std::memcpy(dS.data(), dS_out + (b * s.H + h) * KV, size_t(KV) * sizeof(float));
    BackScratch bw(C, K, V);
    for (int64_t seg = n_segments - 1; seg >= 0; --seg) {
      const int64_t c0 = seg * kSegmentChunks, c1 = std::min(n_chunks, c0 + kSegmentChunks);
      std::memcpy(S.data(), seg_starts.data() + seg * KV, size_t(KV) * sizeof(float));
      for (int64_t c = c0; c < c1; ++c) {
        const ChunkSaved sv = slot(c - c0);
        chunk_step(S.data(), nullptr, 0, p, c * C, std::min(C, s.T - c * C), K, V, fw, &sv);
      }
      for (int64_t c = c1 - 1; c >= c0; --c)
        chunk_backward(dS.data(), slot(c - c0), p, hg, c * C, std::min(C, s.T - c * C), C, K, V, bw);
    }
    if (dS0) {
      float* d = dS0 + (b * s.H + h) * KV;
      for (int64_t i = 0; i < KV; ++i) d[i] += dS[size_t(i)];
    }
  });
}

void kda_recurrent_backward(float* dq, float* dk, float* dv, float* dg, float* dbeta, float* dS0, const float* dout,
                            const float* dS_out, const float* q, const float* k, const float* v, const float* g,
                            const float* beta, const float* S0, KdaShape s) {
  check_shape(s);
  const int64_t K = s.K, V = s.V, KV = K * V;
  const int64_t n_chunks = (s.T + s.chunk - 1) / s.chunk;
  for_each_head(s, [&](int64_t b, int64_t h) {
    const HeadPtrs p = head_ptrs(q, k, v, g, beta, s, b, h);
    // Chunk-start states from the recurrence: [n_chunks, K, V].
    std::vector<float> starts(static_cast<size_t>(std::max<int64_t>(n_chunks, 1) * KV));
    {
      std::vector<float> S(static_cast<size_t>(KV)), u(static_cast<size_t>(std::max(K, V)));
      load_state(S.data(), S0, s, b, h);
      for (int64_t t = 0; t < s.T; ++t) {
        if (t % s.chunk == 0) std::memcpy(starts.data() + t / s.chunk * KV, S.data(), size_t(KV) * sizeof(float));
        recurrent_step(S.data(), u.data(), nullptr, p.q + t * p.ldk, p.k + t * p.ldk, p.v + t * p.ldv, p.g + t * p.ldk,
                       p.beta[t * p.ldb], K, V);
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
