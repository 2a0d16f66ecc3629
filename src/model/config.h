// Model config: parse and validate a Hugging Face-style config.json for Kimi-K3-class models
// (`model_type: kimi_linear`, docs/design.md §1). The text config may sit at the top level or be nested as
// "text_config" beside an optional "vision_config" (K3's published file, `model_type: kimi_k3`).
//
// Everything is checked up front: the first problem found throws one myriad::Error (kConfig) whose message
// names the field by its JSON path, the offending value and the rule, e.g.
//   config.json: text_config.num_experts_per_token = 1000: must be <= num_experts (896)
// Valid Hugging Face settings that myriad does not implement throw kUnsupported the same way.
// Unknown fields are never used: each one is reported once with its path (pushed to *warnings and logged with
// log_warn). Fields that HF configs carry for generation, tooling or infrastructure (architectures, auto_map,
// torch_dtype, transformers_version, use_cache, quantization_config, ...) are known and ignored silently.
//
// Field names follow K3's config.json exactly. Aliases accepted on input (stored under the K3 name; giving
// both with different values is an error):
//   n_routed_experts -> num_experts, num_experts_per_tok -> num_experts_per_token,
//   n_shared_experts -> num_shared_experts.
//
// Fields myriad adds (absent from K3's file; all optional, defaults below):
//   field                    type    default   meaning
//   attn_res_mode            string  "block"   AttnRes variant (§1.4): "block" | "skip" (seed's variant) | "none"
//   balancing                string  "qb"      MoE load balancing (§1.6): "qb" (quantile balancing of the
//                                              router bias) | "aux_loss" (Switch-style) | "sign_update" (DSV3)
//   aux_loss_coef            float   0.001     weight of the auxiliary loss (balancing "aux_loss" only)
//   bias_update_rate         float   0.001     gamma of the sign update (balancing "sign_update" only)
//   capacity_factor_start    float   absent    capacity factor at step 0; absent = no capacity limit
//                                              (drop-free, the default). capacity = ceil(cf * m * k / n)
//   capacity_factor_end      float   = start   capacity factor after the schedule; 0 < end <= start
//   capacity_factor_steps    int     0         steps to go (linearly) from start to end; > 0 when end != start
//   router_init_std          float   0.006     std of the router weight init (small variance, §1.6)
//   mla_sparse_attention     object  absent    block-sparse MLA (model/sparse_mla.h): {"block_size" (64),
//                                              "top_k" (16), "window" (256, a multiple of block_size)}; absent:
//                                              every MLA query attends to every earlier token (dense, K3's own)
//   mla_logn_base            int     absent    log-n query scaling (model/rope.h): each MLA query at position p
//                                              (0-based) is multiplied by max(1, ln(p + 1) / ln(base)), so scores
//                                              beyond the trained window keep their sharpness; absent: off (K3)
// Other fields with defaults when absent (K3 omits them): rope_theta 10000, rope_scaling none, head_dim none,
// linear_attn_config none (every layer MLA), routed_expert_hidden_size none (plain, non-latent MoE),
// topk_method "noaux_tc" (router bias e_score_correction_bias used for selection), num_key_value_heads =
// num_attention_heads, first_k_dense_replace 0, moe_layer_freq 1, num_shared_experts 0. Fields K3 gives take
// K3's values as defaults (hidden_act "situ", situ betas 4 / 25, use_full_rank_gate true,
// short_conv_kernel_size 4, latent_moe_use_norm true, moe_renormalize true, moe_router_activation_func
// "sigmoid"); linear_attn_config.gate_lower_bound absent or null is the unbounded softplus gate
// of Kimi-Linear and fla (K3 gives -5). Required: vocab_size, hidden_size, num_hidden_layers, max_position_embeddings,
// rms_norm_eps; the MLA sizes when a layer is MLA; num_experts, num_experts_per_token, moe_intermediate_size when a
// layer is MoE; intermediate_size when a layer is dense; attn_res_block_size unless attn_res_mode is "none".
//
// model_type "kimi_linear" or "deepseek_v3". DeepSeek-V3's names are read as aliases (n_routed_experts,
// num_experts_per_tok, n_shared_experts, norm_topk_prob = moe_renormalize, scoring_func =
// moe_router_activation_func, n_group = num_expert_group, which for deepseek_v3 means group-limited routing, refused
// when > 1), and its defaults differ where its config is silent: hidden_act silu, attn_res_mode none,
// rope_interleave true (rope_interleave: RoPE on pairs (2i, 2i + 1) instead of (i, i + Dr/2)).
// model_type "kimi_linear" without linear_attn_config but with layer_types or linear_num_key_heads is transformers 5's
// own KimiLinearConfig: layer_types ("linear_attention" | "full_attention"), mlp_layer_types ("dense" then
// "sparse"), linear_num_key_heads / linear_key_head_dim / linear_conv_kernel_dim, and its code's fixed choices
// (softplus gate, low-rank output gate, NoPE MLA, silu, no AttnRes).
// Allowed strings: hidden_act "situ" | "silu"; moe_router_activation_func "sigmoid" | "softmax"; topk_method
// "noaux_tc" | "greedy" (read into the enums HiddenAct, RouterActivation, TopkMethod); rope_scaling.type "yarn". Not
// supported (kUnsupported): use_grouped_topk with num_expert_group > 1. num_nextn_predict_layers > 0 (MTP) is accepted
// with a warning; those layers are not built.
//
// Layer indices: the config's kda_layers / full_attn_layers are 1-based, as in the file; the helpers below
// take 0-based layer indices, as the model code uses them.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace myriad {

// rope_scaling (only used when mla_use_nope is false). Only "yarn" is supported.
struct RopeScaling {
  std::string type;  // "yarn" (read from "type" or "rope_type")
  double factor = 1.0;
  std::optional<int64_t> original_max_position_embeddings;
  std::optional<double> beta_fast;
  std::optional<double> beta_slow;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
};

// mla_sparse_attention (myriad's own, model/sparse_mla.h): each MLA query attends to its own block and the
// window / block_size blocks before it, plus the top_k earlier blocks chosen by their scores.
struct SparseMlaConfig {
  int64_t block_size = 64;
  int64_t top_k = 16;
  int64_t window = 256;  // tokens, a multiple of block_size
  int64_t local_blocks() const { return window / block_size; }
};

// linear_attn_config: the KDA mixer (§1.2) and the layer layout (§1.1).
struct LinearAttnConfig {
  std::vector<int64_t> kda_layers;        // 1-based layer numbers using KDA
  std::vector<int64_t> full_attn_layers;  // 1-based layer numbers using gated MLA
  int64_t num_heads = 0;                  // H
  int64_t head_dim = 0;                   // K = V
  int64_t short_conv_kernel_size = 4;     // ShortConv width
  // lb < 0: the bounded gate g = lb sigmoid(...), alpha = exp(g) in (e^lb, 1) (K3). -infinity (the field absent
  // or null): fla's and Kimi-Linear's unbounded gate g = -exp(A_log) softplus(...), as their modeling code has it.
  double gate_lower_bound = -std::numeric_limits<double>::infinity();
  bool use_full_rank_gate = true;  // output gate W_g: D -> H*V; false: low rank W_gb [H*V, K] W_ga [K, D]
};

// vision_config (§1.7), K3's names: the tower model/vision_tower.h builds (docs/vision.md). Choices it does not
// implement are refused when the config is read; K3's values fill the optional sizes the file leaves out.
struct VisionConfig {
  int64_t patch_size = 0;
  int64_t vt_hidden_size = 0;
  int64_t vt_intermediate_size = 0;
  int64_t vt_num_attention_heads = 0;
  int64_t vt_num_hidden_layers = 0;
  std::vector<int64_t> merge_kernel_size = {2, 2};  // [h, w] patches merged into one token
  std::optional<int64_t> mm_hidden_size;            // projector input width
  std::optional<int64_t> text_hidden_size;          // projector output width; must equal hidden_size
  std::optional<int64_t> qkv_hidden_size;  // attention width (heads x head dim) when it differs from vt_hidden_size
  std::optional<int64_t> init_pos_emb_height;
  std::optional<int64_t> init_pos_emb_width;
  std::optional<int64_t> init_pos_emb_time;
  std::string activation_func = "gelu_pytorch_tanh";
  std::string projector_hidden_act = "gelu";
  double projector_ln_eps = 1e-5;
  std::string norm_type = "rmsnorm";
  std::string merge_type;
  std::string mlp_type;
  std::string mm_projector_type;
  std::string pos_emb_type;
  std::string pos_emb_interpolation_mode;
  bool attn_bias = false;
  bool linear_bias = false;
  bool patch_embed_proj_bias = false;
  // From the checkpoint's preprocessor_config.json ("media_proc_cfg", K3's image processor) when it has one
  // (load_model_config); unset: myriad's defaults (infer/image_input.h patch_options_for).
  std::optional<int64_t> in_patch_limit;           // patches per image before padding
  std::optional<int64_t> patch_limit_on_one_side;  // patches along one side
  std::optional<std::array<double, 3>> image_mean, image_std;
};

enum class AttnResMode { kBlock, kSkip, kNone };
enum class Balancing { kQuantile, kAuxLoss, kSignUpdate };
enum class Mixer { kKda, kMla };
enum class HiddenAct { kSitu, kSilu };               // SiTU-GLU | SwiGLU
enum class RouterActivation { kSigmoid, kSoftmax };  // the router scores' activation
enum class TopkMethod { kNoauxTc, kGreedy };         // selection on s + b (e_score_correction_bias) | on s

const char* attn_res_mode_name(AttnResMode mode);          // "block" | "skip" | "none"
const char* balancing_name(Balancing balancing);           // "qb" | "aux_loss" | "sign_update"
const char* mixer_name(Mixer mixer);                       // "KDA" | "MLA"
const char* hidden_act_name(HiddenAct act);                // "situ" | "silu"
const char* router_activation_name(RouterActivation act);  // "sigmoid" | "softmax"
const char* topk_method_name(TopkMethod method);           // "noaux_tc" | "greedy"

struct ModelConfig {
  std::string source;  // where it was read from (path or caller's label), for messages
  std::string model_type = "kimi_linear";
  std::string wrapper_model_type;  // e.g. "kimi_k3" when nested as text_config; empty when flat
  bool nested = false;             // text config was under "text_config"

  // Sizes.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // D
  int64_t intermediate_size = 0;  // dense SiTU-GLU width (first_k_dense_replace layers)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;  // MLA heads
  int64_t num_key_value_heads = 0;
  std::optional<int64_t> head_dim;  // only if the file gives it (K3 does not)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  HiddenAct hidden_act = HiddenAct::kSitu;  // config "situ" (SiTU-GLU) | "silu" (SwiGLU)
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;

  // MLA (§1.3).
  std::optional<int64_t> q_lora_rank;  // null: plain q_proj
  int64_t kv_lora_rank = 0;            // C
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool mla_use_nope = false;  // true: no RoPE on q_pe / k_pe
  bool mla_use_output_gate = false;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  // RoPE pairs: false rotates (i, i + Dr/2) (rotate-half, myriad's and Kimi's), true rotates (2i, 2i + 1)
  // (interleaved: DeepSeek-V3's checkpoints, whose modeling code de-interleaves before rotate-half).
  bool rope_interleave = false;
  std::optional<SparseMlaConfig> mla_sparse_attention;  // absent: dense MLA
  std::optional<int64_t> mla_logn_base;                 // absent: no log-n query scaling

  // KDA and the layer layout.
  std::optional<LinearAttnConfig> linear_attn_config;  // absent: every layer is MLA

  // FFN / MoE (§1.5).
  int64_t first_k_dense_replace = 0;  // layers [0, k) are dense
  int64_t moe_layer_freq = 1;         // layer l >= k is MoE when l % moe_layer_freq == 0
  int64_t num_experts = 0;            // E (routed)
  int64_t num_experts_per_token = 0;  // top-k
  int64_t num_shared_experts = 0;
  int64_t moe_intermediate_size = 0;                 // expert hidden width
  std::optional<int64_t> routed_expert_hidden_size;  // L (latent MoE); absent: experts act on D
  bool latent_moe_use_norm = true;                   // RMSNorm on the latent sum before W_up
  double routed_scaling_factor = 1.0;
  bool moe_renormalize = true;  // mixture weights over the chosen scores; as upstream, only when top_k > 1
  RouterActivation moe_router_activation_func = RouterActivation::kSigmoid;  // config "sigmoid" | "softmax"
  TopkMethod topk_method = TopkMethod::kNoauxTc;  // config "noaux_tc": e_score_correction_bias selects | "greedy"
  bool use_grouped_topk = false;
  int64_t num_expert_group = 1;
  int64_t topk_group = 1;
  double activation_situ_beta = 4.0;          // b1
  double activation_situ_linear_beta = 25.0;  // b2; +infinity (JSON null): no clamp, h(u) = u
  int64_t num_nextn_predict_layers = 0;       // MTP layers (not built by myriad)

  // AttnRes (§1.4).
  int64_t attn_res_block_size = 1;  // B
  AttnResMode attn_res_mode = AttnResMode::kBlock;

  // Balancing and capacity (myriad's own fields, §1.6; see the table above).
  Balancing balancing = Balancing::kQuantile;
  double aux_loss_coef = 0.001;
  double bias_update_rate = 0.001;
  std::optional<double> capacity_factor_start;  // absent: no capacity limit
  double capacity_factor_end = 0.0;             // = start when only start is given
  int64_t capacity_factor_steps = 0;
  double router_init_std = 0.006;

  // Tokens.
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> media_placeholder_token_id;
  std::optional<std::string> image_placeholder;

  std::optional<VisionConfig> vision_config;

  // Layer helpers; `layer` is 0-based.
  Mixer mixer(int64_t layer) const;
  bool is_moe_layer(int64_t layer) const;
  bool has_capacity_limit() const { return capacity_factor_start.has_value(); }
  double capacity_factor_at(int64_t step) const;  // the schedule; only meaningful with a capacity limit
  int64_t num_kda_layers() const;
  int64_t num_mla_layers() const;
  int64_t num_moe_layers() const;
  int64_t num_dense_layers() const { return num_hidden_layers - num_moe_layers(); }
  int64_t expert_width() const { return routed_expert_hidden_size.value_or(hidden_size); }  // L, or D
};

// Reads `path` (a config.json, or a directory holding one) and parses it. I/O and JSON syntax errors throw
// kIo / kFormat; everything else as parse_model_config. `warnings` may be null.
ModelConfig load_model_config(const std::string& path, std::vector<std::string>* warnings);

// Parses and validates an already-read config. `source` names it in messages. `warnings` may be null (they
// are still logged).
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source, std::vector<std::string>* warnings);

// A few readable lines: layers (KDA / MLA, dense / MoE), D, heads, experts and top-k, latent width, vocab,
// context, AttnRes, balancing; one line for the vision tower when present.
std::string model_config_summary(const ModelConfig& c);

}  // namespace myriad
