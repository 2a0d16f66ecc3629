// Slicing, concatenation and row gathers: slices and concats (last axis, rows), embedding, gather and weighted scatter
// of rows, MoE route weights.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/op_support.h"

namespace myriad::ag {

Var slice_last(const Var& x, int64_t start, int64_t end) {
  const Device dev = op_device("slice_last", {&x.value()});
  MYRIAD_REQUIRE(x.value().ndim() >= 1 && 0 <= start && start <= end && end <= x.shape().back(), kShape,
                 "slice_last: [", start, ", ", end, ") out of range for ", shape_str(x.shape()));
  const int64_t N = x.shape().back(), rows = rows_of(x.shape()), w = end - start;
  Shape os = x.shape();
  os.back() = w;
  Tensor y = Tensor::empty(os, DType::kF32, dev);
  ops::copy_rows(dev, mf(y), w, cf(x.value()) + start, N, rows, w, false);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("slice_last", {oi}, [x, oi, rows, N, start, w, dev]() {
      ops::copy_rows(dev, mf(x.grad_buffer()) + start, N, cf(oi->grad), w, rows, w, true);
    });
  }
  return out;
}

Var concat_last(const std::vector<Var>& parts) {
  MYRIAD_REQUIRE(!parts.empty(), kShape, "concat_last: no parts");
  const Device dev = op_device("concat_last", {&parts[0].value()});
  Shape lead(parts[0].shape().begin(), parts[0].shape().end() - 1);
  int64_t N = 0;
  for (const Var& p : parts) {
    op_device("concat_last", {&parts[0].value(), &p.value()});
    const Shape pl(p.shape().begin(), p.shape().end() - 1);
    MYRIAD_REQUIRE(pl == lead, kShape, "concat_last: part ", shape_str(p.shape()), " does not match ",
                   shape_str(parts[0].shape()), " in the leading dims");
    N += p.shape().back();
  }
  const int64_t rows = shape_numel(lead);
  Shape os = lead;
  os.push_back(N);
  Tensor y = Tensor::empty(os, DType::kF32, dev);
  int64_t off = 0;
  bool needs = false;
  for (const Var& p : parts) {
    const int64_t w = p.shape().back();
    ops::copy_rows(dev, mf(y) + off, N, cf(p.value()), w, rows, w, false);
    off += w;
    needs = needs || needs_grad({&p});
  }
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("concat_last", {oi}, [parts, oi, rows, N, dev]() {
      int64_t o = 0;
      for (const Var& p : parts) {
        const int64_t w = p.shape().back();
        if (p.requires_grad()) ops::copy_rows(dev, mf(p.grad_buffer()), w, cf(oi->grad) + o, N, rows, w, true);
        o += w;
      }
    });
  }
  return out;
}

Var slice_rows(const Var& x, int64_t start, int64_t end) {
  MYRIAD_REQUIRE(x.value().ndim() == 2 && 0 <= start && start <= end && end <= x.shape()[0], kShape, "slice_rows: [",
                 start, ", ", end, ") out of range for ", shape_str(x.shape()));
  const Device dev = op_device("slice_rows", {&x.value()});
  const int64_t N = x.shape()[1];
  Tensor y = x.value().slice(0, start, end).contiguous();  // rows are contiguous: a view
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("slice_rows", {oi}, [x, oi, start, N, dev]() {
      ops::axpy(dev, mf(x.grad_buffer()) + start * N, cf(oi->grad), 1.0f, oi->grad.numel());
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
  const Device dev = parts.empty() ? Device::kCPU : op_device("concat_rows", {&parts[0].value()});
  for (const Var& p : parts) op_device("concat_rows", {&parts[0].value(), &p.value()});
  Tensor y = Tensor::empty({n, N}, DType::kF32, dev);
  int64_t off = 0;
  for (const Var& p : parts) {
    ops::copy_rows(dev, mf(y) + off * N, N, cf(p.value()), N, p.shape()[0], N, false);
    off += p.shape()[0];
  }
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("concat_rows", {oi}, [parts, oi, N, dev]() {
      int64_t o = 0;
      for (const Var& p : parts) {
        if (p.requires_grad()) ops::axpy(dev, mf(p.grad_buffer()), cf(oi->grad) + o * N, 1.0f, p.value().numel());
        o += p.shape()[0];
      }
    });
  }
  return out;
}

Var embedding(const Var& table, const Tensor& ids) {
  const Device dev = cpu_op_device("embedding", {&table.value(), &ids});
  MYRIAD_REQUIRE(table.value().ndim() == 2 && ids.dtype() == DType::kI64, kShape, "embedding: table ",
                 shape_str(table.shape()), " must be [V, D] and ids I64, got ", dtype_name(ids.dtype()));
  const int64_t V = table.shape()[0], D = table.shape()[1], T = ids.numel();
  Shape os = ids.shape();
  os.push_back(D);
  Tensor y = Tensor::empty(os);
  Tensor idc = ids.contiguous();
  ops::embedding_forward(dev, mf(y), cf(table.value()), idc.data<int64_t>(), T, V, D);
  const bool needs = needs_grad({&table});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("embedding", {oi}, [table, oi, idc, T, V, D, dev]() mutable {
      ops::embedding_backward(dev, mf(table.grad_buffer()), cf(oi->grad), idc.data<int64_t>(), T, V, D);
    });
  }
  return out;
}

Var gather_rows(const Var& src, const Tensor& idx) {
  const Device dev = cpu_op_device("gather_rows", {&src.value(), &idx});
  MYRIAD_REQUIRE(src.value().ndim() == 2 && idx.dtype() == DType::kI32 && idx.ndim() == 1, kShape, "gather_rows: src ",
                 shape_str(src.shape()), " must be [m, N] and idx I32 [n], got ", dtype_name(idx.dtype()), " ",
                 shape_str(idx.shape()));
  const int64_t m = src.shape()[0], N = src.shape()[1], n = idx.numel();
  Tensor y = Tensor::empty({n, N});
  Tensor ic = idx.contiguous();
  ops::gather_rows(dev, mf(y), cf(src.value()), ic.data<int32_t>(), n, m, N);
  const bool needs = needs_grad({&src});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("gather_rows", {oi}, [src, oi, ic, n, m, N, dev]() mutable {
      ops::scatter_add_rows(dev, mf(src.grad_buffer()), cf(oi->grad), ic.data<int32_t>(), nullptr, n, m, N);
    });
  }
  return out;
}

Var scatter_add_rows(int64_t rows, const Var& src, const Tensor& idx, const Var& weights) {
  const Device dev = cpu_op_device("scatter_add_rows", {&src.value(), &idx});
  MYRIAD_REQUIRE(src.value().ndim() == 2 && idx.dtype() == DType::kI32 && idx.shape() == Shape{src.shape()[0]}, kShape,
                 "scatter_add_rows: src ", shape_str(src.shape()), " needs I32 indices [", src.shape()[0], "], got ",
                 dtype_name(idx.dtype()), " ", shape_str(idx.shape()));
  if (weights.defined())
    MYRIAD_REQUIRE(weights.shape() == Shape{src.shape()[0]}, kShape, "scatter_add_rows: weights ",
                   shape_str(weights.shape()), " should be [", src.shape()[0], "]");
  const int64_t n = src.shape()[0], N = src.shape()[1];
  Tensor y = Tensor::zeros({rows, N});
  Tensor ic = idx.contiguous();
  ops::scatter_add_rows(dev, mf(y), cf(src.value()), ic.data<int32_t>(),
                        weights.defined() ? cf(weights.value()) : nullptr, n, rows, N);
  const bool needs = needs_grad({&src, &weights});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("scatter_add_rows", {oi}, [src, weights, oi, ic, n, rows, N, dev]() mutable {
      Tensor ds = src.requires_grad() ? src.grad_buffer() : Tensor::zeros(src.shape());
      float* dw = weights.requires_grad() ? mf(weights.grad_buffer()) : nullptr;
      ops::scatter_add_rows_backward(dev, mf(ds), dw, cf(oi->grad), cf(src.value()), ic.data<int32_t>(),
                                     weights.defined() ? cf(weights.value()) : nullptr, n, rows, N);
    });
  }
  return out;
}

Var route_weights(const Var& s, const Tensor& idx, float scale_factor, bool renormalize) {
  const Device dev = cpu_op_device("route_weights", {&s.value(), &idx});
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
  ops::route_weights_forward(dev, mf(p), mf(denom), cf(s.value()), id, T, E, k, scale_factor, renormalize);
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

}  // namespace myriad::ag
