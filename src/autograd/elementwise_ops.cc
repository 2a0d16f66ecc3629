// Elementwise ops with broadcasting (add, mul), scale, sum, unary activations, SiTU-GLU.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/op_support.h"

namespace myriad::ag {

namespace {

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
  const Device dev = dout.device();
  float* g = mf(grad_in);
  const float* d = cf(dout);
  const int64_t n = dout.numel();
  if (in_shape == out) {
    ops::axpy(dev, g, d, 1.0f, n);
    return;
  }
  if (!in_shape.empty() && !out.empty() && in_shape.back() == out.back() && shape_numel(in_shape) == out.back()) {
    ops::sum_rows_accumulate(dev, g, d, n / std::max<int64_t>(out.back(), 1), out.back());  // a row vector
    return;
  }
  const Shape st = broadcast_strides(in_shape, out);
  ops::broadcast_reduce_accumulate(dev, g, st.data(), d, out.data(), int(out.size()));
}

Var binary(Binary op, const Var& a, const Var& b) {
  const char* name = op == Binary::kAdd ? "add" : "mul";
  const Device dev = op_device(name, {&a.value(), &b.value()});
  require_f32(name, a.value(), "a");
  require_f32(name, b.value(), "b");
  const Shape out_shape = broadcast_shape(name, a.shape(), b.shape());
  Tensor y = Tensor::empty(out_shape, DType::kF32, dev);
  const Shape sa = broadcast_strides(a.shape(), out_shape), sb = broadcast_strides(b.shape(), out_shape);
  ops::binary_forward(dev, op, mf(y), cf(a.value()), sa.data(), cf(b.value()), sb.data(), out_shape.data(),
                      int(out_shape.size()));
  const bool needs = needs_grad({&a, &b});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record(name, {oi}, [op, a, b, oi, out_shape, dev]() mutable {
      const Tensor& dy = oi->grad;
      for (int side = 0; side < 2; ++side) {
        const Var& self = side == 0 ? a : b;
        const Var& other = side == 0 ? b : a;
        if (!self.requires_grad()) continue;
        if (op == Binary::kAdd) {
          accumulate_reduced(self.grad_buffer(), dy, self.shape());
        } else {
          Tensor t = Tensor::empty(out_shape, DType::kF32, dev);
          const Shape cs = contiguous_strides(out_shape), so = broadcast_strides(other.shape(), out_shape);
          ops::binary_forward(dev, Binary::kMul, mf(t), cf(dy), cs.data(), cf(other.value()), so.data(),
                              out_shape.data(), int(out_shape.size()));
          accumulate_reduced(self.grad_buffer(), t, self.shape());
        }
      }
    });
  }
  return out;
}

}  // namespace

Var add(const Var& a, const Var& b) {
  return binary(Binary::kAdd, a, b);
}

Var mul(const Var& a, const Var& b) {
  return binary(Binary::kMul, a, b);
}

Var scale(const Var& a, float alpha) {
  const Device dev = op_device("scale", {&a.value()});
  Tensor y = Tensor::empty(a.shape(), DType::kF32, dev);
  ops::scale(dev, mf(y), cf(a.value()), alpha, y.numel());
  const bool needs = needs_grad({&a});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("scale", {oi}, [a, oi, alpha, dev]() mutable {
      ops::axpy(dev, mf(a.grad_buffer()), cf(oi->grad), alpha, oi->grad.numel());
    });
  }
  return out;
}

Var sum(const Var& a) {
  const Device dev = cpu_op_device("sum", {&a.value()});
  Tensor y = Tensor::empty({});
  mf(y)[0] = float(ops::sum_all(dev, cf(a.value()), a.value().numel()));
  const bool needs = needs_grad({&a});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("sum", {oi}, [a, oi, dev]() mutable {
      Tensor& g = a.grad_buffer();
      const int64_t n = g.numel(), one = 1, zero = 0;  // g [n] += dy (a scalar, broadcast: stride 0)
      ops::binary_forward(dev, Binary::kAdd, mf(g), cf(g), &one, cf(oi->grad), &zero, &n, 1);
    });
  }
  return out;
}

Var unary(Unary op, const Var& x) {
  const Device dev = op_device("unary", {&x.value()});
  require_f32("unary", x.value(), "x");
  Tensor y = Tensor::empty(x.shape(), DType::kF32, dev);
  ops::unary_forward(dev, op, mf(y), cf(x.value()), y.numel());
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("unary", {oi}, [op, x, oi, dev]() mutable {
      ops::unary_backward(dev, op, mf(x.grad_buffer()), cf(oi->grad), cf(x.value()), oi->grad.numel());
    });
  }
  return out;
}

Var situ_glu(const Var& g, const Var& u, SituParams p) {
  const Device dev = op_device("situ_glu", {&g.value(), &u.value()});
  MYRIAD_REQUIRE(g.shape() == u.shape() && g.value().ndim() >= 1, kShape, "situ_glu: gate ", shape_str(g.shape()),
                 " and up ", shape_str(u.shape()), " must have the same shape");
  const int64_t F = g.shape().back(), rows = rows_of(g.shape());
  Tensor y = Tensor::empty(g.shape(), DType::kF32, dev);
  ops::situ_glu_forward(dev, mf(y), F, cf(g.value()), F, cf(u.value()), F, rows, F, p);
  const bool needs = needs_grad({&g, &u});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("situ_glu", {oi}, [g, u, oi, p, F, rows, dev]() mutable {
      // Both gradients are needed by the fused kernel; a side that needs none gets a scratch buffer.
      Tensor dg = g.requires_grad() ? g.grad_buffer() : Tensor::zeros(g.shape(), DType::kF32, dev);
      Tensor du = u.requires_grad() ? u.grad_buffer() : Tensor::zeros(u.shape(), DType::kF32, dev);
      ops::situ_glu_backward(dev, mf(dg), F, mf(du), F, cf(oi->grad), F, cf(g.value()), F, cf(u.value()), F, rows, F,
                             p);
    });
  }
  return out;
}

}  // namespace myriad::ag
