#include "autograd/functions.h"

#include <algorithm>
#include <cmath>

namespace myriad::ag {

namespace {

void require_cpu(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    MYRIAD_REQUIRE(!t->defined() || t->device() == Device::kCPU, kUnsupported, op,
                   ": no CUDA kernel yet for this op (tensor on ", device_name(t->device()), ")");
}

void require_f32(const char* op, const Tensor& t, const char* what) {
  MYRIAD_REQUIRE(t.dtype() == DType::kF32, kValue, op, ": ", what, " must be F32, got ", dtype_name(t.dtype()));
}

const float* cf(const Tensor& t) {
  return t.data<float>();
}
float* mf(Tensor& t) {
  return t.data<float>();
}

Var make_output(Tensor value, bool needs) {
  return Var(std::move(value), needs);
}

int64_t rows_of(const Shape& s) {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < s.size(); ++i) r *= s[i];
  return r;
}

// numpy broadcast of two shapes; kShape error naming both when incompatible.
Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MYRIAD_REQUIRE(da == db || da == 1 || db == 1, kShape, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast (axis ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Strides of `in` viewed at the broadcast shape `out` (0 on broadcast axes).
Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape st(out.size(), 0);
  const Shape cs = contiguous_strides(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[i + off] = in[i] == 1 ? 0 : cs[i];
  return st;
}

// grad_in += dout summed over the axes where `in` was broadcast.
void accumulate_reduced(Tensor& grad_in, const Tensor& dout, const Shape& in_shape) {
  const Shape& out = dout.shape();
  float* g = mf(grad_in);
  const float* d = cf(dout);
  const int64_t n = dout.numel();
  if (in_shape == out) {
    cpu::axpy(g, d, 1.0f, n);
    return;
  }
  if (!in_shape.empty() && !out.empty() && in_shape.back() == out.back() && shape_numel(in_shape) == out.back()) {
    cpu::sum_rows_accumulate(g, d, n / std::max<int64_t>(out.back(), 1), out.back());  // a row vector
    return;
  }
  const Shape st = broadcast_strides(in_shape, out);
  const int nd = int(out.size());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, o = 0;
    for (int k = nd - 1; k >= 0; --k) {
      o += (rem % out[k]) * st[k];
      rem /= out[k];
    }
    g[o] += d[i];
  }
}

Var binary(Binary op, const Var& a, const Var& b) {
  const char* name = op == Binary::kAdd ? "add" : "mul";
  require_cpu(name, {&a.value(), &b.value()});
  require_f32(name, a.value(), "a");
  require_f32(name, b.value(), "b");
  const Shape out_shape = broadcast_shape(name, a.shape(), b.shape());
  Tensor y = Tensor::empty(out_shape);
  const Shape sa = broadcast_strides(a.shape(), out_shape), sb = broadcast_strides(b.shape(), out_shape);
  cpu::binary_forward(op, mf(y), cf(a.value()), sa.data(), cf(b.value()), sb.data(), out_shape.data(),
                      int(out_shape.size()));
  const bool needs = needs_grad({&a, &b});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record(name, {oi}, [op, a, b, oi, out_shape]() mutable {
      const Tensor& dy = oi->grad;
      for (int side = 0; side < 2; ++side) {
        const Var& self = side == 0 ? a : b;
        const Var& other = side == 0 ? b : a;
        if (!self.requires_grad()) continue;
        if (op == Binary::kAdd) {
          accumulate_reduced(self.grad_buffer(), dy, self.shape());
        } else {
          Tensor t = Tensor::empty(out_shape);
          const Shape cs = contiguous_strides(out_shape), so = broadcast_strides(other.shape(), out_shape);
          cpu::binary_forward(Binary::kMul, mf(t), cf(dy), cs.data(), cf(other.value()), so.data(), out_shape.data(),
                              int(out_shape.size()));
          accumulate_reduced(self.grad_buffer(), t, self.shape());
        }
      }
    });
  }
  return out;
}

}  // namespace

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  require_cpu("matmul", {&a.value(), &b.value()});
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
  Tensor y = Tensor::empty(os);
  cpu::gemm(ta, tb, M, N, K, 1.0f, cf(a.value()), ac, cf(b.value()), bc, 0.0f, mf(y), N, batch, ar * ac, br * bc,
            M * N);
  const bool needs = needs_grad({&a, &b});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("matmul", {oi}, [a, b, oi, ta, tb, M, N, K, ar, ac, br, bc, batch]() mutable {
      const float* dy = cf(oi->grad);
      // C = op(A) op(B).  d op(A) = dC op(B)^T ; d op(B) = op(A)^T dC.
      if (a.requires_grad()) {
        float* da = mf(a.grad_buffer());
        if (!ta)  // dA [M,K] += dC [M,N] op(B)^T
          cpu::gemm(false, !tb, M, K, N, 1.0f, dy, N, cf(b.value()), bc, 1.0f, da, ac, batch, M * N, br * bc, ar * ac);
        else  // A stored [K,M]: dA += op(B) dC^T
          cpu::gemm(tb, true, K, M, N, 1.0f, cf(b.value()), bc, dy, N, 1.0f, da, ac, batch, br * bc, M * N, ar * ac);
      }
      if (b.requires_grad()) {
        float* db = mf(b.grad_buffer());
        if (!tb)  // dB [K,N] += op(A)^T dC
          cpu::gemm(!ta, false, K, N, M, 1.0f, cf(a.value()), ac, dy, N, 1.0f, db, bc, batch, ar * ac, M * N, br * bc);
        else  // B stored [N,K]: dB += dC^T op(A)
          cpu::gemm(true, ta, N, K, M, 1.0f, dy, N, cf(a.value()), ac, 1.0f, db, bc, batch, M * N, ar * ac, br * bc);
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
    Tape::current().record("reshape", {oi},
                           [x, oi]() { cpu::axpy(mf(x.grad_buffer()), cf(oi->grad), 1.0f, oi->grad.numel()); });
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

Var add(const Var& a, const Var& b) {
  return binary(Binary::kAdd, a, b);
}
Var mul(const Var& a, const Var& b) {
  return binary(Binary::kMul, a, b);
}

Var scale(const Var& a, float alpha) {
  require_cpu("scale", {&a.value()});
  Tensor y = Tensor::empty(a.shape());
  cpu::scale(mf(y), cf(a.value()), alpha, y.numel());
  const bool needs = needs_grad({&a});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("scale", {oi}, [a, oi, alpha]() mutable {
      cpu::axpy(mf(a.grad_buffer()), cf(oi->grad), alpha, oi->grad.numel());
    });
  }
  return out;
}

Var sum(const Var& a) {
  require_cpu("sum", {&a.value()});
  Tensor y = Tensor::empty({});
  mf(y)[0] = float(cpu::sum_all(cf(a.value()), a.value().numel()));
  const bool needs = needs_grad({&a});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("sum", {oi}, [a, oi]() mutable {
      Tensor& g = a.grad_buffer();
      const float d = cf(oi->grad)[0];
      float* p = mf(g);
      for (int64_t i = 0; i < g.numel(); ++i) p[i] += d;
    });
  }
  return out;
}

Var unary(Unary op, const Var& x) {
  require_cpu("unary", {&x.value()});
  require_f32("unary", x.value(), "x");
  Tensor y = Tensor::empty(x.shape());
  cpu::unary_forward(op, mf(y), cf(x.value()), y.numel());
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("unary", {oi}, [op, x, oi]() mutable {
      cpu::unary_backward(op, mf(x.grad_buffer()), cf(oi->grad), cf(x.value()), oi->grad.numel());
    });
  }
  return out;
}

Var situ_glu(const Var& g, const Var& u, SituParams p) {
  require_cpu("situ_glu", {&g.value(), &u.value()});
  MYRIAD_REQUIRE(g.shape() == u.shape() && g.value().ndim() >= 1, kShape, "situ_glu: gate ", shape_str(g.shape()),
                 " and up ", shape_str(u.shape()), " must have the same shape");
  const int64_t F = g.shape().back(), rows = rows_of(g.shape());
  Tensor y = Tensor::empty(g.shape());
  cpu::situ_glu_forward(mf(y), F, cf(g.value()), F, cf(u.value()), F, rows, F, p);
  const bool needs = needs_grad({&g, &u});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("situ_glu", {oi}, [g, u, oi, p, F, rows]() mutable {
      // Both gradients are needed by the fused kernel; a side that needs none gets a scratch buffer.
      Tensor dg = g.requires_grad() ? g.grad_buffer() : Tensor::zeros(g.shape());
      Tensor du = u.requires_grad() ? u.grad_buffer() : Tensor::zeros(u.shape());
      cpu::situ_glu_backward(mf(dg), F, mf(du), F, cf(oi->grad), F, cf(g.value()), F, cf(u.value()), F, rows, F, p);
    });
  }
  return out;
}

namespace {
Var rmsnorm_impl(const Var& x, const Var& w, const Var* gate, float eps) {
  require_cpu("rmsnorm", {&x.value(), &w.value()});
  const int64_t N = x.value().ndim() ? x.shape().back() : 1;
  MYRIAD_REQUIRE(x.value().ndim() >= 1 && w.shape() == Shape{N}, kShape, "rmsnorm: weight ", shape_str(w.shape()),
                 " does not match the last dim of input ", shape_str(x.shape()));
  if (gate)
    MYRIAD_REQUIRE(gate->shape() == x.shape(), kShape, "rmsnorm_gated: gate ", shape_str(gate->shape()),
                   " differs from input ", shape_str(x.shape()));
  const int64_t rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape()), rstd = Tensor::empty({rows});
  cpu::rmsnorm_forward(mf(y), mf(rstd), cf(x.value()), cf(w.value()), gate ? cf(gate->value()) : nullptr, rows, N, eps);
  const bool needs = needs_grad({&x, &w, gate});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Var gv = gate ? *gate : Var();
    Tape::current().record("rmsnorm", {oi}, [x, w, gv, oi, rstd, rows, N]() mutable {
      Tensor dx = x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape());
      Tensor dw = w.requires_grad() ? w.grad_buffer() : Tensor::zeros(w.shape());
      Tensor dg;
      if (gv.defined()) dg = gv.requires_grad() ? gv.grad_buffer() : Tensor::zeros(gv.shape());
      cpu::rmsnorm_backward(mf(dx), mf(dw), gv.defined() ? mf(dg) : nullptr, cf(oi->grad), cf(x.value()), cf(w.value()),
                            gv.defined() ? cf(gv.value()) : nullptr, cf(rstd), rows, N);
    });
  }
  return out;
}
}  // namespace

Var rmsnorm(const Var& x, const Var& w, float eps) {
  return rmsnorm_impl(x, w, nullptr, eps);
}
Var rmsnorm_gated(const Var& x, const Var& w, const Var& gate, float eps) {
  return rmsnorm_impl(x, w, &gate, eps);
}

Var l2norm(const Var& x, float eps) {
  require_cpu("l2norm", {&x.value()});
  const int64_t N = x.shape().back(), rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape()), rn = Tensor::empty({rows});
  cpu::l2norm_forward(mf(y), mf(rn), cf(x.value()), rows, N, eps);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("l2norm", {oi}, [x, oi, rn, rows, N]() mutable {
      cpu::l2norm_backward(mf(x.grad_buffer()), cf(oi->grad), cf(oi->value), cf(rn), rows, N);
    });
  }
  return out;
}

namespace {
Var softmax_impl(const Var& x, bool log) {
  require_cpu("softmax", {&x.value()});
  const int64_t N = x.shape().back(), rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape());
  (log ? cpu::log_softmax_forward : cpu::softmax_forward)(mf(y), cf(x.value()), rows, N);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record(log ? "log_softmax" : "softmax", {oi}, [x, oi, rows, N, log]() mutable {
      (log ? cpu::log_softmax_backward : cpu::softmax_backward)(mf(x.grad_buffer()), cf(oi->grad), cf(oi->value), rows,
                                                                N);
    });
  }
  return out;
}
}  // namespace

Var softmax(const Var& x) {
  return softmax_impl(x, false);
}
Var log_softmax(const Var& x) {
  return softmax_impl(x, true);
}

std::pair<Var, Tensor> conv1d(const Var& x, const Var& w, const Var& state_in) {
  require_cpu("conv1d", {&x.value(), &w.value()});
  MYRIAD_REQUIRE(x.value().ndim() == 3 && w.value().ndim() == 2 && w.shape()[0] == x.shape()[2] && w.shape()[1] >= 1,
                 kShape, "conv1d: input ", shape_str(x.shape()), " ([B, T, C]) does not match weight ",
                 shape_str(w.shape()), " ([C, W])");
  const int64_t B = x.shape()[0], T = x.shape()[1], C = x.shape()[2], W = w.shape()[1];
  const Shape state_shape{B, W - 1, C};
  if (state_in.defined())
    MYRIAD_REQUIRE(state_in.shape() == state_shape, kShape, "conv1d: state ", shape_str(state_in.shape()),
                   " should be ", shape_str(state_shape));
  Tensor y = Tensor::empty(x.shape()), st = Tensor::empty(state_shape);
  const float* sp = state_in.defined() ? cf(state_in.value()) : nullptr;
  cpu::conv1d_forward(mf(y), mf(st), cf(x.value()), cf(w.value()), sp, B, T, C, W);
  const bool needs = needs_grad({&x, &w, &state_in});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("conv1d", {oi}, [x, w, state_in, oi, B, T, C, W]() mutable {
      Tensor dx = x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape());
      Tensor dw = w.requires_grad() ? w.grad_buffer() : Tensor::zeros(w.shape());
      float* ds = state_in.requires_grad() ? mf(state_in.grad_buffer()) : nullptr;
      cpu::conv1d_backward(mf(dx), mf(dw), ds, cf(oi->grad), cf(x.value()), cf(w.value()),
                           state_in.defined() ? cf(state_in.value()) : nullptr, B, T, C, W);
    });
  }
  return {out, st};
}

Var rope(const Var& x, const Tensor& cos, const Tensor& sin, RopeLayout layout) {
  require_cpu("rope", {&x.value(), &cos, &sin});
  MYRIAD_REQUIRE(x.value().ndim() == 3, kShape, "rope: input must be [T, H, N], got ", shape_str(x.shape()));
  const int64_t T = x.shape()[0], H = x.shape()[1], N = x.shape()[2];
  MYRIAD_REQUIRE(layout.rot % 2 == 0 && layout.col0 >= 0 && layout.col0 + layout.rot <= N, kShape,
                 "rope: rotated columns [", layout.col0, ", ", layout.col0 + layout.rot,
                 ") must be an even-sized range inside the row of ", N);
  MYRIAD_REQUIRE(cos.shape() == (Shape{T, layout.rot / 2}) && sin.shape() == cos.shape(), kShape, "rope: cos/sin ",
                 shape_str(cos.shape()), " should be ", shape_str({T, layout.rot / 2}));
  Tensor y = Tensor::empty(x.shape());
  cpu::rope_forward(mf(y), cf(x.value()), cf(cos), cf(sin), T, H, N, layout);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("rope", {oi}, [x, oi, cos, sin, T, H, N, layout]() mutable {
      cpu::rope_backward(mf(x.grad_buffer()), cf(oi->grad), cf(cos), cf(sin), T, H, N, layout);
    });
  }
  return out;
}

Var attention(const Var& q, const Var& k, const Var& v, float scale_factor) {
  require_cpu("attention", {&q.value(), &k.value(), &v.value()});
  const bool ok = q.value().ndim() == 4 && k.value().ndim() == 4 && v.value().ndim() == 4 &&
                  k.shape()[0] == q.shape()[0] && v.shape()[0] == q.shape()[0] && k.shape()[1] == q.shape()[1] &&
                  v.shape()[1] == q.shape()[1] && k.shape()[3] == q.shape()[3] && v.shape()[2] == k.shape()[2] &&
                  k.shape()[2] > 0 && q.shape()[2] % k.shape()[2] == 0;
  MYRIAD_REQUIRE(ok, kShape, "attention: q ", shape_str(q.shape()), " k ", shape_str(k.shape()), " v ",
                 shape_str(v.shape()),
                 " must be [B, T, H, Dk], [B, T, Hk, Dk], [B, T, Hk, Dv] with H a multiple of Hk");
  AttentionShape s{q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], scale_factor};
  Tensor o = Tensor::empty({s.B, s.T, s.H, s.Dv}), lse = Tensor::empty({s.B, s.H, s.T});
  cpu::attention_forward(mf(o), mf(lse), cf(q.value()), cf(k.value()), cf(v.value()), s);
  const bool needs = needs_grad({&q, &k, &v});
  Var out = make_output(o, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("attention", {oi}, [q, k, v, oi, lse, s]() mutable {
      Tensor dq = q.requires_grad() ? q.grad_buffer() : Tensor::zeros(q.shape());
      Tensor dk = k.requires_grad() ? k.grad_buffer() : Tensor::zeros(k.shape());
      Tensor dv = v.requires_grad() ? v.grad_buffer() : Tensor::zeros(v.shape());
      cpu::attention_backward(mf(dq), mf(dk), mf(dv), cf(oi->grad), cf(oi->value), cf(lse), cf(q.value()),
                              cf(k.value()), cf(v.value()), s);
    });
  }
  return out;
}

Var cross_entropy(const Var& h, const Var& W, const Tensor& targets, int64_t ignore_index) {
  require_cpu("cross_entropy", {&h.value(), &W.value(), &targets});
  MYRIAD_REQUIRE(h.value().ndim() == 2 && W.value().ndim() == 2 && h.shape()[1] == W.shape()[1], kShape,
                 "cross_entropy: hidden ", shape_str(h.shape()), " ([T, D]) does not match lm_head ",
                 shape_str(W.shape()), " ([V, D])");
  MYRIAD_REQUIRE(targets.dtype() == DType::kI64 && targets.shape() == Shape{h.shape()[0]}, kShape,
                 "cross_entropy: targets must be I64 [", h.shape()[0], "], got ", dtype_name(targets.dtype()), " ",
                 shape_str(targets.shape()));
  const int64_t T = h.shape()[0], D = h.shape()[1], V = W.shape()[0];
  Tensor loss = Tensor::empty({}), lse = Tensor::empty({T});
  Tensor tg = targets.contiguous();
  cpu::cross_entropy_forward(mf(loss), mf(lse), cf(h.value()), cf(W.value()), tg.data<int64_t>(), T, D, V,
                             ignore_index);
  const bool needs = needs_grad({&h, &W});
  Var out = make_output(loss, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("cross_entropy", {oi}, [h, W, oi, lse, tg, T, D, V, ignore_index]() mutable {
      Tensor dh = h.requires_grad() ? h.grad_buffer() : Tensor::zeros(h.shape());
      Tensor dW = W.requires_grad() ? W.grad_buffer() : Tensor::zeros(W.shape());
      cpu::cross_entropy_backward(mf(dh), mf(dW), cf(oi->grad)[0], cf(h.value()), cf(W.value()), tg.data<int64_t>(),
                                  cf(lse), T, D, V, ignore_index);
    });
  }
  return out;
}

std::pair<Var, Var> kda(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, const Var& state_in,
                        int64_t chunk) {
  require_cpu("kda", {&q.value(), &k.value(), &v.value(), &g.value(), &beta.value()});
  const bool ok = q.value().ndim() == 4 && k.shape() == q.shape() && g.shape() == q.shape() && v.value().ndim() == 4 &&
                  v.shape()[0] == q.shape()[0] && v.shape()[1] == q.shape()[1] && v.shape()[2] == q.shape()[2] &&
                  beta.shape() == Shape{q.shape()[0], q.shape()[1], q.shape()[2]};
  MYRIAD_REQUIRE(ok, kShape, "kda: q ", shape_str(q.shape()), " k ", shape_str(k.shape()), " v ", shape_str(v.shape()),
                 " g ", shape_str(g.shape()), " beta ", shape_str(beta.shape()),
                 " must be [B, T, H, K] x3 (q, k, g), [B, T, H, V] and [B, T, H]");
  KdaShape s{q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3], v.shape()[3], chunk};
  const Shape state_shape{s.B, s.H, s.K, s.V};
  if (state_in.defined())
    MYRIAD_REQUIRE(state_in.shape() == state_shape, kShape, "kda: state ", shape_str(state_in.shape()), " should be ",
                   shape_str(state_shape));
  Tensor o = Tensor::empty(v.shape()), st = Tensor::empty(state_shape);
  const float* s0 = state_in.defined() ? cf(state_in.value()) : nullptr;
  cpu::kda_chunk_forward(mf(o), mf(st), cf(q.value()), cf(k.value()), cf(v.value()), cf(g.value()), cf(beta.value()),
                         s0, s);
  const bool needs = needs_grad({&q, &k, &v, &g, &beta, &state_in});
  Var out = make_output(o, needs), state_out = make_output(st, needs);
  if (needs) {
    auto oi = out.impl(), si = state_out.impl();
    Tape::current().record("kda", {oi, si}, [q, k, v, g, beta, state_in, oi, si, s]() mutable {
      auto grad_or_scratch = [](const Var& x) {
        return x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape());
      };
      Tensor dq = grad_or_scratch(q), dk = grad_or_scratch(k), dv = grad_or_scratch(v), dg = grad_or_scratch(g),
             db = grad_or_scratch(beta);
      float* ds0 = state_in.requires_grad() ? mf(state_in.grad_buffer()) : nullptr;
      // Either output may have no gradient (e.g. the final state is unused): read zeros for it.
      Tensor dout = oi->grad.defined() ? oi->grad : Tensor::zeros(oi->value.shape());
      const float* dsout = si->grad.defined() ? cf(si->grad) : nullptr;
      cpu::kda_backward(mf(dq), mf(dk), mf(dv), mf(dg), mf(db), ds0, cf(dout), dsout, cf(q.value()), cf(k.value()),
                        cf(v.value()), cf(g.value()), cf(beta.value()),
                        state_in.defined() ? cf(state_in.value()) : nullptr, s);
    });
  }
  return {out, state_out};
}

Var checkpoint(std::function<Var(const std::vector<Var>&)> fn, const std::vector<Var>& inputs) {
  Var y;
  {
    NoGradGuard no_grad;
    y = fn(inputs);
  }
  bool needs = grad_enabled();
  if (needs) {
    needs = false;
    for (const Var& in : inputs) needs = needs || in.requires_grad();
  }
  // Trainable weights inside fn are reached through the recompute, so the node is recorded even when no
  // input needs a gradient, as long as recording is on.
  needs = needs || grad_enabled();
  Var out = make_output(y.value(), needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("checkpoint", {oi}, [fn, inputs, oi]() {
      EnableGradGuard grad_on;
      TapeScope scope;
      std::vector<Var> fresh;  // the same values, as leaves of the recompute's own graph
      fresh.reserve(inputs.size());
      for (const Var& in : inputs) fresh.emplace_back(in.value(), in.requires_grad());
      Var y2 = fn(fresh);
      if (y2.requires_grad()) Tape::current().backward({{y2, oi->grad}});
      for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i].requires_grad() && fresh[i].has_grad()) cpu_accumulate(inputs[i].grad_buffer(), fresh[i].grad());
    });
  }
  return out;
}

Var slice_last(const Var& x, int64_t start, int64_t end) {
  require_cpu("slice_last", {&x.value()});
  MYRIAD_REQUIRE(x.value().ndim() >= 1 && 0 <= start && start <= end && end <= x.shape().back(), kShape,
                 "slice_last: [", start, ", ", end, ") out of range for ", shape_str(x.shape()));
  const int64_t N = x.shape().back(), rows = rows_of(x.shape()), w = end - start;
  Shape os = x.shape();
  os.back() = w;
  Tensor y = Tensor::empty(os);
  const float* src = cf(x.value());
  float* dst = mf(y);
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * N + start, src + r * N + end, dst + r * w);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("slice_last", {oi}, [x, oi, rows, N, start, w]() {
      float* g = mf(x.grad_buffer());
      const float* d = cf(oi->grad);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < w; ++j) g[r * N + start + j] += d[r * w + j];
    });
  }
  return out;
}

Var concat_last(const std::vector<Var>& parts) {
  MYRIAD_REQUIRE(!parts.empty(), kShape, "concat_last: no parts");
  Shape lead(parts[0].shape().begin(), parts[0].shape().end() - 1);
  int64_t N = 0;
  for (const Var& p : parts) {
    require_cpu("concat_last", {&p.value()});
    const Shape pl(p.shape().begin(), p.shape().end() - 1);
    MYRIAD_REQUIRE(pl == lead, kShape, "concat_last: part ", shape_str(p.shape()), " does not match ",
                   shape_str(parts[0].shape()), " in the leading dims");
    N += p.shape().back();
  }
  const int64_t rows = shape_numel(lead);
  Shape os = lead;
  os.push_back(N);
  Tensor y = Tensor::empty(os);
  float* dst = mf(y);
  int64_t off = 0;
  bool needs = false;
  for (const Var& p : parts) {
    const int64_t w = p.shape().back();
    const float* src = cf(p.value());
    for (int64_t r = 0; r < rows; ++r) std::copy(src + r * w, src + (r + 1) * w, dst + r * N + off);
    off += w;
    needs = needs || needs_grad({&p});
  }
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("concat_last", {oi}, [parts, oi, rows, N]() {
      const float* d = cf(oi->grad);
      int64_t o = 0;
      for (const Var& p : parts) {
        const int64_t w = p.shape().back();
        if (p.requires_grad()) {
          float* g = mf(p.grad_buffer());
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < w; ++j) g[r * w + j] += d[r * N + o + j];
        }
        o += w;
      }
    });
  }
  return out;
}

Var slice_rows(const Var& x, int64_t start, int64_t end) {
  MYRIAD_REQUIRE(x.value().ndim() == 2 && 0 <= start && start <= end && end <= x.shape()[0], kShape, "slice_rows: [",
                 start, ", ", end, ") out of range for ", shape_str(x.shape()));
  const int64_t N = x.shape()[1];
  Tensor y = x.value().slice(0, start, end).contiguous();  // rows are contiguous: a view
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("slice_rows", {oi}, [x, oi, start, N]() {
      cpu::axpy(mf(x.grad_buffer()) + start * N, cf(oi->grad), 1.0f, oi->grad.numel());
    });
  }
  return out;
}

Var concat_rows(const std::vector<Var>& parts, int64_t N) {
  int64_t n = 0;
  bool needs = false;
  for (const Var& p : parts) {
    MYRIAD_REQUIRE(p.value().ndim() == 2 && p.shape()[1] == N, kShape, "concat_rows: part ", shape_str(p.shape()),
                   " should be [n, ", N, "]");
    n += p.shape()[0];
    needs = needs || needs_grad({&p});
  }
  Tensor y = Tensor::empty({n, N});
  int64_t off = 0;
  for (const Var& p : parts) {
    if (p.value().numel()) std::copy(cf(p.value()), cf(p.value()) + p.value().numel(), mf(y) + off * N);
    off += p.shape()[0];
  }
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("concat_rows", {oi}, [parts, oi, N]() {
      int64_t o = 0;
      for (const Var& p : parts) {
        if (p.requires_grad()) cpu::axpy(mf(p.grad_buffer()), cf(oi->grad) + o * N, 1.0f, p.value().numel());
        o += p.shape()[0];
      }
    });
  }
  return out;
}

Var kda_gate(const Var& f, const Var& A_log, const Var& dt_bias, float lower_bound) {
  require_cpu("kda_gate", {&f.value(), &A_log.value(), &dt_bias.value()});
  MYRIAD_REQUIRE(f.value().ndim() == 3 && A_log.shape() == Shape{f.shape()[1]} &&
                     dt_bias.shape() == Shape{f.shape()[1] * f.shape()[2]},
                 kShape, "kda_gate: f ", shape_str(f.shape()), " ([T, H, K]), A_log ", shape_str(A_log.shape()),
                 " ([H]) and dt_bias ", shape_str(dt_bias.shape()), " ([H*K]) do not agree");
  const int64_t T = f.shape()[0], H = f.shape()[1], K = f.shape()[2];
  Tensor g = Tensor::empty(f.shape());
  const float* fv = cf(f.value());
  const float* al = cf(A_log.value());
  const float* dt = cf(dt_bias.value());
  cpu::kda_gate_forward(mf(g), fv, al, dt, T, H, K, lower_bound);
  const bool needs = needs_grad({&f, &A_log, &dt_bias});
  Var out = make_output(g, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("kda_gate", {oi}, [f, A_log, dt_bias, oi, T, H, K, lower_bound]() {
      const float* d = cf(oi->grad);
      const float* fv2 = cf(f.value());
      const float* al2 = cf(A_log.value());
      const float* dt2 = cf(dt_bias.value());
      float* df = f.requires_grad() ? mf(f.grad_buffer()) : nullptr;
      float* dA = A_log.requires_grad() ? mf(A_log.grad_buffer()) : nullptr;
      float* ddt = dt_bias.requires_grad() ? mf(dt_bias.grad_buffer()) : nullptr;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const float a = std::exp(al2[h]);
          for (int64_t c = 0; c < K; ++c) {
            const int64_t i = (t * H + h) * K + c;
            const float x = fv2[i] + dt2[h * K + c];
            const float s = 1.0f / (1.0f + std::exp(-a * x));
            const float dz = d[i] * lower_bound * s * (1.0f - s);  // d loss / d (a x)
            if (df) df[i] += dz * a;
            if (ddt) ddt[h * K + c] += dz * a;
            if (dA) dA[h] += dz * a * x;  // d(a)/d(A_log) = a
          }
        }
    });
  }
  return out;
}

Var route_weights(const Var& s, const Tensor& idx, float scale_factor, bool renormalize) {
  require_cpu("route_weights", {&s.value(), &idx});
  MYRIAD_REQUIRE(
      s.value().ndim() == 2 && idx.dtype() == DType::kI32 && idx.ndim() == 2 && idx.shape()[0] == s.shape()[0], kShape,
      "route_weights: scores ", shape_str(s.shape()), " ([T, E]) and I32 indices ", shape_str(idx.shape()),
      " ([T, k]) do not agree");
  const int64_t T = s.shape()[0], E = s.shape()[1], k = idx.shape()[1];
  Tensor ic = idx.contiguous();
  const int32_t* id = ic.data<int32_t>();
  for (int64_t i = 0; i < T * k; ++i)
    MYRIAD_REQUIRE(id[i] >= -1 && id[i] < E, kValue, "route_weights: expert ", id[i], " outside [0, ", E,
                   ") (or -1 for a dropped copy)");
  Tensor p = Tensor::empty({T, k}), denom = Tensor::empty({T});
  cpu::route_weights_forward(mf(p), mf(denom), cf(s.value()), id, T, E, k, scale_factor, renormalize);
  const bool needs = needs_grad({&s});
  Var out = make_output(p, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("route_weights", {oi}, [s, oi, ic, denom, T, E, k, scale_factor, renormalize]() {
      const float* d = cf(oi->grad);
      const float* sv2 = cf(s.value());
      const int32_t* id2 = ic.data<int32_t>();
      float* ds = mf(s.grad_buffer());
      for (int64_t t = 0; t < T; ++t) {
        const float S = cf(denom)[t];
        float dot = 0.0f;  // sum_j dp_j s_j over served copies
        for (int64_t j = 0; j < k; ++j)
          if (id2[t * k + j] >= 0) dot += d[t * k + j] * sv2[t * E + id2[t * k + j]];
        for (int64_t j = 0; j < k; ++j) {
          if (id2[t * k + j] < 0) continue;
          float g = scale_factor * d[t * k + j] / S;
          if (renormalize) g -= scale_factor * dot / (S * S);
          ds[t * E + id2[t * k + j]] += g;
        }
      }
    });
  }
  return out;
}

Var embedding(const Var& table, const Tensor& ids) {
  require_cpu("embedding", {&table.value(), &ids});
  MYRIAD_REQUIRE(table.value().ndim() == 2 && ids.dtype() == DType::kI64, kShape, "embedding: table ",
                 shape_str(table.shape()), " must be [V, D] and ids I64, got ", dtype_name(ids.dtype()));
  const int64_t V = table.shape()[0], D = table.shape()[1], T = ids.numel();
  Shape os = ids.shape();
  os.push_back(D);
  Tensor y = Tensor::empty(os);
  Tensor idc = ids.contiguous();
  cpu::embedding_forward(mf(y), cf(table.value()), idc.data<int64_t>(), T, V, D);
  const bool needs = needs_grad({&table});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("embedding", {oi}, [table, oi, idc, T, V, D]() mutable {
      cpu::embedding_backward(mf(table.grad_buffer()), cf(oi->grad), idc.data<int64_t>(), T, V, D);
    });
  }
  return out;
}

Var gather_rows(const Var& src, const Tensor& idx) {
  require_cpu("gather_rows", {&src.value(), &idx});
  MYRIAD_REQUIRE(src.value().ndim() == 2 && idx.dtype() == DType::kI32 && idx.ndim() == 1, kShape, "gather_rows: src ",
                 shape_str(src.shape()), " must be [m, N] and idx I32 [n], got ", dtype_name(idx.dtype()), " ",
                 shape_str(idx.shape()));
  const int64_t m = src.shape()[0], N = src.shape()[1], n = idx.numel();
  Tensor y = Tensor::empty({n, N});
  Tensor ic = idx.contiguous();
  cpu::gather_rows(mf(y), cf(src.value()), ic.data<int32_t>(), n, m, N);
  const bool needs = needs_grad({&src});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("gather_rows", {oi}, [src, oi, ic, n, m, N]() mutable {
      cpu::scatter_add_rows(mf(src.grad_buffer()), cf(oi->grad), ic.data<int32_t>(), nullptr, n, m, N);
    });
  }
  return out;
}

Var scatter_add_rows(int64_t rows, const Var& src, const Tensor& idx, const Var& weights) {
  require_cpu("scatter_add_rows", {&src.value(), &idx});
  MYRIAD_REQUIRE(src.value().ndim() == 2 && idx.dtype() == DType::kI32 && idx.shape() == Shape{src.shape()[0]}, kShape,
                 "scatter_add_rows: src ", shape_str(src.shape()), " needs I32 indices [", src.shape()[0], "], got ",
                 dtype_name(idx.dtype()), " ", shape_str(idx.shape()));
  if (weights.defined())
    MYRIAD_REQUIRE(weights.shape() == Shape{src.shape()[0]}, kShape, "scatter_add_rows: weights ",
                   shape_str(weights.shape()), " should be [", src.shape()[0], "]");
  const int64_t n = src.shape()[0], N = src.shape()[1];
  Tensor y = Tensor::zeros({rows, N});
  Tensor ic = idx.contiguous();
  cpu::scatter_add_rows(mf(y), cf(src.value()), ic.data<int32_t>(), weights.defined() ? cf(weights.value()) : nullptr,
                        n, rows, N);
  const bool needs = needs_grad({&src, &weights});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("scatter_add_rows", {oi}, [src, weights, oi, ic, n, rows, N]() mutable {
      Tensor ds = src.requires_grad() ? src.grad_buffer() : Tensor::zeros(src.shape());
      float* dw = weights.requires_grad() ? mf(weights.grad_buffer()) : nullptr;
      cpu::scatter_add_rows_backward(mf(ds), dw, cf(oi->grad), cf(src.value()), ic.data<int32_t>(),
                                     weights.defined() ? cf(weights.value()) : nullptr, n, rows, N);
    });
  }
  return out;
}

}  // namespace myriad::ag
