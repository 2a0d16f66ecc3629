// Accounting (see accounting.h): sums over model_param_specs, plus closed-form cache and FLOP estimates.
#include "model/accounting.h"

#include <algorithm>

#include "core/error.h"
#include "model/sparse_mla.h"

namespace myriad {

namespace {

bool is_layer_extra(Component c) {
  return c == Component::kNorms || c == Component::kAttnRes;
}

bool is_ffn(Component c) {
  return c == Component::kDenseFfn || c == Component::kRouter || c == Component::kRoutedExperts ||
         c == Component::kSharedExperts || c == Component::kLatentProj;
}

}  // namespace

ModelAccounting account_model(const ModelConfig& c) {
  return account_model(c, model_param_specs(c));
}

ModelAccounting account_model(const ModelConfig& c, const std::vector<ParamSpec>& specs) {
  ModelAccounting a;
  const int64_t k = c.num_experts_per_token;
  // Per-layer sums, to fill the per-kind figures from the first layer of each kind.
  const size_t nl = size_t(c.num_hidden_layers);
  int64_t expert_layer = -1;  // the first MoE layer: expert_params is one expert of it
  std::vector<int64_t> mixer(nl, 0), ffn(nl, 0), ffn_active(nl, 0), extras(nl, 0);
  for (const ParamSpec& s : specs) {
    const int64_t n = s.numel();
    // A text token passes through every tensor except the input lookup, the routed experts it is not sent to,
    // and the vision tower and projector (which run once per image patch, not per token).
    const bool vision = s.component == Component::kVision || s.component == Component::kProjector;
    const bool active = s.component != Component::kEmbeddings && !vision && (s.expert < 0 || s.expert < k);
    ComponentCount& cc = a.components[size_t(s.component)];
    cc.params += n;
    cc.tensors += 1;
    if (active) cc.active += n;
    a.total_params += n;
    a.num_tensors += 1;
    if (active) a.active_params += n;
    if (s.buffer) a.buffer_params += n;
    if (s.weight_decay && !s.buffer) a.decay_params += n;
    if (s.expert == 0 && expert_layer < 0) expert_layer = s.layer;
    if (s.expert == 0 && s.layer == expert_layer) a.expert_params += n;
    if (s.layer >= 0) {
      const size_t l = size_t(s.layer);
      if (is_layer_extra(s.component)) extras[l] += n;
      if (s.component == Component::kKda || s.component == Component::kMla) mixer[l] += n;
      if (is_ffn(s.component)) {
        ffn[l] += n;
        if (active) ffn_active[l] += n;
      }
    }
  }
  a.trainable_params = a.total_params - a.buffer_params;
  ComponentCount& emb = a.components[size_t(Component::kEmbeddings)];
  if (c.tie_word_embeddings) {
    // The table is also the head, which every token multiplies by: counted once, as activated.
    emb.active = emb.params;
    a.active_params += emb.params;
    a.active_params_with_embeddings = a.active_params;
  } else {
    a.active_params_with_embeddings = a.active_params + emb.params;
  }

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const size_t i = size_t(l);
    auto count = [](LayerKindCount& kind, int64_t params, int64_t active) {
      if (kind.layers++ == 0) {
        kind.params = params;
        kind.active = active;
      }
    };
    count(c.mixer(l) == Mixer::kKda ? a.kda_mixer : a.mla_mixer, mixer[i], mixer[i]);
    count(c.is_moe_layer(l) ? a.moe_ffn : a.dense_ffn, ffn[i], ffn_active[i]);
    count(a.layer_extras, extras[i], extras[i]);
  }

  if (a.mla_mixer.layers > 0) a.mla_cache_elems_per_token = (c.kv_lora_rank + c.qk_rope_head_dim) * a.mla_mixer.layers;
  if (a.kda_mixer.layers > 0) {
    const LinearAttnConfig& la = *c.linear_attn_config;
    const int64_t H = la.num_heads, K = la.head_dim, W = la.short_conv_kernel_size;
    a.kda_state_elems_per_sequence = (H * K * K + (W - 1) * 3 * H * K) * a.kda_mixer.layers;
  }
  return a;
}

TrainingFlops training_flops_per_token(const ModelConfig& c, const ModelAccounting& a, int64_t seq_len) {
  MYRIAD_REQUIRE(seq_len >= 1, kValue, "training_flops_per_token: sequence length ", seq_len, " must be >= 1");
  TrainingFlops f;
  f.seq_len = seq_len;
  f.matmul = 6.0 * double(a.active_params);
  if (a.mla_mixer.layers > 0) {
    const double per_key = 2.0 * double(c.num_attention_heads) *
                           double(c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim);  // scores + values
    double keys = (double(seq_len) + 1.0) / 2.0;  // average over the causal mask
    double choice = 0.0;                          // sparse: the block scores, forward only (not differentiated)
    if (const auto& sp = c.mla_sparse_attention) {
      double sum_keys = 0.0, sum_cand = 0.0;
      for (int64_t t = 0; t < seq_len; ++t) {
        sum_keys += double(sparse_mla_keys(*sp, t));
        sum_cand += double(sparse_first_local_block(*sp, t));
      }
      keys = sum_keys / double(seq_len);
      choice = 2.0 * double(c.kv_lora_rank + c.qk_rope_head_dim) * sum_cand / double(seq_len);
    }
    f.mla_attention = (3.0 * per_key * keys + choice) * double(a.mla_mixer.layers);
  }
  if (a.kda_mixer.layers > 0) {
    const LinearAttnConfig& la = *c.linear_attn_config;
    const double H = double(la.num_heads), K = double(la.head_dim), V = K;
    const double C = double(std::min<int64_t>(kKdaChunkSize, seq_len));
    const double fwd = H * (6.0 * K * V + (C + 1.0) * (3.0 * K + 2.0 * V));
    f.kda_state = 3.0 * fwd * double(a.kda_mixer.layers);
  }
  return f;
}

}  // namespace myriad
