// Normalisations and softmaxes: RMSNorm (plain and gated), L2 norm, softmax, log-softmax.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/op_support.h"

namespace myriad::ag {

namespace {
Var rmsnorm_impl(const Var& x, const Var& w, const Var* gate, float eps) {
  const Device dev = op_device("rmsnorm", {&x.value(), &w.value(), gate ? &gate->value() : &w.value()});
  const int64_t N = x.value().ndim() ? x.shape().back() : 1;
  MYRIAD_REQUIRE(x.value().ndim() >= 1 && w.shape() == Shape{N}, kShape, "rmsnorm: weight ", shape_str(w.shape()),
                 " does not match the last dim of input ", shape_str(x.shape()));
  if (gate)
    MYRIAD_REQUIRE(gate->shape() == x.shape(), kShape, "rmsnorm_gated: gate ", shape_str(gate->shape()),
                   " differs from input ", shape_str(x.shape()));
  const int64_t rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape(), DType::kF32, dev), rstd = Tensor::empty({rows}, DType::kF32, dev);
  ops::rmsnorm_forward(dev, mf(y), mf(rstd), cf(x.value()), cf(w.value()), gate ? cf(gate->value()) : nullptr, rows, N,
                       eps);
  const bool needs = needs_grad({&x, &w, gate});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Var gv = gate ? *gate : Var();
    Tape::current().record("rmsnorm", {oi}, [x, w, gv, oi, rstd, rows, N, dev]() mutable {
      // The fused kernel writes every gradient; a side that needs none gets a scratch buffer.
      Tensor dx = x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape(), DType::kF32, dev);
      Tensor dw = w.requires_grad() ? w.grad_buffer() : Tensor::zeros(w.shape(), DType::kF32, dev);
      Tensor dg;
      if (gv.defined()) dg = gv.requires_grad() ? gv.grad_buffer() : Tensor::zeros(gv.shape(), DType::kF32, dev);
      ops::rmsnorm_backward(dev, mf(dx), mf(dw), gv.defined() ? mf(dg) : nullptr, cf(oi->grad), cf(x.value()),
                            cf(w.value()), gv.defined() ? cf(gv.value()) : nullptr, cf(rstd), rows, N);
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

Var attn_res_read(const std::vector<Var>& cands, const Var& norm, const Var& proj, float eps) {
  MYRIAD_REQUIRE(!cands.empty(), kShape, "attn_res_read: no candidates");
  const Shape& shape = cands[0].shape();
  MYRIAD_REQUIRE(shape.size() == 2, kShape, "attn_res_read: candidates must be [T, D], got ", shape_str(shape));
  const int64_t T = shape[0], D = shape[1], C = int64_t(cands.size());
  for (const Var& c : cands)
    MYRIAD_REQUIRE(c.shape() == shape, kShape, "attn_res_read: candidate ", shape_str(c.shape()), " differs from ",
                   shape_str(shape));
  MYRIAD_REQUIRE(norm.value().numel() == D && proj.value().numel() == D, kShape, "attn_res_read: norm ",
                 shape_str(norm.shape()), " and proj ", shape_str(proj.shape()), " must hold D = ", D, " values");
  const Device dev = cpu_op_device("attn_res_read", {&norm.value(), &proj.value()});
  for (const Var& c : cands) (void)cpu_op_device("attn_res_read", {&c.value()});
  Tensor u = Tensor::empty({D});  // the score weight norm * proj
  for (int64_t j = 0; j < D; ++j) mf(u)[j] = cf(norm.value())[j] * cf(proj.value())[j];
  std::vector<const float*> vp;
  for (const Var& c : cands) vp.push_back(cf(c.value()));
  Tensor out = Tensor::empty({T, D}), p = Tensor::empty({T, C}), r = Tensor::empty({T, C});
  ops::attn_res_read_forward(dev, mf(out), mf(p), mf(r), vp.data(), C, T, D, cf(u), eps);
  bool needs = needs_grad({&norm, &proj});
  for (const Var& c : cands) needs = needs || needs_grad({&c});
  Var y = make_output(out, needs);
  if (needs) {
    auto oi = y.impl();
    Tape::current().record(
        "attn_res_read", {oi}, [cands = std::vector<Var>(cands), norm, proj, u, p, r, oi, T, D, C, dev]() mutable {
          std::vector<const float*> v;
          std::vector<float*> dv;
          for (Var& c : cands) {
            v.push_back(cf(c.value()));
            dv.push_back(c.requires_grad() ? mf(c.grad_buffer()) : nullptr);
          }
          Tensor du = Tensor::zeros({D});
          ops::attn_res_read_backward(dev, dv.data(), mf(du), cf(oi->grad), v.data(), cf(p), cf(r), C, T, D, cf(u));
          // u = norm * proj: each weight's gradient is du times the other
          if (norm.requires_grad()) {
            float* g = mf(norm.grad_buffer());
            for (int64_t j = 0; j < D; ++j) g[j] += cf(du)[j] * cf(proj.value())[j];
          }
          if (proj.requires_grad()) {
            float* g = mf(proj.grad_buffer());
            for (int64_t j = 0; j < D; ++j) g[j] += cf(du)[j] * cf(norm.value())[j];
          }
        });
  }
  return y;
}

Var l2norm(const Var& x, float eps) {
  const Device dev = cpu_op_device("l2norm", {&x.value()});
  const int64_t N = x.shape().back(), rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape()), rn = Tensor::empty({rows});
  ops::l2norm_forward(dev, mf(y), mf(rn), cf(x.value()), rows, N, eps);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("l2norm", {oi}, [x, oi, rn, rows, N, dev]() mutable {
      ops::l2norm_backward(dev, mf(x.grad_buffer()), cf(oi->grad), cf(oi->value), cf(rn), rows, N);
    });
  }
  return out;
}

namespace {
Var softmax_impl(const Var& x, bool log) {
  const Device dev = op_device("softmax", {&x.value()});
  const int64_t N = x.shape().back(), rows = rows_of(x.shape());
  Tensor y = Tensor::empty(x.shape(), DType::kF32, dev);
  (log ? ops::log_softmax_forward : ops::softmax_forward)(dev, mf(y), cf(x.value()), rows, N);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record(log ? "log_softmax" : "softmax", {oi}, [x, oi, rows, N, log, dev]() mutable {
      (log ? ops::log_softmax_backward : ops::softmax_backward)(dev, mf(x.grad_buffer()), cf(oi->grad), cf(oi->value),
                                                                rows, N);
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

}  // namespace myriad::ag
