// Matrix products: matmul, linear, and reshape (a view).
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/op_support.h"

namespace myriad::ag {

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  const Device dev = op_device("matmul", {&a.value(), &b.value()});
  require_f32("matmul", a.value(), "a");
  require_f32("matmul", b.value(), "b");
  const int nd = a.value().ndim();
  MYRIAD_REQUIRE((nd == 2 || nd == 3) && b.value().ndim() == nd, kShape,
                 "matmul: operands must both be 2-D or 3-D, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  const int64_t batch = nd == 3 ? a.shape()[0] : 1;
  MYRIAD_REQUIRE(nd == 2 || b.shape()[0] == batch, kShape, "matmul: batch sizes differ: ", shape_str(a.shape()),
                 " and ", shape_str(b.shape()));
  const int64_t ar = a.shape()[nd - 2], ac = a.shape()[nd - 1], br = b.shape()[nd - 2], bc = b.shape()[nd - 1];
  const int64_t M = ta ? ac : ar, K = ta ? ar : ac, Kb = tb ? bc : br, N = tb ? br : bc;
  MYRIAD_REQUIRE(K == Kb, kShape, "matmul: inner sizes differ: ", shape_str(a.shape()), (ta ? "^T" : ""), " x ",
                 shape_str(b.shape()), (tb ? "^T" : ""), " (", K, " vs ", Kb, ")");
  Shape os = nd == 3 ? Shape{batch, M, N} : Shape{M, N};
  Tensor y = Tensor::empty(os, DType::kF32, dev);
  ops::gemm(dev, ta, tb, M, N, K, 1.0f, cf(a.value()), ac, cf(b.value()), bc, 0.0f, mf(y), N, batch, ar * ac, br * bc,
            M * N);
  const bool needs = needs_grad({&a, &b});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("matmul", {oi}, [a, b, oi, ta, tb, M, N, K, ar, ac, br, bc, batch, dev]() mutable {
      const float* dy = cf(oi->grad);
      // C = op(A) op(B).  d op(A) = dC op(B)^T ; d op(B) = op(A)^T dC.
      if (a.requires_grad()) {
        float* da = mf(a.grad_buffer());
        if (!ta)  // dA [M,K] += dC [M,N] op(B)^T
          ops::gemm(dev, false, !tb, M, K, N, 1.0f, dy, N, cf(b.value()), bc, 1.0f, da, ac, batch, M * N, br * bc,
                    ar * ac);
        else  // A stored [K,M]: dA += op(B) dC^T
          ops::gemm(dev, tb, true, K, M, N, 1.0f, cf(b.value()), bc, dy, N, 1.0f, da, ac, batch, br * bc, M * N,
                    ar * ac);
      }
      if (b.requires_grad()) {
        float* db = mf(b.grad_buffer());
        if (!tb)  // dB [K,N] += op(A)^T dC
          ops::gemm(dev, !ta, false, K, N, M, 1.0f, cf(a.value()), ac, dy, N, 1.0f, db, bc, batch, ar * ac, M * N,
                    br * bc);
        else  // B stored [N,K]: dB += dC^T op(A)
          ops::gemm(dev, true, ta, N, K, M, 1.0f, dy, N, cf(a.value()), ac, 1.0f, db, bc, batch, M * N, ar * ac,
                    br * bc);
      }
    });
  }
  return out;
}

Var reshape(const Var& x, const Shape& shape) {
  Tensor y = x.value().view(shape);  // Var values are contiguous, so this is always a view
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("reshape", {oi}, [x, oi]() {
      ops::axpy(oi->grad.device(), mf(x.grad_buffer()), cf(oi->grad), 1.0f, oi->grad.numel());
    });
  }
  return out;
}

Var linear(const Var& x, const Var& w) {
  MYRIAD_REQUIRE(w.value().ndim() == 2 && x.value().ndim() >= 1 && x.shape().back() == w.shape()[1], kShape,
                 "linear: input ", shape_str(x.shape()), " does not match weight ", shape_str(w.shape()),
                 " ([out, in])");
  if (x.value().ndim() == 2) return matmul(x, w, false, true);
  Shape lead(x.shape().begin(), x.shape().end() - 1);
  lead.push_back(w.shape()[0]);
  return reshape(matmul(reshape(x, {rows_of(x.shape()), x.shape().back()}), w, false, true), lead);
}

}  // namespace myriad::ag
