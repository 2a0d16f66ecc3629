// The model for serving (docs/design.md §3): the text model of docs/design.md §1 run without autograd over a BATCH of
// sequences, each with its own state: per KDA layer the fixed-size KdaState, per MLA layer the paged latent
// MlaCache. One forward takes, for each sequence of the batch, the next tokens to process (a prefill chunk or a
// single decode token); every matrix product with a weight runs once over the rows of all sequences together
// (so a batch reads the weights once), while the sequence mixers run per sequence on their own state. Linear
// weights may be block-quantized (quant/quant.h); they are used as stored.
//
// Same model as Transformer::forward (a test checks logits against it), except: the capacity factor is not
// applied (serving routes every copy to its top-k experts).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"
#include "infer/decode_weights.h"
#include "infer/kda_decoder.h"
#include "infer/mla_decoder.h"
#include "model/config.h"
#include "model/prefill_shards.h"
#include "model/vision_tower.h"
#include "model/weights.h"

namespace myriad {

// The state of one sequence: indexed by layer (kda[l] is empty for MLA layers and mla[l] unused for KDA ones).
struct SequenceState {
  std::vector<KdaState> kda;
  std::vector<MlaCache> mla;
  int64_t tokens = 0;  // processed so far
  // Routing replay (model/ffn_module.h RoutingTap; RL): when record_routing is set, routing[l] holds the experts
  // every processed token's copies went to in MoE layer l (k per token, in token order; empty on other layers).
  bool record_routing = false;
  std::vector<std::vector<int32_t>> routing;
  size_t kda_bytes() const;
  size_t mla_bytes() const;

  // Speculative decoding (infer/speculative.h): from begin_speculation() every forward keeps the KDA states as of
  // after each token it processes, so that rewind(n) can return the sequence to any token count n since then:
  // KDA states restored, MLA caches truncated (pages freed), routing records and `tokens` cut back. The state after
  // rewind(n) is the state of a sequence that processed only those n tokens (to f32 rounding). kValue when n is
  // outside [the count at begin_speculation(), tokens]. end_speculation() drops the kept states.
  void begin_speculation();
  void rewind(int64_t n);
  void end_speculation();
  bool speculating() const { return spec_.active; }
  int64_t speculation_start() const { return spec_.start; }
  std::vector<KdaState>* kda_history(size_t layer) { return spec_.active ? &spec_.kda[layer] : nullptr; }

 private:
  struct Speculation {
    bool active = false;
    int64_t start = 0;                       // tokens at begin_speculation()
    std::vector<std::vector<KdaState>> kda;  // per layer: the state at `start`, then after each later token
    std::vector<size_t> routing_start;       // per layer: routing[l].size() at `start`
  };
  Speculation spec_;
};

// One sequence's part of a batch: the tokens to run next. With `shards`: this process's shard of a
// sequence-parallel prefill (model/prefill_shards.h; alone in its batch, on a fresh sequence, `tokens` being the
// shard's): the state it leaves is the whole prompt's on the last shard.
struct BatchEntry {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;
  PrefillShards* shards = nullptr;
  // Images: [placeholders in `tokens`, hidden_size] row-major, the image tokens (encode_images) that replace
  // this entry's media_placeholder_token_id embeddings, in order; a prompt's rows split across its chunks as
  // its placeholders are. Empty: none (placeholders then read their own embedding).
  std::span<const float> image_rows = {};
  // Rows of logits forward() returns for this entry: its last logit_rows tokens' (speculative verification wants
  // every position of its chunk; a prefill chunk only its last).
  int64_t logit_rows = 1;
};

class MoeDispatcher;

// A GLU FFN's weights for inference (model/ffn_module.h's glu_ffn): down(glu(gate x, up x)).
struct GluLinears {
  const LinearWeight *gate = nullptr, *up = nullptr, *down = nullptr;
};

class InferenceModel {
 public:
  // The tokenizer may be empty (not loaded) for uses that never detokenize.
  InferenceModel(ModelConfig config, std::shared_ptr<const DecodeWeights> weights, Tokenizer tokenizer = {});
  // A model directory (config.json, model.safetensors or shards, tokenizer/ or the tokenizer files beside
  // config.json), or a training run (its latest checkpoint). Plain or quantized checkpoints.
  // keep_for(config): the tensors this process holds (under expert parallelism a rank's experts; absent: all).
  // tokenizer: a tokenizer directory or file to use instead of the model's own (find_model_tokenizer).
  static std::shared_ptr<InferenceModel> load(const std::string& dir,
                                              const std::function<ParamFilter(const ModelConfig&)>& keep_for = {},
                                              const std::string& tokenizer = "");

  const ModelConfig& config() const { return config_; }
  const DecodeWeights& weights() const { return *w_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const std::string& source() const { return source_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // The ids its tokenizer knows, min(tokenizer vocabulary, vocab_size()) (vocab_size() without a tokenizer), and
  // -inf on the rest in `rows` rows of logits [rows, vocab_size()]: ids of a vocabulary padded for the matrix shapes
  // are never produced (generate(), the serving engine, speculation).
  int64_t text_vocab_size() const;
  void mask_padded_ids(float* logits, int64_t rows) const;
  int64_t kda_chunk = 64;
  // The MoE dispatch seam (model/moe_dispatch.h): null, every expert in this process; an expert-parallel
  // dispatcher must outlive the model's forward calls.
  void set_moe_dispatcher(const MoeDispatcher* dispatcher) { moe_dispatcher_ = dispatcher; }

  // cache_dtype: how the MLA latent caches store their rows, kF32 (exact) or kBF16 (half the bytes; MlaCache).
  SequenceState new_sequence(int64_t page_tokens = MlaCache::kDefaultPageTokens, DType cache_dtype = DType::kF32) const;
  // Runs every entry's tokens, advancing its state. Returns f32 logits: the last logit_rows tokens' of each entry
  // (one by default: [entries, vocab]) in entry order, or with all_logits [total tokens, vocab]. Token ids and the
  // context length are checked (kValue).
  Tensor forward(std::span<const BatchEntry> batch, bool all_logits = false) const;

  // The vision tower and projector on image patches (model/vision_tower.h encode_images, no tape): [tokens,
  // hidden_size], what BatchEntry::image_rows takes. kValue when the model has no vision tower.
  Tensor encode_images(const Tensor& patches, const std::vector<PatchGrid>& grids) const;
  bool has_vision() const { return vision_ != nullptr; }
  // The vision tensors as Vars (load() sets them from the checkpoint; tests from their own ModelWeights).
  void set_vision_weights(std::shared_ptr<const ModelWeights> w) { vision_ = std::move(w); }

  // Bytes of weights one decode step reads for `tokens` tokens (one each from as many sequences): every dense
  // weight (one embedding row per token), plus per MoE layer the routed experts that receive a copy: top-k for
  // one token (the model's activated weights, as stored); for more, the expected number of distinct experts when
  // routing is spread uniformly, E (1 - (1 - k/E)^tokens).
  size_t active_weight_bytes(int64_t tokens = 1) const;
  // The routed experts' part of active_weight_bytes(tokens).
  size_t routed_expert_bytes(int64_t tokens = 1) const;

 private:
  struct Stack;  // model/layer_module.h's execution without the tape (inference_model.cc)
  // Overwrites the embedding rows of the batch's media placeholders with the entries' image rows.
  void place_images(std::span<const BatchEntry> batch, Tensor& running) const;

  // Per layer, the weights forward() reads, resolved once at construction (decode would otherwise build and look
  // up every name per token). Entries a layer does not have stay null.
  struct LayerRefs {
    const float *input_norm = nullptr, *post_norm = nullptr;         // [D]
    const float *pre_res_norm = nullptr, *pre_res_proj = nullptr;    // AttnRes q_pre [D], [1, D] (block mode)
    const float *post_res_norm = nullptr, *post_res_proj = nullptr;  // q_post
    GluLinears mlp, shared;                                          // dense FFN; shared experts (MoE layers)
    const LinearWeight *router = nullptr, *latent_down = nullptr, *latent_up = nullptr;
    const float *router_bias = nullptr, *latent_norm = nullptr;
    // Routed experts: [3 e + 0] w1 (gate), [3 e + 1] w3 (up), [3 e + 2] w2 (down).
    std::vector<const LinearWeight*> experts;
  };

  size_t weight_bytes_read(int64_t tokens, bool routed_only) const;
  // batch: the entries whose rows x holds, in order (their states record the routing when they ask to).
  Tensor ffn(int64_t layer, const Tensor& x, std::span<const BatchEntry> batch = {}) const;

 public:
  // Expert-parallel serving (serve/expert_server.h): MoE layer `layer`'s dispatch, local experts and combine for a
  // process with no tokens of its own, serving the copies other ranks send through `dispatcher` (collective with
  // their forward's call for the same layer).
  void serve_remote_experts(int64_t layer, const MoeDispatcher& dispatcher) const;

 private:
  // AttnRes read over the candidates [N, D] each: softmax over candidates of (norm * proj) . v / rms(v).
  Tensor attn_res_read(const float* norm, const float* proj, const std::vector<Tensor>& cands) const;
  Tensor rmsnorm(const Tensor& x, const float* weight) const;  // rows of x [N, D] with weight [D], rms_norm_eps
  const LinearWeight& lin(const std::string& name) const { return w_->linear(name); }

  ModelConfig config_;
  const MoeDispatcher* moe_dispatcher_ = nullptr;
  std::shared_ptr<const DecodeWeights> w_;
  std::shared_ptr<const ModelWeights> vision_;  // vision_tower.* and mm_projector.*; null without a vision tower
  Tokenizer tokenizer_;
  std::string source_;
  std::vector<std::unique_ptr<KdaDecoder>> kda_;  // per layer (null for MLA layers)
  std::vector<std::unique_ptr<MlaDecoder>> mla_;  // per layer (null for KDA layers)
  std::vector<LayerRefs> layers_;
  const float *out_res_norm_ = nullptr, *out_res_proj_ = nullptr, *final_norm_ = nullptr, *embed_ = nullptr;
  const LinearWeight* lm_head_ = nullptr;
};

}  // namespace myriad
