// Differentiable ops on Vars: each runs the backend kernel forward and records one tape node whose backward
// calls the kernel's backward (accumulating). Shapes are checked up front; a mismatch is a kShape error
// naming the op and both shapes. CPU tensors today; CUDA tensors route to the CUDA backend where it has the
// kernel and give a clear kUnsupported error where it does not yet.
// Shape legend: T tokens, B batch, H heads, D width, V vocabulary, C channels, W conv width.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "ops/kernels.h"

namespace myriad::ag {

// a [M, K] (or [K, M] when ta) times b [K, N] (or [N, K] when tb); 3-D operands are batched over dim 0.
Var matmul(const Var& a, const Var& b, bool ta = false, bool tb = false);
// x [..., in] times w [out, in]^T -> [..., out]  (PyTorch's nn.Linear layout)
Var linear(const Var& x, const Var& w);

// A view with another shape (no copy); the gradient flows back unchanged.
Var reshape(const Var& x, const Shape& shape);

Var add(const Var& a, const Var& b);  // numpy broadcasting
Var mul(const Var& a, const Var& b);  // numpy broadcasting
Var scale(const Var& a, float alpha);
Var sum(const Var& a);  // -> [] (one element)

Var unary(Unary op, const Var& x);
inline Var silu(const Var& x) {
  return unary(Unary::kSiLU, x);
}
inline Var sigmoid(const Var& x) {
  return unary(Unary::kSigmoid, x);
}
inline Var tanh(const Var& x) {
  return unary(Unary::kTanh, x);
}
inline Var softplus(const Var& x) {
  return unary(Unary::kSoftplus, x);
}

Var situ_glu(const Var& g, const Var& u, SituParams p);  // g, u [..., F]

// RMSNorm over the last dim with weight w [N]; with gate: y = rmsnorm(x) * w * sigmoid(gate) (KDA's per-head
// output norm: x and gate [..., H, V], w [V]).
Var rmsnorm(const Var& x, const Var& w, float eps);
Var rmsnorm_gated(const Var& x, const Var& w, const Var& gate, float eps);
Var l2norm(const Var& x, float eps);
// The AttnRes read (docs/design.md §1.4) of candidates [T, D] (one or more, all of one shape) with the read's norm
// weight [D] and projection [1, D] (or [D]): softmax over the candidates of q . rmsnorm(v_c; w), the candidates
// weighted by it and summed. One tape node (ops::attn_res_read_*).
Var attn_res_read(const std::vector<Var>& cands, const Var& norm, const Var& proj, float eps);

Var softmax(const Var& x);      // over the last dim
Var log_softmax(const Var& x);  // over the last dim

// Causal depthwise conv: x [B, T, C], w [C, W]; state_in [B, W-1, C] or undefined (fresh sequence).
// Returns y [B, T, C] and the carried state [B, W-1, C] (a plain tensor: the next piece's input).
std::pair<Var, Tensor> conv1d(const Var& x, const Var& w, const Var& state_in);

// RoPE: x [T, H, N]; cos/sin [T, R/2] from rope_table.h.
Var rope(const Var& x, const Tensor& cos, const Tensor& sin, RopeLayout layout);

// Attention: q [B, T, H, Dk], k [B, T, Hk, Dk], v [B, T, Hk, Dv] -> [B, T, H, Dv]; causal (the text model) or
// bidirectional (the vision tower, one image per call).
Var attention(const Var& q, const Var& k, const Var& v, float scale, bool causal = true);
// Block-sparse causal attention (ops/kernels.h SparseAttentionShape): the same q, k, v; blocks I32 [B, T, top_k],
// the blocks each query reads beyond its local ones (chosen outside the tape: not differentiated).
Var sparse_attention(const Var& q, const Var& k, const Var& v, const Tensor& blocks, int64_t block,
                     int64_t local_blocks, float scale);
inline Var gelu_tanh(const Var& x) {
  return unary(Unary::kGeluTanh, x);
}
inline Var gelu(const Var& x) {
  return unary(Unary::kGelu, x);
}

// Fused lm_head + cross-entropy: h [T, D], W [V, D], targets [T] (i64) -> mean loss over counted targets. With
// `weights` (f32 [T], constants of any sign: RL's per-token coefficients) the sum of weights_t nll_t instead.
// `nll` (optional) receives each token's nll_t = -log p(target) (f32 [T], 0 where ignored). The backward reads
// `weights` again (the same storage), so a caller may set them after the forward from `nll`: GRPO's coefficients
// depend on the policy's own log-probabilities (rl/grpo_loss.cc); the returned loss then used the old values.
Var cross_entropy(const Var& h, const Var& W, const Tensor& targets, int64_t ignore_index = -100,
                  const Tensor* weights = nullptr, Tensor* nll = nullptr);

// Kimi Delta Attention, chunkwise: q, k, g [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; state_in [B, H, K, V]
// or undefined (zeros). Returns o [B, T, H, V] and the final state (a Var, so a following piece's gradient
// flows back through it). One tape node; its backward keeps only chunk-boundary states.
std::pair<Var, Var> kda(const Var& q, const Var& k, const Var& v, const Var& g, const Var& beta, const Var& state_in,
                        int64_t chunk = 64);

// Gradient checkpointing: runs fn(inputs) without recording; its backward recomputes fn on a tape of its own
// (with gradients) and back-propagates the output gradient through it, so the activations inside fn live
// only during its own backward. fn must be deterministic and own everything it captures.
Var checkpoint(std::function<Var(const std::vector<Var>&)> fn, const std::vector<Var>& inputs);

// Structural ops (copies; the backward adds the gradient back into place).
Var slice_last(const Var& x, int64_t start, int64_t end);   // columns [start, end) of the last dim
Var concat_last(const std::vector<Var>& parts);             // along the last dim; leading dims must agree
Var slice_rows(const Var& x, int64_t start, int64_t end);   // rows [start, end) of a 2-D [n, N]
Var concat_rows(const std::vector<Var>& parts, int64_t N);  // 2-D parts [n_i, N] -> [sum n_i, N] (none -> [0, N])

// KDA's decay gate (docs/design.md §1.2), fused: g = lb * sigmoid(exp(A_log[h]) * (f + dt_bias)); f [T, H, K],
// A_log [H], dt_bias [H*K]; g lies in (lb, 0).
Var kda_gate(const Var& f, const Var& A_log, const Var& dt_bias, float lower_bound);

// MoE mixture weights for chosen experts: p[t, j] = scale * s[t, idx[t, j]] / sum_j s[t, idx[t, j]].
// s [T, E]; idx [T, k] (I32, from top-k of s + bias: selection is not differentiated, the weights are).
Var route_weights(const Var& s, const Tensor& idx, float scale, bool renormalize);

Var embedding(const Var& table, const Tensor& ids);  // table [V, D], ids [...] i64 -> [..., D]
Var gather_rows(const Var& src, const Tensor& idx);  // src [m, N], idx [n] i32 -> [n, N]
Var scatter_add_rows(int64_t rows, const Var& src, const Tensor& idx, const Var& weights);  // -> [rows, N]

}  // namespace myriad::ag
