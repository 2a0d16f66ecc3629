// Attention on the CPU, tiled over queries: for a tile of Bq query rows, the scores against every key the
// tile may see ([Bq, i1] causal, [Bq, T] not) are one sgemm, softmaxed exactly (causal mask on the diagonal block),
// and multiplied into V by a second sgemm. Working memory is one [Bq, T] score block per thread: O(T x tile),
// never O(T^2). The backward recomputes the scores from the saved log-sum-exp (FlashAttention's recipe)
// and needs only dO.O row sums besides.
// Threads: forward tasks are (batch, head, tile); backward tasks are (batch, kv head), each owning its dK,
// dV rows (so grouped-query heads never race). Inside a task sgemm runs single-threaded; when there are
// fewer tasks than threads, tasks run one after another with a threaded sgemm instead.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/fast_math.h"
#include "ops/serial_blas.h"

namespace myriad::cpu {

namespace {

constexpr int64_t kTile = 64;  // query rows per tile

struct HeadView {
  const float* q;
  const float* k;
  const float* v;
  int64_t ldq, ldk, ldv, ldo;
};

HeadView head_view(const float* q, const float* k, const float* v, const AttentionShape& s, int64_t b, int64_t h) {
  const int64_t hk = h / (s.H / s.Hk);
  return {q + (b * s.T * s.H + h) * s.Dk,
          k + (b * s.T * s.Hk + hk) * s.Dk,
          v + (b * s.T * s.Hk + hk) * s.Dv,
          s.H * s.Dk,
          s.Hk * s.Dk,
          s.Hk * s.Dv,
          s.H * s.Dv};
}

// Keys [0, end) a tile of queries starting at i0 multiplies against.
int64_t keys_end(const AttentionShape& s, int64_t i0, int64_t rows) {
  return s.causal ? i0 + rows : s.T;
}

// P[r, j] = exp(scale * q_i.k_j - lse_i) for visible j (j <= i when causal, all T keys when not), 0 beyond
// the diagonal. S holds the raw products in and the probabilities out. When lse_out is set, the row's
// log-sum-exp is computed and stored; else lse_in is used.
// Block-sparse attention run on these tiles (SparseAttentionShape): which keys each query of sequence b reads.
struct BlockMask {
  const SparseAttentionShape* sp = nullptr;
  const int32_t* blocks = nullptr;  // [B, T, top_k]
  int64_t b = 0;
};

void scores_to_probs(float* S, int64_t ldS, int64_t i0, int64_t rows, bool causal, const float* lse_in, float* lse_out,
                     const BlockMask& mask = {}) {
  thread_local std::vector<KeyRange> ranges;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, n = causal ? i + 1 : ldS;  // visible keys
    float* sr = S + r * ldS;
    int64_t nr = 0;
    // The keys outside a sparse query's ranges: -inf before the softmax (out of its max and, at e^-87 ~ 1e-38 from
    // fast_exp's clamp, of its sum), exactly 0 after it.
    auto for_each_gap = [&](auto&& f) {
      for (int64_t x = 0, j = 0; x < nr; j = ranges[size_t(x)].end, ++x) f(j, ranges[size_t(x)].begin);
    };
    if (mask.sp) {
      const SparseAttentionShape& sp = *mask.sp;
      ranges.resize(size_t(sp.top_k + 1));
      nr = sparse_key_ranges(sp.block, sp.local_blocks, sp.top_k, mask.blocks + (mask.b * sp.attn.T + i) * sp.top_k, i,
                             ranges.data());
      for_each_gap([&](int64_t a, int64_t e) { std::fill(sr + a, sr + e, -std::numeric_limits<float>::infinity()); });
    }
    float l;
    if (lse_out) {
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, sr[j]);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < n; ++j) sum += fast_exp(sr[j] - mx);
      l = mx + std::log(sum);
      lse_out[r] = l;
    } else {
      l = lse_in[r];
    }
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) sr[j] = fast_exp(sr[j] - l);
    for_each_gap([&](int64_t a, int64_t e) { std::fill(sr + a, sr + e, 0.0f); });
    const int64_t width = std::min<int64_t>(i0 + rows, ldS);
    for (int64_t j = n; j < width; ++j) sr[j] = 0.0f;
  }
}

void forward_tile(float* out, float* lse, const HeadView& hv, const AttentionShape& s, int64_t i0, float* S,
                  const BlockMask& mask) {
  const int64_t rows = std::min(kTile, s.T - i0), kend = keys_end(s, i0, rows), ldS = s.T;
  gemm(false, true, rows, kend, s.Dk, s.scale, hv.q + i0 * hv.ldq, hv.ldq, hv.k, hv.ldk, 0.0f, S, ldS);
  scores_to_probs(S, ldS, i0, rows, s.causal, nullptr, lse + i0, mask);
  gemm(false, false, rows, s.Dv, kend, 1.0f, S, ldS, hv.v, hv.ldv, 0.0f, out + i0 * hv.ldo, hv.ldo);
}

void tiled_forward(float* out, float* lse, const float* q, const float* k, const float* v, AttentionShape s,
                   const SparseAttentionShape* sp, const int32_t* blocks) {
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const int64_t tiles = (s.T + kTile - 1) / kTile;
  const int64_t tasks = s.B * s.H * tiles;
  auto run = [&](int64_t task, float* S) {
    // Largest tiles first (the last tile sees every key) for better dynamic balance.
    const int64_t tile = tiles - 1 - task % tiles, bh = task / tiles, b = bh / s.H, h = bh % s.H;
    const HeadView hv = head_view(q, k, v, s, b, h);
    forward_tile(out + (b * s.T * s.H + h) * s.Dv, lse + (b * s.H + h) * s.T, hv, s, tile * kTile, S,
                 BlockMask{sp, blocks, b});
  };
  const int nt = num_threads();
  if (tasks < nt * 2 || nt == 1) {
    std::vector<float> S(size_t(kTile * s.T));
    for (int64_t t = 0; t < tasks; ++t) run(t, S.data());
    return;
  }
  ops::ScopedSerialBlas single;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> S(size_t(kTile * s.T));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) run(t, S.data());
  }
}

void tiled_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                    const float* q, const float* k, const float* v, AttentionShape s, const SparseAttentionShape* sp,
                    const int32_t* blocks) {
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  const int64_t group = s.H / s.Hk, tiles = (s.T + kTile - 1) / kTile, ldS = s.T;
  auto run = [&](int64_t task, float* P, float* dS, float* delta) {
    const int64_t b = task / s.Hk, hk = task % s.Hk;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const HeadView hv = head_view(q, k, v, s, b, h);
      const int64_t qo = (b * s.T * s.H + h) * s.Dk, oo = (b * s.T * s.H + h) * s.Dv;
      float* dkh = dk + (b * s.T * s.Hk + hk) * s.Dk;
      float* dvh = dv + (b * s.T * s.Hk + hk) * s.Dv;
      const float* lse_h = lse + (b * s.H + h) * s.T;
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t i0 = tile * kTile, rows = std::min(kTile, s.T - i0), kend = keys_end(s, i0, rows);
        const float* q_t = q + qo + i0 * hv.ldq;
        const float* do_t = dout + oo + i0 * hv.ldo;
        const float* o_t = out + oo + i0 * hv.ldo;
        gemm(false, true, rows, kend, s.Dk, s.scale, q_t, hv.ldq, hv.k, hv.ldk, 0.0f, P, ldS);
        scores_to_probs(P, ldS, i0, rows, s.causal, lse_h + i0, nullptr, BlockMask{sp, blocks, b});
        gemm(false, true, rows, kend, s.Dv, 1.0f, do_t, hv.ldo, hv.v, hv.ldv, 0.0f, dS, ldS);
        for (int64_t r = 0; r < rows; ++r) {
          float d = 0.0f;
#pragma omp simd reduction(+ : d)
          for (int64_t e = 0; e < s.Dv; ++e) d += do_t[r * hv.ldo + e] * o_t[r * hv.ldo + e];
          delta[r] = d;
        }
        for (int64_t r = 0; r < rows; ++r) {
          float* dsr = dS + r * ldS;
          const float* pr = P + r * ldS;
          const float dr = delta[r];
#pragma omp simd
          for (int64_t j = 0; j < kend; ++j) dsr[j] = pr[j] * (dsr[j] - dr) * s.scale;
        }
        gemm(true, false, kend, s.Dv, rows, 1.0f, P, ldS, do_t, hv.ldo, 1.0f, dvh, hv.ldv);
        gemm(false, false, rows, s.Dk, kend, 1.0f, dS, ldS, hv.k, hv.ldk, 1.0f, dq + qo + i0 * hv.ldq, hv.ldq);
        gemm(true, false, kend, s.Dk, rows, 1.0f, dS, ldS, q_t, hv.ldq, 1.0f, dkh, hv.ldk);
      }
    }
  };
  const int64_t tasks = s.B * s.Hk;
  const int nt = num_threads();
  const double flops = 5.0 * double(s.B * s.H) * double(s.T) * double(s.T) * double(s.Dk + s.Dv);
  if (tasks < nt || nt == 1 || flops < 1e7) {
    std::vector<float> P(size_t(kTile * s.T)), dS(size_t(kTile * s.T)), delta(static_cast<size_t>(kTile));
    for (int64_t t = 0; t < tasks; ++t) run(t, P.data(), dS.data(), delta.data());
    return;
  }
  ops::ScopedSerialBlas single;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> P(size_t(kTile * s.T)), dS(size_t(kTile * s.T)), delta(static_cast<size_t>(kTile));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) run(t, P.data(), dS.data(), delta.data());
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, AttentionShape s) {
  tiled_forward(out, lse, q, k, v, s, nullptr, nullptr);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, AttentionShape s) {
  tiled_backward(dq, dk, dv, dout, out, lse, q, k, v, s, nullptr, nullptr);
}

void masked_sparse_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                     const int32_t* blocks, SparseAttentionShape sp) {
  tiled_forward(out, lse, q, k, v, sp.attn, &sp, blocks);
}

void masked_sparse_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                      const float* lse, const float* q, const float* k, const float* v,
                                      const int32_t* blocks, SparseAttentionShape sp) {
  tiled_backward(dq, dk, dv, dout, out, lse, q, k, v, sp.attn, &sp, blocks);
}

}  // namespace myriad::cpu
