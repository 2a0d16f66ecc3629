// grouped_glu: the routed experts of an MoE layer as one fused kernel (ops/kernels.h).
// Threading: at many experts each has a handful of rows (896 experts, top-4, 1024 tokens: ~4.6 copies each), so
// one product is far too small to split over threads; the experts themselves are spread over the threads, each
// running its products with single-threaded BLAS. An expert holding a large share of the rows (8 experts x 512
// rows on many threads) would leave the others idle at the end, so those run first, one at a time, with threaded
// BLAS and kernels.
// Shape legend: C copies, L expert input/output width, F expert width, E experts, n one expert's rows.
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/serial_blas.h"

namespace myriad::cpu {

namespace {

// Up to this many rows, the products go through the few-row kernels (gemm_skinny, gemm_skinny_nn, rank_update:
// each reads W or writes dW once, no packing); above, sgemm.
constexpr int64_t kSkinnyRows = 16;
// An expert needs at least this many rows before threaded BLAS on its products beats running it on one thread
// alongside other experts.
constexpr int64_t kThreadedRows = 128;

// Y [n, N] = X [n, K] W^T, W [N, K].
void project(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y) {
  if (n <= kSkinnyRows)
    gemm_skinny(n, N, K, X, W, Y, N);
  else
    gemm(false, true, n, N, K, 1.0f, X, K, W, K, 0.0f, Y, N);
}

// Y [n, N] (+)= X [n, K] W, W [K, N].
void project_nn(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, bool accumulate) {
  if (n <= kSkinnyRows)
    gemm_skinny_nn(n, N, K, X, K, W, N, Y, N, accumulate);
  else
    gemm(false, false, n, N, K, 1.0f, X, K, W, N, accumulate ? 1.0f : 0.0f, Y, N);
}

// dW [M, N] += A^T B, A [n, M], B [n, N]: a weight gradient.
void weight_grad(int64_t M, int64_t N, int64_t n, const float* A, const float* B, float* dW) {
  if (n <= kSkinnyRows)
    rank_update(M, N, n, A, M, B, N, dW, N);
  else
    gemm(true, false, M, N, n, 1.0f, A, M, B, N, 1.0f, dW, N);
}

// dg, du [n, F] += the GLU's input gradients for the output gradient dh [n, F]. SwiGLU overwrites dh and uses
// tmp [n, F] as scratch.
void glu_backward(const GluParams& p, float* dg, float* du, float* dh, float* tmp, const float* g, const float* u,
                  int64_t n, int64_t F) {
  if (p.kind == GluKind::kSitu) {
    situ_glu_backward(dg, F, du, F, dh, F, g, F, u, F, n, F, p.situ);
    return;
  }
  const int64_t m = n * F;
  unary_forward(Unary::kSiLU, tmp, g, m);
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) {
    du[i] += dh[i] * tmp[i];
    dh[i] *= u[i];  // d silu(g)
  }
  unary_backward(Unary::kSiLU, dg, dh, g, m);
}

// Runs fn(e, scratch) for every expert with rows (scratch: a per-thread buffer fn may grow). The experts with a
// large share of the rows run first, one at a time, with threaded BLAS; the rest in one OpenMP region, largest
// first so that the dynamic schedule ends on small items, each with single-threaded BLAS.
template <class Fn>
void for_each_expert(const std::vector<int64_t>& off, Fn&& fn) {
  const int64_t E = int64_t(off.size()) - 1, C = off.back();
  const int nt = num_threads();
  const int64_t big = std::max<int64_t>(kThreadedRows, C / (2 * int64_t(nt)));
  auto rows = [&](int64_t e) { return off[size_t(e + 1)] - off[size_t(e)]; };
  std::vector<float> scratch;
  std::vector<int64_t> rest;
  for (int64_t e = 0; e < E; ++e) {
    if (rows(e) == 0) continue;
    if (nt == 1 || rows(e) >= big)
      fn(e, scratch);
    else
      rest.push_back(e);
  }
  if (rest.size() <= 1) {
    for (const int64_t e : rest) fn(e, scratch);
    return;
  }
  std::stable_sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) { return rows(a) > rows(b); });
  ops::ScopedSerialBlas single;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> s;
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < rest.size(); ++i) fn(rest[i], s);
  }
}

// The pieces [begin, end) of rows [b0, b1): split at the cuts inside the range.
std::vector<std::pair<int64_t, int64_t>> pieces(const GroupedGluShape& s, int64_t b0, int64_t b1) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t* c = std::upper_bound(s.cuts, s.cuts + s.num_cuts, b0);
  int64_t at = b0;
  for (; c != s.cuts + s.num_cuts && *c < b1; ++c) {
    out.emplace_back(at, *c);
    at = *c;
  }
  out.emplace_back(at, b1);
  return out;
}

}  // namespace

void grouped_glu_forward(GroupedGluShape s, const int64_t* off_p, const float* z, const float* const* w1,
                         const float* const* w3, const float* const* w2, GluParams glu, float* y, float* g, float* u) {
  const int64_t L = s.L, F = s.F;
  const std::vector<int64_t> off(off_p, off_p + s.E + 1);
  for_each_expert(off, [&](int64_t e, std::vector<float>& scratch) {
    for (const auto& [b0, b1] : pieces(s, off[size_t(e)], off[size_t(e + 1)])) {
      const int64_t n = b1 - b0;
      if (int64_t(scratch.size()) < n * F) scratch.resize(size_t(n * F));
      const float* ze = z + b0 * L;
      float *ge = g + b0 * F, *ue = u + b0 * F;
      project(n, F, L, ze, w1[e], ge);
      project(n, F, L, ze, w3[e], ue);
      glu_forward(glu, scratch.data(), ge, ue, n, F);
      project(n, L, F, scratch.data(), w2[e], y + b0 * L);
    }
  });
}

void grouped_glu_backward(GroupedGluShape s, const int64_t* off_p, const float* dy, const float* z,
                          const float* const* w1, const float* const* w3, const float* const* w2, const float* g,
                          const float* u, GluParams glu, float* dz, float* const* dw1, float* const* dw3,
                          float* const* dw2) {
  const int64_t L = s.L, F = s.F;
  const std::vector<int64_t> off(off_p, off_p + s.E + 1);
  for_each_expert(off, [&](int64_t e, std::vector<float>& scratch) {
    for (const auto& [b0, b1] : pieces(s, off[size_t(e)], off[size_t(e + 1)])) {
      const int64_t n = b1 - b0, nF = n * F;
      if (int64_t(scratch.size()) < 4 * nF) scratch.resize(size_t(4 * nF));
      float *h = scratch.data(), *dh = h + nF, *dg = dh + nF, *du = dg + nF;  // each [n, F]
      const float *ze = z + b0 * L, *dye = dy + b0 * L, *ge = g + b0 * F, *ue = u + b0 * F;
      float *dW1 = dw1[e], *dW3 = dw3[e], *dW2 = dw2[e];
      glu_forward(glu, h, ge, ue, n, F);  // recomputed: cheaper than keeping [C, F] more
      // NOTE: parameter gradients accumulate (beta = 1), as ag::linear's do, across micro-batches (and pieces).
      if (dW2) weight_grad(L, F, n, dye, h, dW2);  // dW2 [L, F] += dy^T h
      if (!dz && !dW1 && !dW3) continue;
      project_nn(n, F, L, dye, w2[e], dh, false);  // dh = dy W2
      std::fill(dg, dg + 2 * nF, 0.0f);            // dg, du: the GLU backward accumulates
      glu_backward(glu, dg, du, dh, h, ge, ue, n, F);
      if (dz) {  // dz [n, L] += dg W1 + du W3
        project_nn(n, L, F, dg, w1[e], dz + b0 * L, true);
        project_nn(n, L, F, du, w3[e], dz + b0 * L, true);
      }
      if (dW1) weight_grad(F, L, n, dg, ze, dW1);  // dW1 [F, L] += dg^T z
      if (dW3) weight_grad(F, L, n, du, ze, dW3);  // dW3 [F, L] += du^T z
    }
  });
}

}  // namespace myriad::cpu
