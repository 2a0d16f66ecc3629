// The sequence mixers' ops: short convolution, RoPE, attention, KDA and its gate; the fused cross entropy.
#include <algorithm>
#include <cmath>

#include "autograd/functions.h"
#include "autograd/op_support.h"

namespace myriad::ag {

std::pair<Var, Tensor> conv1d(const Var& x, const Var& w, const Var& state_in) {
  const Device dev = cpu_op_device("conv1d", {&x.value(), &w.value()});
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
  ops::conv1d_forward(dev, mf(y), mf(st), cf(x.value()), cf(w.value()), sp, B, T, C, W);
  const bool needs = needs_grad({&x, &w, &state_in});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("conv1d", {oi}, [x, w, state_in, oi, B, T, C, W, dev]() mutable {
      Tensor dx = x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape());
      Tensor dw = w.requires_grad() ? w.grad_buffer() : Tensor::zeros(w.shape());
      float* ds = state_in.requires_grad() ? mf(state_in.grad_buffer()) : nullptr;
      ops::conv1d_backward(dev, mf(dx), mf(dw), ds, cf(oi->grad), cf(x.value()), cf(w.value()),
                           state_in.defined() ? cf(state_in.value()) : nullptr, B, T, C, W);
    });
  }
  return {out, st};
}

Var rope(const Var& x, const Tensor& cos, const Tensor& sin, RopeLayout layout) {
  const Device dev = cpu_op_device("rope", {&x.value(), &cos, &sin});
  MYRIAD_REQUIRE(x.value().ndim() == 3, kShape, "rope: input must be [T, H, N], got ", shape_str(x.shape()));
  const int64_t T = x.shape()[0], H = x.shape()[1], N = x.shape()[2];
  MYRIAD_REQUIRE(layout.rot % 2 == 0 && layout.col0 >= 0 && layout.col0 + layout.rot <= N, kShape,
                 "rope: rotated columns [", layout.col0, ", ", layout.col0 + layout.rot,
                 ") must be an even-sized range inside the row of ", N);
  MYRIAD_REQUIRE(cos.shape() == (Shape{T, layout.rot / 2}) && sin.shape() == cos.shape(), kShape, "rope: cos/sin ",
                 shape_str(cos.shape()), " should be ", shape_str({T, layout.rot / 2}));
  Tensor y = Tensor::empty(x.shape());
  ops::rope_forward(dev, mf(y), cf(x.value()), cf(cos), cf(sin), T, H, N, layout);
  const bool needs = needs_grad({&x});
  Var out = make_output(y, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("rope", {oi}, [x, oi, cos, sin, T, H, N, layout, dev]() mutable {
      ops::rope_backward(dev, mf(x.grad_buffer()), cf(oi->grad), cf(cos), cf(sin), T, H, N, layout);
    });
  }
  return out;
}

namespace {

// q [B, T, H, Dk], k [B, T, Hk, Dk], v [B, T, Hk, Dv] with H a multiple of Hk, or kShape naming the op.
AttentionShape attention_shape(const char* op, const Var& q, const Var& k, const Var& v, float scale, bool causal) {
  const bool ok = q.value().ndim() == 4 && k.value().ndim() == 4 && v.value().ndim() == 4 &&
                  k.shape()[0] == q.shape()[0] && v.shape()[0] == q.shape()[0] && k.shape()[1] == q.shape()[1] &&
                  v.shape()[1] == q.shape()[1] && k.shape()[3] == q.shape()[3] && v.shape()[2] == k.shape()[2] &&
                  k.shape()[2] > 0 && q.shape()[2] % k.shape()[2] == 0;
  MYRIAD_REQUIRE(ok, kShape, op, ": q ", shape_str(q.shape()), " k ", shape_str(k.shape()), " v ", shape_str(v.shape()),
                 " must be [B, T, H, Dk], [B, T, Hk, Dk], [B, T, Hk, Dv] with H a multiple of Hk");
  return {q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3], scale, causal};
}

}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, float scale_factor, bool causal) {
  const Device dev = cpu_op_device("attention", {&q.value(), &k.value(), &v.value()});
  const AttentionShape s = attention_shape("attention", q, k, v, scale_factor, causal);
  Tensor o = Tensor::empty({s.B, s.T, s.H, s.Dv}), lse = Tensor::empty({s.B, s.H, s.T});
  ops::attention_forward(dev, mf(o), mf(lse), cf(q.value()), cf(k.value()), cf(v.value()), s);
  const bool needs = needs_grad({&q, &k, &v});
  Var out = make_output(o, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("attention", {oi}, [q, k, v, oi, lse, s, dev]() mutable {
      Tensor dq = q.requires_grad() ? q.grad_buffer() : Tensor::zeros(q.shape());
      Tensor dk = k.requires_grad() ? k.grad_buffer() : Tensor::zeros(k.shape());
      Tensor dv = v.requires_grad() ? v.grad_buffer() : Tensor::zeros(v.shape());
      ops::attention_backward(dev, mf(dq), mf(dk), mf(dv), cf(oi->grad), cf(oi->value), cf(lse), cf(q.value()),
                              cf(k.value()), cf(v.value()), s);
    });
  }
  return out;
}

Var sparse_attention(const Var& q, const Var& k, const Var& v, const Tensor& blocks, int64_t block,
                     int64_t local_blocks, float scale_factor) {
  const Device dev = cpu_op_device("sparse_attention", {&q.value(), &k.value(), &v.value(), &blocks});
  const AttentionShape a = attention_shape("sparse_attention", q, k, v, scale_factor, true);
  MYRIAD_REQUIRE(blocks.dtype() == DType::kI32 && blocks.ndim() == 3 && blocks.shape()[0] == q.shape()[0] &&
                     blocks.shape()[1] == q.shape()[1] && block > 0 && local_blocks >= 0,
                 kShape, "sparse_attention: blocks ", dtype_name(blocks.dtype()), " ", shape_str(blocks.shape()),
                 " must be I32 [", q.shape()[0], ", ", q.shape()[1], ", top_k]; block ", block, " > 0, local_blocks ",
                 local_blocks, " >= 0");
  const int64_t top_k = blocks.shape()[2];
  // Each chosen block must lie wholly before its query's local keys (else a key would be read twice or be a
  // future one): checked here, once, so the kernels can trust it.
  const Tensor bl = blocks.contiguous();
  const int32_t* bp = bl.data<int32_t>();
  for (int64_t bi = 0; bi < q.shape()[0] * q.shape()[1]; ++bi) {
    const int64_t first = sparse_first_local_block(block, local_blocks, bi % q.shape()[1]);
    int64_t prev = -1;
    for (int64_t c = 0; c < top_k && bp[bi * top_k + c] >= 0; ++c) {
      const int64_t b = bp[bi * top_k + c];
      MYRIAD_REQUIRE(b > prev && b < first, kValue, "sparse_attention: query ", bi % q.shape()[1], " reads block ", b,
                     "; its blocks must ascend and lie before its first local block ", first);
      prev = b;
    }
  }
  const SparseAttentionShape s{a, block, local_blocks, top_k};
  Tensor o = Tensor::empty({s.attn.B, s.attn.T, s.attn.H, s.attn.Dv}),
         lse = Tensor::empty({s.attn.B, s.attn.H, s.attn.T});
  ops::sparse_attention_forward(dev, mf(o), mf(lse), cf(q.value()), cf(k.value()), cf(v.value()), bp, s);
  const bool needs = needs_grad({&q, &k, &v});
  Var out = make_output(o, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("sparse_attention", {oi}, [q, k, v, oi, lse, bl, s, dev]() mutable {
      Tensor dq = q.requires_grad() ? q.grad_buffer() : Tensor::zeros(q.shape());
      Tensor dk = k.requires_grad() ? k.grad_buffer() : Tensor::zeros(k.shape());
      Tensor dv = v.requires_grad() ? v.grad_buffer() : Tensor::zeros(v.shape());
      ops::sparse_attention_backward(dev, mf(dq), mf(dk), mf(dv), cf(oi->grad), cf(oi->value), cf(lse), cf(q.value()),
                                     cf(k.value()), cf(v.value()), bl.data<int32_t>(), s);
    });
  }
  return out;
}

Var cross_entropy(const Var& h, const Var& W, const Tensor& targets, int64_t ignore_index, const Tensor* weights,
                  Tensor* nll) {
  const Device dev = cpu_op_device("cross_entropy", {&h.value(), &W.value(), &targets});
  MYRIAD_REQUIRE(h.value().ndim() == 2 && W.value().ndim() == 2 && h.shape()[1] == W.shape()[1], kShape,
                 "cross_entropy: hidden ", shape_str(h.shape()), " ([T, D]) does not match lm_head ",
                 shape_str(W.shape()), " ([V, D])");
  MYRIAD_REQUIRE(targets.dtype() == DType::kI64 && targets.shape() == Shape{h.shape()[0]}, kShape,
                 "cross_entropy: targets must be I64 [", h.shape()[0], "], got ", dtype_name(targets.dtype()), " ",
                 shape_str(targets.shape()));
  Tensor wt;
  if (weights) {
    MYRIAD_REQUIRE(weights->dtype() == DType::kF32 && weights->shape() == Shape{h.shape()[0]}, kShape,
                   "cross_entropy: weights must be F32 [", h.shape()[0], "], got ", dtype_name(weights->dtype()), " ",
                   shape_str(weights->shape()));
    wt = weights->contiguous();
  }
  const int64_t T = h.shape()[0], D = h.shape()[1], V = W.shape()[0];
  Tensor loss = Tensor::empty({}), lse = Tensor::empty({T});
  Tensor tg = targets.contiguous();
  if (nll) *nll = Tensor::empty({T});
  const float* w = weights ? cf(wt) : nullptr;
  ops::cross_entropy_forward(dev, mf(loss), mf(lse), cf(h.value()), cf(W.value()), tg.data<int64_t>(), T, D, V,
                             ignore_index, w, nll ? mf(*nll) : nullptr);
  const bool needs = needs_grad({&h, &W});
  Var out = make_output(loss, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("cross_entropy", {oi}, [h, W, oi, lse, tg, wt, T, D, V, ignore_index, dev]() mutable {
      Tensor dh = h.requires_grad() ? h.grad_buffer() : Tensor::zeros(h.shape());
      Tensor dW = W.requires_grad() ? W.grad_buffer() : Tensor::zeros(W.shape());
      ops::cross_entropy_backward(dev, mf(dh), mf(dW), cf(oi->grad)[0], cf(h.value()), cf(W.value()),
                                  tg.data<int64_t>(), cf(lse), T, D, V, ignore_index, wt.defined() ? cf(wt) : nullptr);
    });
  }
  return out;
}

std::pair<Var, Var> kda(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, const Var& state_in,
                        int64_t chunk) {
  const Device dev = cpu_op_device("kda", {&q.value(), &k.value(), &v.value(), &g.value(), &beta.value()});
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
  const ops::KdaForm form = ops::kda_sequence_form(dev);  // the same form forward and backward
  ops::kda_sequence_forward(dev, form, mf(o), mf(st), cf(q.value()), cf(k.value()), cf(v.value()), cf(g.value()),
                            cf(beta.value()), s0, s);
  const bool needs = needs_grad({&q, &k, &v, &g, &beta, &state_in});
  Var out = make_output(o, needs), state_out = make_output(st, needs);
  if (needs) {
    auto oi = out.impl(), si = state_out.impl();
    Tape::current().record("kda", {oi, si}, [q, k, v, g, beta, state_in, oi, si, s, dev, form]() mutable {
      auto grad_or_scratch = [](const Var& x) {
        return x.requires_grad() ? x.grad_buffer() : Tensor::zeros(x.shape());
      };
      Tensor dq = grad_or_scratch(q), dk = grad_or_scratch(k), dv = grad_or_scratch(v), dg = grad_or_scratch(g),
             db = grad_or_scratch(beta);
      float* ds0 = state_in.requires_grad() ? mf(state_in.grad_buffer()) : nullptr;
      // Either output may have no gradient (e.g. the final state is unused): read zeros for it.
      Tensor dout = oi->grad.defined() ? oi->grad : Tensor::zeros(oi->value.shape());
      const float* dsout = si->grad.defined() ? cf(si->grad) : nullptr;
      ops::kda_sequence_backward(dev, form, mf(dq), mf(dk), mf(dv), mf(dg), mf(db), ds0, cf(dout), dsout, cf(q.value()),
                                 cf(k.value()), cf(v.value()), cf(g.value()), cf(beta.value()),
                                 state_in.defined() ? cf(state_in.value()) : nullptr, s);
    });
  }
  return {out, state_out};
}

Var kda_gate(const Var& f, const Var& A_log, const Var& dt_bias, float lower_bound) {
  const Device dev = cpu_op_device("kda_gate", {&f.value(), &A_log.value(), &dt_bias.value()});
  MYRIAD_REQUIRE(f.value().ndim() == 3 && A_log.shape() == Shape{f.shape()[1]} &&
                     dt_bias.shape() == Shape{f.shape()[1] * f.shape()[2]},
                 kShape, "kda_gate: f ", shape_str(f.shape()), " ([T, H, K]), A_log ", shape_str(A_log.shape()),
                 " ([H]) and dt_bias ", shape_str(dt_bias.shape()), " ([H*K]) do not agree");
  const int64_t T = f.shape()[0], H = f.shape()[1], K = f.shape()[2];
  Tensor g = Tensor::empty(f.shape());
  const float* fv = cf(f.value());
  const float* al = cf(A_log.value());
  const float* dt = cf(dt_bias.value());
  ops::kda_gate_forward(dev, mf(g), fv, al, dt, T, H, K, lower_bound);
  const bool needs = needs_grad({&f, &A_log, &dt_bias});
  Var out = make_output(g, needs);
  if (needs) {
    auto oi = out.impl();
    Tape::current().record("kda_gate", {oi}, [dev, f, A_log, dt_bias, oi, T, H, K, lower_bound]() {
      float* df = f.requires_grad() ? mf(f.grad_buffer()) : nullptr;
      float* dA = A_log.requires_grad() ? mf(A_log.grad_buffer()) : nullptr;
      float* ddt = dt_bias.requires_grad() ? mf(dt_bias.grad_buffer()) : nullptr;
      ops::kda_gate_backward(dev, df, dA, ddt, cf(oi->grad), cf(f.value()), cf(A_log.value()), cf(dt_bias.value()), T,
                             H, K, lower_bound);
    });
  }
  return out;
}

}  // namespace myriad::ag
