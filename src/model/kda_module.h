// The KDA mixer (docs/design.md §1.2), written once. Every path that runs a KDA layer calls kda_forward: training
// (Transformer, on the tape, one sequence, states from the sequence context) and inference (KdaDecoder, no tape,
// a batch of sequences each with its carried KdaState, weights possibly block-quantized). What differs between
// them is HOW each step runs, not WHAT is computed: an execution X supplies the steps, over its own value type.
//
// The mathematics, per layer, x [N, D] the normed input (H heads of K = V channels, short convs of width W):
//   q~, k~, v~ = W_q x, W_k x, W_v x                     (with f_a = W_fa x, b = W_b x, the output gate W_g x)
//   q = l2norm(silu(conv_q(q~))) / sqrt(K), k = l2norm(silu(conv_k(k~))), v = silu(conv_v(v~))   (per head)
//   g = lower_bound * sigmoid(exp(A_log) * (W_fb f_a + dt_bias))    (the per-channel log-decay, <= 0; K3)
//   g = -exp(A_log) * softplus(W_fb f_a + dt_bias)                  (lower_bound -infinity: Kimi-Linear, fla)
//   beta = sigmoid(b)
//   o = delta rule over (q, k, v, g, beta) from the state entering the rows       (ops kda_*; docs/design.md §1.2)
//   out = W_o (rmsnorm(o) * o_norm * sigmoid(W_g x))                (per head, eps rms_norm_eps; the output gate is
//                                                                    W_gb W_ga x when use_full_rank_gate is false)
//
// An execution X provides: a type X::Value; a type X::Weights with the layer's weights as members q_proj, k_proj,
// v_proj, f_a_proj, f_b_proj, b_proj, g_proj (or g_a_proj, g_b_proj), o_proj, q_conv, k_conv, v_conv, A_log,
// dt_bias, o_norm; and
//   std::array<Value, 6> project(x, {weights...})  the six products of x, in the order given
//   Value linear(x, w)
//   Value short_conv(lin, conv_weight, which)       silu(causal conv) over each sequence's rows, which 0/1/2 = q/k/v
//   Value l2norm_heads(x, eps) / Value scale(x, a) / Value sigmoid(x)
//   Value kda_gate(f, A_log, dt_bias, lower_bound)
//   Value delta_rule(q, k, v, g, beta)              the chunkwise / recurrent form over each sequence's state
//   Value gated_head_norm(o, o_norm, gate, eps)
// Values are [N, H*K]-shaped rows (beta [N, H]); an execution reshapes inside its steps as its ops need.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "model/config.h"
#include "model/constants.h"

namespace myriad {

struct KdaDims {
  int64_t heads = 0, head_dim = 0, conv_width = 0;
  float lower_bound = -5.0f;   // gate_lower_bound (-infinity: the unbounded softplus gate)
  float rms_eps = 1e-5f;       // rms_norm_eps, for the gated output norm
  bool full_rank_gate = true;  // use_full_rank_gate: W_g, else the low-rank W_gb W_ga

  static KdaDims of(const ModelConfig& c) {
    const LinearAttnConfig& la = *c.linear_attn_config;
    return {la.num_heads,          la.head_dim,          la.short_conv_kernel_size, float(la.gate_lower_bound),
            float(c.rms_norm_eps), la.use_full_rank_gate};
  }
};

template <class X>
typename X::Value kda_forward(X& x, const typename X::Weights& w, const typename X::Value& in, const KdaDims& d) {
  using Value = typename X::Value;
  const auto* gate_first = d.full_rank_gate ? &w.g_proj : &w.g_a_proj;
  const std::array<Value, 6> lin = x.project(in, {&w.q_proj, &w.k_proj, &w.v_proj, &w.f_a_proj, &w.b_proj, gate_first});
  const Value q =
      x.scale(x.l2norm_heads(x.short_conv(lin[0], w.q_conv, 0), kKdaQkL2NormEps), 1.0f / std::sqrt(float(d.head_dim)));
  const Value k = x.l2norm_heads(x.short_conv(lin[1], w.k_conv, 1), kKdaQkL2NormEps);
  const Value v = x.short_conv(lin[2], w.v_conv, 2);
  const Value g = x.kda_gate(x.linear(lin[3], w.f_b_proj), w.A_log, w.dt_bias, d.lower_bound);
  const Value beta = x.sigmoid(lin[4]);
  const Value o = x.delta_rule(q, k, v, g, beta);
  const Value gate = d.full_rank_gate ? lin[5] : x.linear(lin[5], w.g_b_proj);
  return x.linear(x.gated_head_norm(o, w.o_norm, gate, d.rms_eps), w.o_proj);
}

}  // namespace myriad
