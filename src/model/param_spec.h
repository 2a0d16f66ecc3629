// Parameter specification: every tensor of a kimi_linear text model for a given config, exactly as
// docs/tensors.md names and shapes them, with what the rest of myriad needs to know about each one (which
// component it belongs to, its layer and expert, whether the optimizer trains it and with weight decay, how
// init fills it). Accounting (model/accounting.h), random init (model/init.h) and checkpoint validation all
// derive from this one list, so a checkpoint, a parameter count and an initialised model cannot disagree.
//
// Shapes: linear weights are [out, in] (PyTorch nn.Linear). Legend: D hidden_size, Vocab vocab_size, H_kda / K
// the KDA heads and head dim, W the short-conv width, H the MLA heads, Cq q_lora_rank, Ckv kv_lora_rank, Dn / Dr
// / Dv the MLA head dims, I intermediate_size, E num_experts, S num_shared_experts, F moe_intermediate_size,
// L routed_expert_hidden_size (or D without a latent).
//
// Choices where docs/tensors.md is silent (documented in docs/params.md):
//  - use_full_rank_gate false: the KDA output gate is low rank, g_a_proj [K, D] + g_b_proj [H_kda K, K] (as
//    f_a_proj / f_b_proj, and as Kimi-Linear's HF code names it) instead of g_proj.
//  - topk_method "greedy": no gate.e_score_correction_bias (DeepSeek-V3's HF code creates it for noaux_tc only).
//  - latent_moe_use_norm false: no routed_expert_norm.
//  - tie_word_embeddings true: no lm_head.weight (the head reads model.embed_tokens.weight).
//  - layers that are not MoE (first_k_dense_replace, or moe_layer_freq) are dense, under mlp.
// Every tensor is f32 here (A_log, dt_bias and e_score_correction_bias are f32 in every checkpoint; the others
// are f32 in myriad's own checkpoints; bf16 / quantized checkpoints are a loader's business).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/config.h"

namespace myriad {

class Checkpoint;

// What a tensor belongs to, for accounting. A module's own norms belong to the module (KDA o_norm to kKda,
// q_a_layernorm / kv_a_layernorm to kMla, routed_expert_norm to kLatentProj, the AttnRes query norms to
// kAttnRes); kNorms is the pre-mixer / pre-FFN layer norms and the final model.norm.
enum class Component : uint8_t {
  kEmbeddings,     // model.embed_tokens (a lookup: not counted as activated)
  kKda,            // KDA mixer
  kMla,            // gated MLA mixer
  kAttnRes,        // AttnRes queries (block mode)
  kDenseFfn,       // dense SiTU-GLU FFN
  kRouter,         // gate.weight and gate.e_score_correction_bias
  kRoutedExperts,  // experts.J.{w1,w2,w3}
  kSharedExperts,  // shared_experts.*
  kLatentProj,     // routed_expert_{down_proj,up_proj,norm}
  kNorms,          // input_layernorm, post_attention_layernorm, model.norm
  kHead,           // lm_head
  kVision,         // vision_tower.* (patch embedding, position embedding, encoder blocks, final norm)
  kProjector,      // mm_projector.* (vision tokens -> the text width)
};
inline constexpr int kNumComponents = 13;
const char* component_name(Component c);  // "embeddings", "kda", ..., "head"

// How init (model/init.h) fills a tensor.
enum class ParamInit : uint8_t {
  kNormal,        // N(0, initializer_range): linear weights, embeddings, lm_head, experts
  kRouterNormal,  // N(0, router_init_std): the router
  kConv,          // U(-1/sqrt(W), 1/sqrt(W)): depthwise short convs (PyTorch's nn.Conv1d default)
  kOnes,          // RMSNorm weights
  kZeros,         // e_score_correction_bias; AttnRes query projections (uniform mixing at start)
  kALog,          // log(U(1, 16))
  kDtBias,        // softplus^-1(dt), dt log-uniform in [1e-3, 0.1], floored at 1e-4 (FLA / Mamba custom)
};

struct ParamSpec {
  std::string name;  // checkpoint name, e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;
  DType dtype = DType::kF32;
  Component component = Component::kNorms;
  int64_t layer = -1;        // 0-based layer index, -1 outside the layers
  int64_t expert = -1;       // routed expert J, -1 otherwise
  bool weight_decay = true;  // false for norms, biases, A_log, dt_bias, the correction bias
  bool buffer = false;       // not trained by the optimizer (e_score_correction_bias: set by balancing)
  ParamInit init = ParamInit::kNormal;
  int64_t numel() const { return shape_numel(shape); }
};

// Every tensor of the model for `c`, in model order: embeddings; per layer the layer norms, the AttnRes
// queries, the mixer, the FFN (router, experts 0..E-1, latent projections, shared experts); then model.norm,
// the output AttnRes query and lm_head. Names are unique.
std::vector<ParamSpec> model_param_specs(const ModelConfig& c);

// A linear layer's weight that block quantization may store quantized: two dims, and not the embeddings (a
// lookup), the router (routing decisions stay exact), a norm or an AttnRes query. Whether its cols divide
// into quantization groups is the quantizer's check.
bool is_quantizable_linear(const ParamSpec& spec);

// Checks that `ck` holds exactly the tensors of model_param_specs(c), each with the spec's shape and dtype (an F32
// spec may be stored BF16 or F16, as published checkpoints are: loading widens it exactly).
// The first problem throws one myriad::Error (kFormat) naming the checkpoint, the tensor, the expected and the
// found shape and dtype ("missing" / "not in the model" for absent / extra tensors), plus how many other
// problems there are.
void validate_checkpoint_against_config(const Checkpoint& ck, const ModelConfig& c);

}  // namespace myriad
