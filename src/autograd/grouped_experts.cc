// grouped_expert_glu: the routed experts as one tape node (see grouped_experts.h).
// Threading: at many experts each has a handful of rows (896 experts, top-4, 1024 tokens: ~4.6 copies each), so
// one product is far too small to split over threads; the experts themselves are spread over the threads, each
// running its products with single-threaded BLAS. An expert holding a large share of the rows (8 experts x 512
// rows on many threads) would leave the others idle at the end, so those run first, one at a time, with threaded
// BLAS and kernels.
// Shape legend: C copies, L expert input/output width, F expert width, E experts, n one expert's rows.
#include "autograd/grouped_experts.h"

#include <algorithm>

#include "ops/cpu/parallel.h"

namespace myriad::ag {

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
    cpu::gemm_skinny(n, N, K, X, W, Y, N);
  else
    cpu::gemm(false, true, n, N, K, 1.0f, X, K, W, K, 0.0f, Y, N);
}

// Y [n, N] (+)= X [n, K] W, W [K, N].
void project_nn(int64_t n, int64_t N, int64_t K, const float* X, const float* W, float* Y, bool accumulate) {
  if (n <= kSkinnyRows)
    cpu::gemm_skinny_nn(n, N, K, X, K, W, N, Y, N, accumulate);
  else
    cpu::gemm(false, false, n, N, K, 1.0f, X, K, W, N, accumulate ? 1.0f : 0.0f, Y, N);
}

// dW [M, N] += A^T B, A [n, M], B [n, N]: a weight gradient.
void weight_grad(int64_t M, int64_t N, int64_t n, const float* A, const float* B, float* dW) {
  if (n <= kSkinnyRows)
    cpu::rank_update(M, N, n, A, M, B, N, dW, N);
  else
    cpu::gemm(true, false, M, N, n, 1.0f, A, M, B, N, 1.0f, dW, N);
}

// h [n, F] = glu(g, u). SwiGLU computes silu(g) * u exactly as ag::mul(ag::silu(g), u) does.
void glu_forward(const GluParams& p, float* h, const float* g, const float* u, int64_t n, int64_t F) {
  if (p.kind == GluKind::kSitu) {
    cpu::situ_glu_forward(h, F, g, F, u, F, n, F, p.situ);
    return;
  }
  const int64_t m = n * F;
  cpu::unary_forward(Unary::kSiLU, h, g, m);
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) h[i] *= u[i];
}

// dg, du [n, F] += the GLU's input gradients for the output gradient dh [n, F]. SwiGLU overwrites dh and uses
// tmp [n, F] as scratch.
void glu_backward(const GluParams& p, float* dg, float* du, float* dh, float* tmp, const float* g, const float* u,
                  int64_t n, int64_t F) {
  if (p.kind == GluKind::kSitu) {
    cpu::situ_glu_backward(dg, F, du, F, dh, F, g, F, u, F, n, F, p.situ);
    return;
  }
  const int64_t m = n * F;
  cpu::unary_forward(Unary::kSiLU, tmp, g, m);
#pragma omp simd
  for (int64_t i = 0; i < m; ++i) {
    du[i] += dh[i] * tmp[i];
    dh[i] *= u[i];  // d silu(g)
  }
  cpu::unary_backward(Unary::kSiLU, dg, dh, g, m);
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
  cpu::BlasSingleThread single;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> s;
#pragma omp for schedule(dynamic, 1)
    for (size_t i = 0; i < rest.size(); ++i) fn(rest[i], s);
  }
}

void check_weight(const Var& w, const char* what, int64_t e, const Shape& want) {
  MYRIAD_REQUIRE(w.defined(), kValue, "grouped_expert_glu: ", what, "[", e, "] is undefined");
  MYRIAD_REQUIRE(w.shape() == want, kShape, "grouped_expert_glu: ", what, "[", e, "] is ", shape_str(w.shape()),
                 ", expected ", shape_str(want));
  MYRIAD_REQUIRE(w.value().device() == Device::kCPU, kUnsupported, "grouped_expert_glu: no CUDA kernel yet (", what,
                 "[", e, "] on ", device_name(w.value().device()), ")");
  MYRIAD_REQUIRE(w.value().dtype() == DType::kF32, kValue, "grouped_expert_glu: ", what, "[", e, "] must be F32, got ",
                 dtype_name(w.value().dtype()));
}

}  // namespace

Var grouped_expert_glu(const Var& z, const std::vector<int64_t>& off, const std::vector<Var>& w1,
                       const std::vector<Var>& w3, const std::vector<Var>& w2, GluParams glu) {
  MYRIAD_REQUIRE(z.defined() && z.value().ndim() == 2, kShape, "grouped_expert_glu: z_sorted must be [C, L], got ",
                 z.defined() ? shape_str(z.shape()) : std::string("undefined"));
  MYRIAD_REQUIRE(z.value().device() == Device::kCPU && z.value().dtype() == DType::kF32, kUnsupported,
                 "grouped_expert_glu: z_sorted must be a cpu F32 tensor");
  const int64_t C = z.shape()[0], L = z.shape()[1], E = int64_t(w1.size());
  MYRIAD_REQUIRE(E > 0 && int64_t(w3.size()) == E && int64_t(w2.size()) == E && int64_t(off.size()) == E + 1, kShape,
                 "grouped_expert_glu: ", w1.size(), " w1, ", w3.size(), " w3, ", w2.size(), " w2 and ", off.size(),
                 " offsets; expected E >= 1 of each weight and E + 1 offsets");
  MYRIAD_REQUIRE(off.front() == 0 && off.back() == C, kShape, "grouped_expert_glu: offsets run from ", off.front(),
                 " to ", off.back(), ", expected 0 to the ", C, " rows of z_sorted");
  for (int64_t e = 0; e < E; ++e)
    MYRIAD_REQUIRE(off[size_t(e)] <= off[size_t(e + 1)], kValue, "grouped_expert_glu: offsets decrease at expert ", e,
                   " (", off[size_t(e)], " > ", off[size_t(e + 1)], ")");
  MYRIAD_REQUIRE(w1[0].defined() && w1[0].value().ndim() == 2, kShape, "grouped_expert_glu: w1[0] must be [F, L]");
  const int64_t F = w1[0].shape()[0];
  bool weights_need_grad = false;
  for (int64_t e = 0; e < E; ++e) {
    check_weight(w1[size_t(e)], "w1", e, {F, L});
    check_weight(w3[size_t(e)], "w3", e, {F, L});
    check_weight(w2[size_t(e)], "w2", e, {L, F});
    weights_need_grad = weights_need_grad || w1[size_t(e)].requires_grad() || w3[size_t(e)].requires_grad() ||
                        w2[size_t(e)].requires_grad();
  }

  {  // the backward writes each expert's weight gradients from its own thread: a weight shared by two experts
     // would be a data race
    std::vector<const void*> impls;
    for (const auto* ws : {&w1, &w3, &w2})
      for (const Var& w : *ws) impls.push_back(w.impl().get());
    std::sort(impls.begin(), impls.end());
    MYRIAD_REQUIRE(
        std::adjacent_find(impls.begin(), impls.end()) == impls.end(), kValue,
        "grouped_expert_glu: a weight appears twice among the experts' w1, w3, w2 (each must be its own Var)");
  }
  // The GLU inputs of every copy are what backward needs (g, u [C, F]); the GLU output is per-thread scratch.
  Tensor y = Tensor::empty({C, L}), g = Tensor::empty({C, F}), u = Tensor::empty({C, F});
  {
    const float* zp = z.value().data<float>();
    float *yp = y.data<float>(), *gp = g.data<float>(), *up = u.data<float>();
    for_each_expert(off, [&](int64_t e, std::vector<float>& s) {
      const int64_t b0 = off[size_t(e)], n = off[size_t(e + 1)] - b0;
      if (int64_t(s.size()) < n * F) s.resize(size_t(n * F));
      const float* ze = zp + b0 * L;
      float *ge = gp + b0 * F, *ue = up + b0 * F;
      project(n, F, L, ze, w1[size_t(e)].value().data<float>(), ge);
      project(n, F, L, ze, w3[size_t(e)].value().data<float>(), ue);
      glu_forward(glu, s.data(), ge, ue, n, F);
      project(n, L, F, s.data(), w2[size_t(e)].value().data<float>(), yp + b0 * L);
    });
  }

  const bool needs = grad_enabled() && (z.requires_grad() || weights_need_grad);
  Var out(y, needs);
  if (!needs) return out;
  auto oi = out.impl();
  Tape::current().record("grouped_expert_glu", {oi}, [z, off, w1, w3, w2, glu, g, u, oi, C, L, F, E]() {
    // Gradient buffers are allocated here, before the threads start, and only for experts with rows.
    float* dz = z.requires_grad() ? z.grad_buffer().data<float>() : nullptr;
    std::vector<float*> d1(size_t(E), nullptr), d3(size_t(E), nullptr), d2(size_t(E), nullptr);
    for (int64_t e = 0; e < E; ++e) {
      if (off[size_t(e)] == off[size_t(e + 1)]) continue;
      auto grad_of = [](const Var& w) { return w.requires_grad() ? w.grad_buffer().data<float>() : nullptr; };
      d1[size_t(e)] = grad_of(w1[size_t(e)]);
      d3[size_t(e)] = grad_of(w3[size_t(e)]);
      d2[size_t(e)] = grad_of(w2[size_t(e)]);
    }
    const float* dyp = oi->grad.data<float>();
    const float *zp = z.value().data<float>(), *gp = g.data<float>(), *up = u.data<float>();
    for_each_expert(off, [&](int64_t e, std::vector<float>& s) {
      const int64_t b0 = off[size_t(e)], n = off[size_t(e + 1)] - b0, nF = n * F;
      if (int64_t(s.size()) < 4 * nF) s.resize(size_t(4 * nF));
      float *h = s.data(), *dh = h + nF, *dg = dh + nF, *du = dg + nF;  // each [n, F]
      const float *ze = zp + b0 * L, *dye = dyp + b0 * L, *ge = gp + b0 * F, *ue = up + b0 * F;
      float *dW1 = d1[size_t(e)], *dW3 = d3[size_t(e)], *dW2 = d2[size_t(e)];
      glu_forward(glu, h, ge, ue, n, F);  // recomputed: cheaper than keeping [C, F] more
      // NOTE: parameter gradients accumulate (beta = 1), as ag::linear's do, across micro-batches.
      if (dW2) weight_grad(L, F, n, dye, h, dW2);  // dW2 [L, F] += dy^T h
      if (!dz && !dW1 && !dW3) return;
      project_nn(n, F, L, dye, w2[size_t(e)].value().data<float>(), dh, false);  // dh = dy W2
      std::fill(dg, dg + 2 * nF, 0.0f);                                          // dg, du: the GLU backward accumulates
      glu_backward(glu, dg, du, dh, h, ge, ue, n, F);
      if (dz) {  // dz [n, L] += dg W1 + du W3
        project_nn(n, L, F, dg, w1[size_t(e)].value().data<float>(), dz + b0 * L, true);
        project_nn(n, L, F, du, w3[size_t(e)].value().data<float>(), dz + b0 * L, true);
      }
      if (dW1) weight_grad(F, L, n, dg, ze, dW1);  // dW1 [F, L] += dg^T z
      if (dW3) weight_grad(F, L, n, du, ze, dW3);  // dW3 [F, L] += du^T z
    });
  });
  return out;
}

}  // namespace myriad::ag
