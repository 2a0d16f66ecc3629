// Block-sparse causal attention on the CPU (ops/kernels.h SparseAttentionShape), two ways:
//   - gathered: a query reads a few hundred to a few thousand keys in at most top_k + 1 contiguous ranges, so each
//     (sequence, head, query) runs plain dot products over its ranges: scores, an exact softmax, the value sum.
//     Work grows as T x (keys a query reads).
//   - masked tiles (attention.cc): dense attention's sgemm tiles with the unread keys masked out. Work grows as
//     T^2 / 2, but sgemm runs many times faster per key than the dot products.
// The masked tiles run while ops/kernels.h prefer_masked_sparse says so (dense keys within a factor of the sparse
// ones); longer sequences gather. Both give the same numbers up to f32 association (both are checked by the op case).
// The backward recomputes the probabilities from the saved log-sum-exp; its tasks are (sequence, kv head), each owning
// its dK, dV rows (no races).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/threads.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/fast_math.h"

namespace myriad::cpu {

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float d = 0.0f;
#pragma omp simd reduction(+ : d)
  for (int64_t e = 0; e < n; ++e) d += a[e] * b[e];
  return d;
}

// y += a x over one D-long row (cpu::axpy would split it across threads: these run inside a parallel region).
inline void add_scaled(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t e = 0; e < n; ++e) y[e] += a * x[e];
}

bool use_masked_tiles(const SparseAttentionShape& sp) {
  double sparse_keys = 0.0;
  for (int64_t i = 0; i < sp.attn.T; ++i) {
    const int64_t f = sparse_first_local_block(sp.block, sp.local_blocks, i);
    sparse_keys += double(i + 1 - f * sp.block + std::min(f, sp.top_k) * sp.block);
  }
  const double dense_keys = double(sp.attn.T) * double(sp.attn.T + 1) / 2.0;
  return prefer_masked_sparse(dense_keys, sparse_keys);
}

}  // namespace

void sparse_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                              const int32_t* blocks, SparseAttentionShape sp) {
  const AttentionShape& s = sp.attn;
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  if (use_masked_tiles(sp)) return masked_sparse_attention_forward(out, lse, q, k, v, blocks, sp);
  const int64_t group = s.H / s.Hk, rows = s.B * s.T;
#pragma omp parallel num_threads(num_threads())
  {
    std::vector<KeyRange> r(static_cast<size_t>(sp.top_k + 1));
    std::vector<float> S;
#pragma omp for schedule(dynamic, 16)
    for (int64_t bi = 0; bi < rows; ++bi) {
      const int64_t b = bi / s.T, i = bi % s.T;
      const int64_t nr = sparse_key_ranges(sp.block, sp.local_blocks, sp.top_k, blocks + bi * sp.top_k, i, r.data());
      int64_t n = 0;
      for (int64_t x = 0; x < nr; ++x) n += r[size_t(x)].end - r[size_t(x)].begin;
      S.resize(size_t(n));
      for (int64_t h = 0; h < s.H; ++h) {
        const int64_t hk = h / group;
        const float* qi = q + (bi * s.H + h) * s.Dk;
        float mx = -std::numeric_limits<float>::infinity();
        int64_t c = 0;
        for (int64_t x = 0; x < nr; ++x)
          for (int64_t j = r[size_t(x)].begin; j < r[size_t(x)].end; ++j, ++c) {
            S[size_t(c)] = s.scale * dot(qi, k + ((b * s.T + j) * s.Hk + hk) * s.Dk, s.Dk);
            mx = std::max(mx, S[size_t(c)]);
          }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += (S[size_t(j)] = std::exp(S[size_t(j)] - mx));
        lse[(b * s.H + h) * s.T + i] = mx + std::log(sum);
        float* o = out + (bi * s.H + h) * s.Dv;
        std::fill(o, o + s.Dv, 0.0f);
        const float inv = 1.0f / sum;
        c = 0;
        for (int64_t x = 0; x < nr; ++x)
          for (int64_t j = r[size_t(x)].begin; j < r[size_t(x)].end; ++j, ++c)
            add_scaled(o, v + ((b * s.T + j) * s.Hk + hk) * s.Dv, S[size_t(c)] * inv, s.Dv);
      }
    }
  }
}

void sparse_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                               const float* q, const float* k, const float* v, const int32_t* blocks,
                               SparseAttentionShape sp) {
  const AttentionShape& s = sp.attn;
  if (s.B == 0 || s.T == 0 || s.H == 0) return;
  if (use_masked_tiles(sp)) return masked_sparse_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, blocks, sp);
  const int64_t group = s.H / s.Hk, tasks = s.B * s.Hk;
#pragma omp parallel num_threads(int(std::min <int64_t>(tasks, num_threads())))
  {
    std::vector<KeyRange> r(static_cast<size_t>(sp.top_k + 1));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t b = task / s.Hk, hk = task % s.Hk;
      for (int64_t i = 0; i < s.T; ++i) {
        const int64_t bi = b * s.T + i;
        const int64_t nr = sparse_key_ranges(sp.block, sp.local_blocks, sp.top_k, blocks + bi * sp.top_k, i, r.data());
        for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
          const float* qi = q + (bi * s.H + h) * s.Dk;
          const float* doi = dout + (bi * s.H + h) * s.Dv;
          float* dqi = dq + (bi * s.H + h) * s.Dk;
          const float l = lse[(b * s.H + h) * s.T + i];
          const float delta = dot(doi, out + (bi * s.H + h) * s.Dv, s.Dv);  // dO . O
          for (int64_t x = 0; x < nr; ++x)
            for (int64_t j = r[size_t(x)].begin; j < r[size_t(x)].end; ++j) {
              const int64_t kj = (b * s.T + j) * s.Hk + hk;
              const float p = std::exp(s.scale * dot(qi, k + kj * s.Dk, s.Dk) - l);
              const float ds = p * (dot(doi, v + kj * s.Dv, s.Dv) - delta) * s.scale;
              add_scaled(dv + kj * s.Dv, doi, p, s.Dv);
              add_scaled(dqi, k + kj * s.Dk, ds, s.Dk);
              add_scaled(dk + kj * s.Dk, qi, ds, s.Dk);
            }
        }
      }
    }
  }
}

}  // namespace myriad::cpu
