// The text model of docs/design.md §1 on autograd Vars: embeddings, KDA and gated-MLA mixers in the config's
// layout, dense SiTU-GLU or latent MoE FFNs, AttnRes, final norm, lm_head, loss.
// AttnRes modes: "block" (docs/design.md §1.4), "none" (plain pre-norm residual), and the seed's "skip": a plain
// residual where the mixer output of each block's first layer (l % B == 0) is held and added to the stream
// again after the block's last layer ((l + 1) % B == 0).
// One sequence at a time (tokens [T]); the model code knows nothing of ranks or devices.
// Shape legend: T tokens, D hidden, H heads, K/V KDA head dims, Dn/Dr/Dv MLA head dims, C kv_lora_rank,
// L latent width, E experts, k top-k.
#pragma once

#include <optional>
#include <vector>

#include "autograd/functions.h"
#include "model/config.h"
#include "model/weights.h"

namespace myriad {

class MoeDispatcher;
class SequenceContext;
class GradientReadyListener;

struct ForwardOptions {
  int64_t kda_chunk = 64;
  // Gradient checkpointing: each layer runs without keeping its activations and is recomputed during the
  // backward (one layer's activations alive at a time).
  bool checkpoint_layers = false;
  // Training step, for the capacity-factor schedule (capacity_factor_start -> _end over _steps).
  int64_t step = 0;
  // The two seams through which parallelism is applied from outside (docs/design.md §4); null: this process alone.
  const MoeDispatcher* moe_dispatcher = nullptr;  // model/moe_dispatch.h
  SequenceContext* sequence = nullptr;            // model/sequence_context.h
  // Told during the backward when each layer's weights have their gradients (model/gradient_ready.h); null: none.
  GradientReadyListener* gradient_ready = nullptr;
  // RL's per-token coefficients (f32 [T], constants): the loss is then sum_t w_t (-log p(target_t)) over the
  // counted targets instead of their mean, and ForwardResult::token_nll holds each -log p (rl/grpo.h). The
  // backward reads the weights again: they may be filled after the forward (ag::cross_entropy).
  const Tensor* target_weights = nullptr;
  // Images (model/vision_tower.h encode_images: [N, D], on the tape when the tower trains): row k replaces the
  // embedding of the k-th media_placeholder_token_id in `tokens`, so the text model reads the image there and
  // the gradient reaches the tower. The counts must agree (kShape otherwise); null: text only.
  const ag::Var* image_features = nullptr;
  // Routing replay (model/ffn_module.h RoutingTap; RL's rollouts record it): per layer, [R, k] I32 experts for the
  // first R tokens of this forward, imposed on its MoE layers (undefined or absent layers: routed as usual).
  const std::vector<Tensor>* routing_replay = nullptr;
};

// Per-layer routing statistics of one forward (what balancing and the metrics read).
struct RoutingStats {
  int64_t layer = -1;
  std::vector<int64_t> load;  // copies per expert
  Tensor scores;              // [T, E] router scores s (f32, no grad), for quantile balancing
  int64_t copies = 0;         // T * k
  int64_t dropped = 0;        // copies with no expert under the capacity limit
  int64_t rerouted = 0;       // copies moved to a next-best expert with room
  ag::Var aux_loss;           // [] balancing "aux_loss": this layer's Switch-style loss (on the tape); else undefined
};

struct ForwardResult {
  ag::Var hidden;    // [T, D] after the final norm
  ag::Var loss;      // [] when targets were given: the language-model cross entropy alone
  ag::Var aux_loss;  // [] balancing "aux_loss": the sum of every MoE layer's balance loss (the trainer adds it)
  std::vector<RoutingStats> routing;
  Tensor token_nll;  // [T] with ForwardOptions::target_weights: -log p(target) per token (0 where ignored)
};

class Transformer {
 public:
  Transformer(ModelConfig config, ModelWeights weights) : config_(std::move(config)), w_(std::move(weights)) {}
  const ModelConfig& config() const { return config_; }
  ModelWeights& weights() { return w_; }
  const ModelWeights& weights() const { return w_; }

  // tokens [T] (I64); targets [T] (I64, -100 = ignore) or undefined. Token ids and length are checked.
  ForwardResult forward(const Tensor& tokens, const Tensor& targets, const ForwardOptions& opt = {}) const;
  // Logits [T, vocab] of hidden states (no gradient).
  Tensor logits(const ag::Var& hidden) const;
  // Knowledge distillation (train/distill.h): the cross entropy of this model's next-token distributions against
  // a teacher's, -sum_v p_t(v) log q_t(v), averaged over the positions whose target is counted (targets [T] i64,
  // -100 = ignored); it differs from KL(p || q) by the teacher's entropy, a constant. hidden [T, D] after the
  // final norm; teacher_probs f32 [T, vocab], rows summing to 1.
  ag::Var distillation_loss(const ag::Var& hidden, const Tensor& teacher_probs, const Tensor& targets) const;

  // The modules, public so that tests, benchmarks and the decode paths can run one alone. x is the normed
  // input [T, D]; each returns [T, D] (the residual add is the caller's).
  ag::Var kda_mixer(int64_t layer, const ag::Var& x, const ForwardOptions& opt, SequenceContext& ctx) const;
  ag::Var mla_mixer(int64_t layer, const ag::Var& x, SequenceContext& ctx) const;
  ag::Var dense_ffn(int64_t layer, const ag::Var& x) const;
  ag::Var moe_ffn(int64_t layer, const ag::Var& x, RoutingStats* stats, const ForwardOptions& opt = {}) const;
  // checkpoint: keep only the read's output on the tape and recompute the rest in the backward (its per-candidate
  // normalized copies, products and partial sums are [T, hidden] each: most of a long sequence's activations).
  ag::Var attn_res_read(const std::string& norm, const std::string& proj, const std::vector<ag::Var>& cands,
                        bool checkpoint = false) const;
  const ag::Var& p(const std::string& name) const { return w_.at(name); }
  // The input embeddings [T, D] with the image features at the placeholders (ForwardOptions::image_features).
  ag::Var with_images(const ag::Var& embedded, const Tensor& tokens, const ag::Var* features) const;

  // The dispatcher every forward uses unless its options name one (null: the local one). Under expert
  // parallelism the weights hold this rank's experts only and every forward, the evaluations' too, must
  // dispatch through the rank's ExpertParallelDispatcher (dist/expert_parallel.h). Not owned.
  void set_moe_dispatcher(const MoeDispatcher* d) { moe_dispatcher_ = d; }
  const MoeDispatcher& moe_dispatcher() const;

 private:
  struct Stack;  // model/layer_module.h's execution on the tape (transformer.cc)

  ModelConfig config_;
  ModelWeights w_;
  const MoeDispatcher* moe_dispatcher_ = nullptr;
};

}  // namespace myriad
