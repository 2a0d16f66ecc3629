// Accounting: parameter counts (total, activated per token, per component, per layer kind), cache sizes and
// training FLOPs per token, all summed from model_param_specs (model/param_spec.h), never from a separate
// formula, so the counts are those of the checkpoint the config describes.
//
// Conventions (the K3 report's; docs/params.md has the formulas):
//  - activated per token: every tensor a token's forward pass multiplies by, with the routed experts counted
//    k of E (each routed expert of a layer has the same size, so this is exact). The input embedding table is
//    a lookup and is NOT counted; active_params_with_embeddings adds it. With tied embeddings the table is
//    also the head and is counted once, as the head.
//  - e_score_correction_bias is counted in every total (it is in the checkpoint) and reported as a buffer.
//  - FLOPs per token for training (forward + backward = 3 x forward) at context length T:
//      matmuls    6 x active_params                        (2 per multiply-add, x3 for fwd+bwd)
//      MLA        3 x H (Dn + Dr + Dv) (T + 1) per MLA layer (causal scores and values, 2 H (Dn+Dr+Dv) per
//                                                          key, averaged over the mask: (T + 1) / 2 keys)
//      KDA        3 x H (6 K V + (C + 1)(3 K + 2 V)) per KDA layer, chunk C = 64 (chunkwise form: three
//                                                          K x V products per token with the state, and
//                                                          causal C x C products inside the chunk)
//  - caches: MLA keeps (Ckv + Dr) numbers per token per MLA layer; KDA keeps, per sequence and KDA layer, the
//    state H K V plus the conv tails (W - 1) x 3 H K.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/param_spec.h"

namespace myriad {

inline constexpr int64_t kKdaChunkSize = 64;  // C in the KDA FLOP estimate

struct ComponentCount {
  int64_t params = 0;  // in the checkpoint
  int64_t active = 0;  // activated per token (routed experts k of E; embeddings 0)
  int64_t tensors = 0;
};

// Parameters of one layer of a kind (the first such layer; all layers of a kind are the same size).
struct LayerKindCount {
  int64_t layers = 0;  // how many layers of this kind
  int64_t params = 0;  // per layer
  int64_t active = 0;  // per layer
};

struct ModelAccounting {
  int64_t total_params = 0;
  int64_t active_params = 0;                  // input embedding table not counted
  int64_t active_params_with_embeddings = 0;  // + model.embed_tokens (when untied)
  int64_t trainable_params = 0;               // total minus buffers
  int64_t buffer_params = 0;                  // e_score_correction_bias
  int64_t decay_params = 0;                   // trained with weight decay
  int64_t num_tensors = 0;
  std::array<ComponentCount, kNumComponents> components{};  // indexed by Component

  // Per layer kind: mixers (KDA, MLA) and FFNs (dense, MoE: router + experts + latent + shared), without the
  // layer norms and AttnRes queries; one routed expert; the per-layer norms + AttnRes queries.
  LayerKindCount kda_mixer, mla_mixer, dense_ffn, moe_ffn, layer_extras;
  int64_t expert_params = 0;  // one routed expert (w1 + w2 + w3)

  // Caches (elements; bytes = elements x 4 for f32, x 2 for bf16).
  int64_t mla_cache_elems_per_token = 0;     // (Ckv + Dr) x MLA layers
  int64_t kda_state_elems_per_sequence = 0;  // (H K V + (W-1) 3 H K) x KDA layers
};

ModelAccounting account_model(const ModelConfig& c);
// Same, from an already built spec list (must be model_param_specs(c)).
ModelAccounting account_model(const ModelConfig& c, const std::vector<ParamSpec>& specs);

struct TrainingFlops {
  int64_t seq_len = 0;       // T
  double matmul = 0;         // 6 x active_params
  double mla_attention = 0;  // all MLA layers
  double kda_state = 0;      // all KDA layers
  double total() const { return matmul + mla_attention + kda_state; }
};
// Training (forward + backward) FLOPs per token at context length T (formulas above).
TrainingFlops training_flops_per_token(const ModelConfig& c, const ModelAccounting& a, int64_t seq_len);

}  // namespace myriad
