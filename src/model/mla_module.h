// The gated MLA mixer (docs/design.md §1.3), written once around its attention core. Training (Transformer, on the
// tape) and inference (MlaDecoder, without it, over each sequence's latent cache) call mla_forward with their own
// execution X, which says how each step runs.
//
// Per token, x [D] the normed input, H heads:
//   q = W_qb rmsnorm(W_qa x) (q_lora_rank; W_q x without it)      [H, Dn + Dr] = [q_nope | q_pe] per head
//   [c_kv | k_pe] = W_kva x, c_kv normed (kv_a_layernorm, eps kMlaLatentNormEps)   the latent row MLA caches
//   q_pe, k_pe rotated at the token's position when RoPE is on (mla_use_nope false; YaRN tables, model/rope.h)
//   q times mla_query_scale(position) when the config asks for log-n scaling (model/rope.h)
//   attention: scores (q_nope . k_nope + q_pe . k_pe) * mla_score_scale, causal softmax, values, where
//   [k_nope | v] = W_kvb c_kv per head. The core is the execution's: training materialises per-head K and V (the
//   naive form); inference keeps only the latent rows and absorbs W_kvb into the query and the output (the
//   absorbed form, infer/mla_decoder.h), the same numbers to f32 rounding.
//   out = W_o (attn * sigmoid(W_g x))   (the output gate when mla_use_output_gate)
//
// An execution X provides Value, Weights (members q_a_proj, q_a_layernorm, q_b_proj, q_proj, kv_a_proj,
// kv_a_layernorm, g_proj, o_proj), Latents, and the steps
//   Value linear(x, w), Value latent_norm(x, w) (rmsnorm, eps kMlaLatentNormEps), Value mul(a, b),
//   Value sigmoid(x), Value scale_queries(q) (each row times mla_query_scale at its token's position),
//   Latents latents(kv_a, kv_a_layernorm) (normed c_kv and raw k_pe, of every token the attention reads),
//   Value attend(q, latents) (RoPE, the scores, softmax and values: [T, H Dv]).
#pragma once

#include "model/config.h"

namespace myriad {

template <class X>
typename X::Value mla_forward(X& x, const typename X::Weights& w, const typename X::Value& in, const ModelConfig& c) {
  using Value = typename X::Value;
  Value q = c.q_lora_rank ? x.linear(x.latent_norm(x.linear(in, w.q_a_proj), w.q_a_layernorm), w.q_b_proj)
                          : x.linear(in, w.q_proj);
  if (c.mla_logn_base) q = x.scale_queries(q);
  Value attn = x.attend(q, x.latents(x.linear(in, w.kv_a_proj), w.kv_a_layernorm));
  if (c.mla_use_output_gate) attn = x.mul(attn, x.sigmoid(x.linear(in, w.g_proj)));
  return x.linear(attn, w.o_proj);
}

}  // namespace myriad
