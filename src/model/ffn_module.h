// The feed-forward modules (docs/design.md §1.5), written once: the GLU FFN (dense layers and the shared experts) and
// the latent MoE. Training (Transformer, on the tape) and inference (InferenceModel, without the tape, weights
// possibly block-quantized) call these with their own execution X, which says how each step runs.
//
// GLU FFN:    y = W_down glu(W_gate x, W_up x),   glu = SiTU-GLU, or SwiGLU silu(g) u (hidden_act "silu")
// Latent MoE: s = act(W_router x) [T, E] (sigmoid or softmax); the copies of each token go to the top-k of s + b
//             (model/routing.h: b selects, never weighs; capacity limits reroute or drop); mixture weights
//             p = scale s_chosen / (sum of the chosen s when renormalising, top_k > 1); z = W_down_latent x (the latent
//             width L; x itself without a latent); the copies, grouped by expert, go through the MoE dispatcher to the
//             experts, each a GLU FFN of width moe_intermediate_size over its rows, and come back weighted by p
//             and summed per token (u [T, L]); y = W_up_latent rmsnorm(u) (norm when latent_moe_use_norm) plus the
//             shared experts' GLU FFN of x.
//
// An execution X provides the types Value, Linear (a weight as X passes it), Glu {gate, up, down} and Moe (the
// members read below), and the steps
//   Value linear(x, w), Value glu(g, u), Value add(a, b), Value rmsnorm(x, weight, eps)
//   Value router_scores(x, w): act(W x), f32 [T, E]; const Tensor& values(v): a value's tensor (no tape)
//   Value route_weights(s, idx, scale, renormalize)
//   void routing_stats(s, selection, groups): what balancing and the metrics read (training; a no-op elsewhere)
//   ag::Var as_var(v) / Value from_var(var): across the dispatcher's interface (Vars, on the tape or not)
//   Value experts(batch, local range, moe weights, x): the local experts' GLU FFNs over their rows of the batch
//   Value shared_experts(moe weights, x): the shared experts' GLU FFN of x
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "model/config.h"
#include "model/moe_dispatch.h"
#include "model/routing.h"
#include "ops/kernels.h"

namespace myriad {

// The GLU of the FFNs and experts (ops/kernels.h GluParams): SiTU-GLU with the config's betas, or SwiGLU.
inline GluParams glu_params(const ModelConfig& c) {
  return {c.hidden_act == HiddenAct::kSilu ? GluKind::kSwiGlu : GluKind::kSitu,
          SituParams{float(c.activation_situ_beta), float(c.activation_situ_linear_beta)}};
}

template <class X>
typename X::Value glu_ffn(X& x, const typename X::Glu& w, const typename X::Value& in) {
  return x.linear(x.glu(x.linear(in, w.gate), x.linear(in, w.up)), w.down);
}

// Routing replay (RL): the experts a serving forward chose, recorded, and imposed on the training forward of the
// same tokens, so that a router whose scores nearly tie cannot send a token to other experts in training than in
// the rollout (the policy ratio would then compare two different networks). The mixture weights still come from
// this forward's scores of the imposed experts, so the router keeps its gradient.
struct RoutingTap {
  // [R, k] I32, R <= T: rows t < R go to these experts instead of the ones selected here (-1: that copy dropped).
  Tensor replay;
  // Called with the selection of every row, [T, k] I32 (after any replay).
  std::function<void(const Tensor& idx)> record;
};

// in [T, D] -> [T, D]. bias: the router's correction bias b [E] (read for topk_method "noaux_tc"; else null);
// capacity_factor: nullopt for plain top-k (serving has no capacity limit); tap: routing replay (null: none).
template <class X>
typename X::Value moe_forward(X& x, const typename X::Moe& w, const typename X::Value& in, const ModelConfig& c,
                              const float* bias, std::optional<double> capacity_factor, const MoeDispatcher& dispatcher,
                              const RoutingTap* tap = nullptr) {
  using Value = typename X::Value;
  const int64_t T = x.values(in).size(0), E = c.num_experts;
  const Value s = x.router_scores(in, w.router);
  ExpertSelection sel = select_experts(c, x.values(s), bias, capacity_factor);
  if (tap && tap->replay.defined()) replay_experts(sel, tap->replay, E);
  if (tap && tap->record) tap->record(sel.idx);
  // Mixture weights over the copies actually served (a dropped copy's share vanishes).
  const Value weights = x.route_weights(s, sel.idx, float(c.routed_scaling_factor), renormalizes_weights(c));
  const ExpertGroups groups = group_by_expert(sel.idx, E);
  x.routing_stats(s, sel, groups);
  const bool latent = c.routed_expert_hidden_size.has_value();
  const Value z = latent ? x.linear(in, w.latent_down) : in;  // [T, L]
  const ExpertBatch batch = dispatcher.dispatch(x.as_var(z), groups, x.as_var(weights));
  const Value rows = x.experts(batch, dispatcher.local_experts(E), w, in);  // [copies, L]
  Value u = x.from_var(dispatcher.combine(x.as_var(rows), batch, T));       // [T, L]
  Value y = u;
  if (latent) {
    if (c.latent_moe_use_norm) u = x.rmsnorm(u, w.latent_norm, float(c.rms_norm_eps));
    y = x.linear(u, w.latent_up);
  }
  if (c.num_shared_experts > 0) y = x.add(y, x.shared_experts(w, in));
  return y;
}

}  // namespace myriad
