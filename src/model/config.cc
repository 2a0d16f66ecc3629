// Model config parsing and validation; see config.h for the field table and the rules on unknown fields.
// Parsing walks the JSON once, object by object, with core/json_fields.h (the reader every config shares): what
// is left at the end is either known-ignored (silent) or unknown (one warning with its path). The first
// violated rule throws; messages read "<source>: <json path> = <value>: <rule>".
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/log.h"
#include "io/checksums.h"

namespace myriad {

using json = nlohmann::json;

namespace {

// NOTE: bounds on how much a config can make myriad describe (every layer's tensors, and each routed expert's three,
// as ParamSpecs in memory before any weight exists): a 5 KB config with 200,000 experts made `myriad params` take
// 15.7 GB and 32 s. K3 has 93 layers x 896 experts; these leave 700x and 12x of room.
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kMaxLayersTimesExperts = 1 << 20;

// Fields Hugging Face configs carry for generation, tooling or infrastructure. Known, never used, never warned.
const std::set<std::string>& ignored_fields() {
  static const std::set<std::string> kIgnored = {
      // identity / tooling
      "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "name_or_path",
      "_commit_hash", "_attn_implementation", "attn_implementation", "_attn_implementation_autoset", "tokenizer_class",
      "quantization_config", "use_cache", "pretraining_tp", "use_bfloat16", "torchscript", "tf_legacy_loss",
      "return_dict", "use_return_dict", "output_attentions", "output_hidden_states", "pruned_heads",
      "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "add_cross_attention",
      "cross_attention_hidden_size", "tie_encoder_decoder", "id2label", "label2id", "problem_type", "finetuning_task",
      "task_specific_params", "prefix", "sep_token_id", "decoder_start_token_id",
      // training-loss infrastructure handled elsewhere (myriad masks by its own rule)
      "ignore_index", "attention_dropout",
      // provenance records written by myriad tools (model/prune.h: "pruning")
      "pruning",
      // generation defaults (myriad's sampler takes these per request)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
      "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
      "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
      "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens"};
  return kIgnored;
}

using Obj = JsonFields;

// Reads the K3 name, or its alias; both present and different is an error.
std::optional<int64_t> int_with_alias(Obj& o, const std::string& name, const std::string& alias) {
  std::optional<int64_t> a = o.opt_int(name);
  std::optional<int64_t> b = o.opt_int(alias);
  if (a && b && *a != *b) o.fail(alias, *b, str("disagrees with ", name, " (", *a, "); give one of them"));
  return a ? a : b;
}

// linear_attn_config: KDA sizes and the layer layout. Every layer 1..n in exactly one list.
LinearAttnConfig parse_linear_attn(Obj& o, int64_t n_layers) {
  LinearAttnConfig la;
  la.kda_layers = o.req_int_list("kda_layers");
  la.full_attn_layers = o.req_int_list("full_attn_layers");
  const bool any_kda = !la.kda_layers.empty();
  const std::string why = " (needed by the KDA layers)";
  if (any_kda) {
    la.num_heads = o.req_int("num_heads", why);
    la.head_dim = o.req_int("head_dim", why);
  } else {
    la.num_heads = o.int_or("num_heads", 0);
    la.head_dim = o.int_or("head_dim", 0);
  }
  la.short_conv_kernel_size = o.int_or("short_conv_kernel_size", la.short_conv_kernel_size);
  la.gate_lower_bound = o.double_or("gate_lower_bound", la.gate_lower_bound);  // absent / null: unbounded
  la.use_full_rank_gate = o.bool_or("use_full_rank_gate", la.use_full_rank_gate);
  if (any_kda) {
    o.positive("num_heads", la.num_heads);
    o.positive("head_dim", la.head_dim);
  } else {
    o.non_negative("num_heads", la.num_heads);
    o.non_negative("head_dim", la.head_dim);
  }
  o.positive("short_conv_kernel_size", la.short_conv_kernel_size);
  if (!(la.gate_lower_bound < 0) || std::isnan(la.gate_lower_bound)) {
    o.fail("gate_lower_bound", la.gate_lower_bound, "must be < 0 (the log-decay g lies in (gate_lower_bound, 0))");
  }

  // Layout: 1-based, in range, each layer exactly once across both lists.
  std::vector<std::string> owner(size_t(n_layers) + 1);  // owner[l]: the list naming layer l, or ""
  for (const char* list : {"kda_layers", "full_attn_layers"}) {
    const auto& v = std::string(list) == "kda_layers" ? la.kda_layers : la.full_attn_layers;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string key = str(list, "[", i, "]");
      const int64_t l = v[i];
      if (l < 1 || l > n_layers) {
        o.fail(key, l, str("layer numbers are 1-based and must lie in 1..", n_layers, " (num_hidden_layers)"));
      }
      if (!owner[size_t(l)].empty()) {
        o.fail(key, l,
               owner[size_t(l)] == list ? str("layer ", l, " is listed twice in ", list)
                                        : str("layer ", l, " is listed in both kda_layers and full_attn_layers"));
      }
      owner[size_t(l)] = list;
    }
  }
  for (int64_t l = 1; l <= n_layers; ++l) {
    if (owner[size_t(l)].empty()) {
      throw_error(ErrorKind::kConfig, o.source().name, ": ", o.path(), ": layer ", l,
                  " is in neither kda_layers nor full_attn_layers (every layer 1..", n_layers,
                  " must be listed exactly once)");
    }
  }
  o.finish();
  return la;
}

RopeScaling parse_rope_scaling(Obj& o, int64_t max_positions) {
  RopeScaling r;
  std::optional<std::string> type = o.opt_string("type");
  std::optional<std::string> rope_type = o.opt_string("rope_type");
  if (type && rope_type && *type != *rope_type) {
    o.fail("rope_type", *rope_type, str("disagrees with type (\"", *type, "\")"));
  }
  if (!type && !rope_type) o.fail_missing("type", " (rope_scaling needs a type; myriad supports \"yarn\")");
  r.type = type ? *type : *rope_type;
  if (r.type != "yarn") o.fail(type ? "type" : "rope_type", r.type, "unknown rope_scaling type; expected \"yarn\"");
  r.factor = o.req_double("factor");
  r.original_max_position_embeddings = o.opt_int("original_max_position_embeddings");
  r.beta_fast = o.opt_double("beta_fast");
  r.beta_slow = o.opt_double("beta_slow");
  r.mscale = o.opt_double("mscale");
  r.mscale_all_dim = o.opt_double("mscale_all_dim");
  if (!(r.factor >= 1)) o.fail("factor", r.factor, "must be >= 1 (yarn extends the context)");
  if (r.original_max_position_embeddings) {
    const int64_t p = *r.original_max_position_embeddings;
    o.positive("original_max_position_embeddings", p);
    if (p > max_positions) {
      o.fail("original_max_position_embeddings", p, str("must be <= max_position_embeddings (", max_positions, ")"));
    }
  }
  if (r.beta_fast) o.positive("beta_fast", *r.beta_fast);
  if (r.beta_slow) o.positive("beta_slow", *r.beta_slow);
  if (r.beta_fast && r.beta_slow && !(*r.beta_fast > *r.beta_slow)) {
    o.fail("beta_fast", *r.beta_fast, str("must be > beta_slow (", *r.beta_slow, ")"));
  }
  if (r.mscale && *r.mscale < 0) o.fail("mscale", *r.mscale, "must be >= 0");
  if (r.mscale_all_dim && *r.mscale_all_dim < 0) o.fail("mscale_all_dim", *r.mscale_all_dim, "must be >= 0");
  o.finish();
  return r;
}

SparseMlaConfig parse_sparse_mla(Obj& o) {
  SparseMlaConfig s;
  s.block_size = o.int_or("block_size", s.block_size);
  s.top_k = o.int_or("top_k", s.top_k);
  s.window = o.int_or("window", s.window);
  o.positive("block_size", s.block_size);
  o.non_negative("top_k", s.top_k);
  o.non_negative("window", s.window);
  if (s.window % s.block_size != 0) {
    o.fail("window", s.window, str("must be a multiple of block_size (", s.block_size, ")"));
  }
  o.finish();
  return s;
}

const std::vector<std::string> kVisionActs = {"gelu_pytorch_tanh", "gelu"};

VisionConfig parse_vision(Obj& o, int64_t text_hidden) {
  VisionConfig v;
  v.patch_size = o.req_int("patch_size");
  v.vt_hidden_size = o.req_int("vt_hidden_size");
  v.vt_intermediate_size = o.req_int("vt_intermediate_size");
  v.vt_num_attention_heads = o.req_int("vt_num_attention_heads");
  v.vt_num_hidden_layers = o.req_int("vt_num_hidden_layers");
  if (o.present("merge_kernel_size")) v.merge_kernel_size = o.req_int_list("merge_kernel_size");
  o.find("merge_kernel_size");
  v.mm_hidden_size = o.opt_int("mm_hidden_size");
  v.text_hidden_size = o.opt_int("text_hidden_size");
  v.qkv_hidden_size = o.opt_int("qkv_hidden_size");
  v.init_pos_emb_height = o.opt_int("init_pos_emb_height");
  v.init_pos_emb_width = o.opt_int("init_pos_emb_width");
  v.init_pos_emb_time = o.opt_int("init_pos_emb_time");
  // The tower myriad builds (model/vision_tower.h): these choices are the ones implemented; others are refused
  // here, naming the field, rather than loading a model that would compute something else.
  v.activation_func = o.choice_or("activation_func", v.activation_func, kVisionActs);
  v.projector_hidden_act = o.choice_or("projector_hidden_act", v.projector_hidden_act, kVisionActs);
  v.projector_ln_eps = o.double_or("projector_ln_eps", v.projector_ln_eps);
  v.norm_type = o.choice_or("norm_type", v.norm_type, {"rmsnorm", "layernorm"});
  v.merge_type = o.choice_or("merge_type", "sd2_tpool", {"sd2_tpool"});
  v.mlp_type = o.choice_or("mlp_type", "mlp2", {"mlp2"});
  v.mm_projector_type = o.choice_or("mm_projector_type", "patchmergerv2", {"patchmergerv2", "patchmerger"});
  v.pos_emb_type = o.choice_or("pos_emb_type", "divided_fixed", {"divided_fixed"});
  v.pos_emb_interpolation_mode = o.choice_or("pos_emb_interpolation_mode", "bilinear", {"bilinear"});
  v.attn_bias = o.bool_or("attn_bias", v.attn_bias);
  v.linear_bias = o.bool_or("linear_bias", v.linear_bias);
  v.patch_embed_proj_bias = o.bool_or("patch_embed_proj_bias", v.patch_embed_proj_bias);
  o.find("model_type");  // the vision tower's own model_type, if any: informational

  o.positive("patch_size", v.patch_size);
  o.positive("vt_hidden_size", v.vt_hidden_size);
  o.positive("vt_intermediate_size", v.vt_intermediate_size);
  o.positive("vt_num_attention_heads", v.vt_num_attention_heads);
  o.positive("vt_num_hidden_layers", v.vt_num_hidden_layers);
  // The attention width is qkv_hidden_size when given (K3: 1536 = 12 heads x 128, while vt_hidden_size is
  // 1024, which 12 does not divide), else vt_hidden_size; it is split evenly over the heads.
  const std::string attn_key = v.qkv_hidden_size ? "qkv_hidden_size" : "vt_hidden_size";
  const int64_t attn_width = v.qkv_hidden_size.value_or(v.vt_hidden_size);
  if (attn_width <= 0) o.fail(attn_key, attn_width, "must be > 0");
  if (attn_width % v.vt_num_attention_heads != 0) {
    o.fail(attn_key, attn_width, str("must be divisible by vt_num_attention_heads (", v.vt_num_attention_heads, ")"));
  }
  if (v.merge_kernel_size.size() != 2 || v.merge_kernel_size[0] < 1 || v.merge_kernel_size[1] < 1) {
    o.fail("merge_kernel_size", json(v.merge_kernel_size), "must be two positive integers [h, w]");
  }
  for (const char* k : {"mm_hidden_size", "qkv_hidden_size", "init_pos_emb_height", "init_pos_emb_width",
                        "init_pos_emb_time", "text_hidden_size"}) {
    const json* x = o.find(k);
    if (x && !x->is_null() && x->get<int64_t>() <= 0) o.fail(k, *x, "must be > 0");
  }
  if (v.text_hidden_size && *v.text_hidden_size != text_hidden) {
    o.fail("text_hidden_size", *v.text_hidden_size, str("must equal the text model's hidden_size (", text_hidden, ")"));
  }
  if (v.mm_hidden_size && *v.mm_hidden_size != v.vt_hidden_size) {
    o.fail("mm_hidden_size", *v.mm_hidden_size,
           str("must equal vt_hidden_size (", v.vt_hidden_size, "): the projector reads the tower's output"));
  }
  if (attn_width / v.vt_num_attention_heads % 4 != 0) {
    o.fail(attn_key, attn_width,
           "must give a head dim divisible by 4 (the 2-D rotary embedding turns pairs by row and column)");
  }
  // K3's values where the file is silent.
  v.text_hidden_size = v.text_hidden_size.value_or(text_hidden);
  v.mm_hidden_size = v.mm_hidden_size.value_or(v.vt_hidden_size);
  v.init_pos_emb_height = v.init_pos_emb_height.value_or(64);
  v.init_pos_emb_width = v.init_pos_emb_width.value_or(64);
  v.init_pos_emb_time = v.init_pos_emb_time.value_or(4);
  o.positive("projector_ln_eps", v.projector_ln_eps);
  o.finish();
  return v;
}

void check_token_id(Obj& o, const std::string& key, const std::optional<int64_t>& id, int64_t vocab) {
  if (id && (*id < 0 || *id >= vocab)) o.fail(key, *id, str("must be a token id in 0..", vocab - 1, " (vocab_size)"));
}

// transformers 5's own kimi_linear config (KimiLinearConfig, a DeepseekV3Config): the layout as layer_types
// ("linear_attention" = KDA, "full_attention" = MLA) and mlp_layer_types ("dense" then "sparse"), KDA sizes as
// linear_num_key_heads / linear_key_head_dim / linear_conv_kernel_dim. Its modeling code fixes what the remote
// code's config spells out: the unbounded softplus gate, the low-rank output gate, NoPE MLA, SwiGLU, no AttnRes.
void parse_transformers_kimi_linear(Obj& o, ModelConfig& c) {
  LinearAttnConfig la;
  la.num_heads = o.int_or("linear_num_key_heads", 32);
  la.head_dim = o.int_or("linear_key_head_dim", 128);
  la.short_conv_kernel_size = o.int_or("linear_conv_kernel_dim", 4);
  la.use_full_rank_gate = false;
  o.positive("linear_num_key_heads", la.num_heads);
  o.positive("linear_key_head_dim", la.head_dim);
  o.positive("linear_conv_kernel_dim", la.short_conv_kernel_size);
  for (const char* key : {"linear_num_value_heads", "linear_value_head_dim"})  // = the key heads' (KDA has K = V)
    if (std::optional<int64_t> v = o.opt_int(key);
        v && *v != (std::string(key) == "linear_num_value_heads" ? la.num_heads : la.head_dim))
      o.fail(key, *v, "must equal the key heads' value (KDA has as many value heads as key heads, V = K)");
  auto names = [&](const char* key) {
    std::vector<std::string> out;
    if (const json* a = o.opt_array(key))
      for (size_t i = 0; i < a->size(); ++i) {
        if (!(*a)[i].is_string()) o.fail(key, *a, "must be a list of strings");
        out.push_back((*a)[i].get<std::string>());
      }
    if (!out.empty() && int64_t(out.size()) != c.num_hidden_layers)
      o.fail(key, *o.find(key), str("must have num_hidden_layers (", c.num_hidden_layers, ") entries"));
    return out;
  };
  const std::vector<std::string> layers = names("layer_types");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    // transformers' default: full attention every 4th layer after the first.
    const std::string t =
        layers.empty() ? (l && l % 4 == 0 ? "full_attention" : "linear_attention") : layers[size_t(l)];
    if (t == "linear_attention")
      la.kda_layers.push_back(l + 1);
    else if (t == "full_attention")
      la.full_attn_layers.push_back(l + 1);
    else
      o.fail("layer_types", t, "entries are \"linear_attention\" or \"full_attention\"");
  }
  c.linear_attn_config = la;
  const std::vector<std::string> mlp = names("mlp_layer_types");
  c.first_k_dense_replace = mlp.empty() ? 1 : 0;  // transformers' default: one dense layer first
  while (c.first_k_dense_replace < int64_t(mlp.size()) && mlp[size_t(c.first_k_dense_replace)] == "dense")
    ++c.first_k_dense_replace;
  for (size_t l = size_t(c.first_k_dense_replace); l < mlp.size(); ++l)
    if (mlp[l] != "sparse")
      o.fail_unsupported("mlp_layer_types", mlp[l], "myriad runs dense layers first, then MoE (\"sparse\") layers");
}

// The text model. `o` is the top level (flat) or text_config (nested).
void parse_text(Obj& o, ModelConfig& c) {
  // Identity.
  std::optional<std::string> mt = o.opt_string("model_type");
  if (!mt) {
    warn(o.source(), str(o.path("model_type"), " is missing; assuming \"kimi_linear\""));
  } else if (*mt != "kimi_linear" && *mt != "deepseek_v3") {
    o.fail("model_type", *mt, "myriad reads text configs of model_type \"kimi_linear\" or \"deepseek_v3\"");
  }
  // DeepSeek-V3's own defaults where its config.json is silent (its modeling code has no AttnRes, runs SwiGLU and
  // stores the RoPE dims interleaved); its field names are read as aliases below.
  const bool deepseek = mt && *mt == "deepseek_v3";
  if (deepseek) {
    c.model_type = "deepseek_v3";
    c.hidden_act = HiddenAct::kSilu;
    c.rope_interleave = true;
  }
  // transformers 5's own kimi_linear config (no linear_attn_config; see parse_transformers_kimi_linear): its
  // modeling code runs SwiGLU and NoPE MLA, without AttnRes.
  const bool transformers_native =
      !deepseek && !o.present("linear_attn_config") && (o.present("layer_types") || o.present("linear_num_key_heads"));
  if (transformers_native) {
    c.hidden_act = HiddenAct::kSilu;
    c.mla_use_nope = true;
  }

  // Sizes.
  c.vocab_size = o.req_int("vocab_size");
  c.hidden_size = o.req_int("hidden_size");
  c.num_hidden_layers = o.req_int("num_hidden_layers");
  c.max_position_embeddings = o.req_int("max_position_embeddings");
  o.positive("vocab_size", c.vocab_size);
  o.positive("hidden_size", c.hidden_size);
  o.positive("num_hidden_layers", c.num_hidden_layers);
  if (c.num_hidden_layers > kMaxLayers)
    o.fail("num_hidden_layers", c.num_hidden_layers, str("must be <= ", kMaxLayers));
  o.positive("max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = o.req_double("rms_norm_eps");
  if (!(c.rms_norm_eps > 0)) o.fail("rms_norm_eps", c.rms_norm_eps, "must be > 0");
  c.hidden_act = o.choice_or("hidden_act", hidden_act_name(c.hidden_act), {"situ", "silu"}) == "silu"
                     ? HiddenAct::kSilu
                     : HiddenAct::kSitu;
  c.tie_word_embeddings = o.bool_or("tie_word_embeddings", c.tie_word_embeddings);
  c.initializer_range = o.double_or("initializer_range", c.initializer_range);
  o.positive("initializer_range", c.initializer_range);
  c.head_dim = o.opt_int("head_dim");
  if (c.head_dim) o.positive("head_dim", *c.head_dim);

  // Layer layout.
  if (const json* la = o.opt_object("linear_attn_config")) {
    Obj lo(*la, o.path("linear_attn_config"), o.source());
    c.linear_attn_config = parse_linear_attn(lo, c.num_hidden_layers);
  } else if (transformers_native) {
    parse_transformers_kimi_linear(o, c);
  }
  if (!transformers_native) c.first_k_dense_replace = o.int_or("first_k_dense_replace", 0);
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers) {
    o.fail("first_k_dense_replace", c.first_k_dense_replace,
           str("must lie in 0..num_hidden_layers (", c.num_hidden_layers, ")"));
  }
  c.moe_layer_freq = o.int_or("moe_layer_freq", 1);
  o.positive("moe_layer_freq", c.moe_layer_freq);

  // MLA: required when some layer uses it.
  const bool any_mla = c.num_mla_layers() > 0;
  const std::string mla_why = " (needed by the MLA layers)";
  auto mla_int = [&](const std::string& key) { return any_mla ? o.req_int(key, mla_why) : o.int_or(key, 0); };
  c.num_attention_heads = mla_int("num_attention_heads");
  c.num_key_value_heads = o.int_or("num_key_value_heads", c.num_attention_heads);
  c.kv_lora_rank = mla_int("kv_lora_rank");
  c.qk_nope_head_dim = mla_int("qk_nope_head_dim");
  c.qk_rope_head_dim = mla_int("qk_rope_head_dim");
  c.v_head_dim = mla_int("v_head_dim");
  c.q_lora_rank = o.opt_int("q_lora_rank");  // null: plain q_proj
  c.mla_use_nope = o.bool_or("mla_use_nope", c.mla_use_nope);
  c.mla_use_output_gate = o.bool_or("mla_use_output_gate", c.mla_use_output_gate);
  c.rope_theta = o.double_or("rope_theta", c.rope_theta);
  c.rope_interleave = o.bool_or("rope_interleave", c.rope_interleave);
  if (any_mla) {
    o.positive("num_attention_heads", c.num_attention_heads);
    o.positive("num_key_value_heads", c.num_key_value_heads);
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
      o.fail("num_key_value_heads", c.num_key_value_heads,
             str("must divide num_attention_heads (", c.num_attention_heads, ")"));
    }
    o.positive("kv_lora_rank", c.kv_lora_rank);
    o.non_negative("qk_nope_head_dim", c.qk_nope_head_dim);
    o.non_negative("qk_rope_head_dim", c.qk_rope_head_dim);
    if (c.qk_nope_head_dim + c.qk_rope_head_dim == 0) {
      o.fail("qk_nope_head_dim", c.qk_nope_head_dim, "qk_nope_head_dim + qk_rope_head_dim must be > 0");
    }
    o.positive("v_head_dim", c.v_head_dim);
    if (!c.mla_use_nope && c.qk_rope_head_dim % 2 != 0) {
      o.fail("qk_rope_head_dim", c.qk_rope_head_dim, "must be even when RoPE is applied (mla_use_nope false)");
    }
  }
  if (c.q_lora_rank) o.positive("q_lora_rank", *c.q_lora_rank);
  o.positive("rope_theta", c.rope_theta);
  if (const json* rs = o.opt_object("rope_scaling")) {
    Obj ro(*rs, o.path("rope_scaling"), o.source());
    c.rope_scaling = parse_rope_scaling(ro, c.max_position_embeddings);
    if (c.mla_use_nope) warn(o.source(), str(o.path("rope_scaling"), " has no effect: mla_use_nope is true (no RoPE)"));
  }
  if (const json* sa = o.opt_object("mla_sparse_attention")) {
    Obj so(*sa, o.path("mla_sparse_attention"), o.source());
    c.mla_sparse_attention = parse_sparse_mla(so);
  }
  c.mla_logn_base = o.opt_int("mla_logn_base");
  if (c.mla_logn_base && *c.mla_logn_base < 2) o.fail("mla_logn_base", *c.mla_logn_base, "must be >= 2 (a length)");

  // Dense FFN and MoE.
  const bool any_dense = c.num_dense_layers() > 0;
  const bool any_moe = c.num_moe_layers() > 0;
  const std::string moe_why = " (needed by the MoE layers)";
  c.intermediate_size =
      any_dense ? o.req_int("intermediate_size", " (needed by the dense layers)") : o.int_or("intermediate_size", 0);
  if (any_dense) o.positive("intermediate_size", c.intermediate_size);
  std::optional<int64_t> experts = int_with_alias(o, "num_experts", "n_routed_experts");
  std::optional<int64_t> topk = int_with_alias(o, "num_experts_per_token", "num_experts_per_tok");
  std::optional<int64_t> shared = int_with_alias(o, "num_shared_experts", "n_shared_experts");
  if (any_moe && !experts) o.fail_missing("num_experts", moe_why);
  if (any_moe && !topk) o.fail_missing("num_experts_per_token", moe_why);
  c.num_experts = experts.value_or(0);
  c.num_experts_per_token = topk.value_or(0);
  c.num_shared_experts = shared.value_or(0);
  c.moe_intermediate_size =
      any_moe ? o.req_int("moe_intermediate_size", moe_why) : o.int_or("moe_intermediate_size", 0);
  c.routed_expert_hidden_size = o.opt_int("routed_expert_hidden_size");
  c.latent_moe_use_norm = o.bool_or("latent_moe_use_norm", c.latent_moe_use_norm);
  c.routed_scaling_factor = o.double_or("routed_scaling_factor", c.routed_scaling_factor);
  c.moe_renormalize =
      o.bool_or(o.present("norm_topk_prob") && !o.present("moe_renormalize") ? "norm_topk_prob" : "moe_renormalize",
                c.moe_renormalize);
  const std::string act_key = o.present("scoring_func") && !o.present("moe_router_activation_func")
                                  ? "scoring_func"
                                  : "moe_router_activation_func";  // DeepSeek-V3 calls it scoring_func
  c.moe_router_activation_func =
      o.choice_or(act_key, router_activation_name(c.moe_router_activation_func), {"sigmoid", "softmax"}) == "softmax"
          ? RouterActivation::kSoftmax
          : RouterActivation::kSigmoid;
  c.topk_method = o.choice_or("topk_method", topk_method_name(c.topk_method), {"noaux_tc", "greedy"}) == "greedy"
                      ? TopkMethod::kGreedy
                      : TopkMethod::kNoauxTc;
  c.use_grouped_topk = o.bool_or("use_grouped_topk", c.use_grouped_topk);
  if (std::optional<int64_t> groups = int_with_alias(o, "num_expert_group", "n_group")) {
    c.num_expert_group = *groups;
    if (deepseek) c.use_grouped_topk = true;  // DeepSeek-V3's router always limits by group when n_group > 1
  }
  c.topk_group = o.int_or("topk_group", c.topk_group);
  c.activation_situ_beta = o.double_or("activation_situ_beta", c.activation_situ_beta);
  // null is the upstream reading "no clamp on the up projection" (h(u) = u): b2 = +infinity.
  if (const nlohmann::json* b2 = o.find("activation_situ_linear_beta"); b2 && b2->is_null())
    c.activation_situ_linear_beta = std::numeric_limits<double>::infinity();
  else
    c.activation_situ_linear_beta = o.double_or("activation_situ_linear_beta", c.activation_situ_linear_beta);
  c.num_nextn_predict_layers = o.int_or("num_nextn_predict_layers", 0);
  c.router_init_std = o.double_or("router_init_std", c.router_init_std);
  if (any_moe) {
    const std::string e_key = o.present("num_experts") ? "num_experts" : "n_routed_experts";
    o.positive(e_key, c.num_experts);
    if (c.num_experts > kMaxLayersTimesExperts / c.num_hidden_layers) {
      o.fail(e_key, c.num_experts,
             str("num_hidden_layers x num_experts must be <= ", kMaxLayersTimesExperts, " (here ", c.num_hidden_layers,
                 " layers; K3 has 93 x 896)"));
    }
    const std::string k_key = o.present("num_experts_per_token") ? "num_experts_per_token" : "num_experts_per_tok";
    o.positive(k_key, c.num_experts_per_token);
    if (c.num_experts_per_token > c.num_experts) {
      o.fail(k_key, c.num_experts_per_token, str("must be <= num_experts (", c.num_experts, ")"));
    }
    o.positive("moe_intermediate_size", c.moe_intermediate_size);
  }
  o.non_negative(
      o.present("n_shared_experts") && !o.present("num_shared_experts") ? "n_shared_experts" : "num_shared_experts",
      c.num_shared_experts);
  if (c.routed_expert_hidden_size) o.positive("routed_expert_hidden_size", *c.routed_expert_hidden_size);
  o.positive("routed_scaling_factor", c.routed_scaling_factor);
  const std::string group_key =
      o.present("n_group") && !o.present("num_expert_group") ? "n_group" : "num_expert_group";  // as written
  o.positive(group_key, c.num_expert_group);
  if (c.topk_group < 1 || c.topk_group > c.num_expert_group) {
    o.fail("topk_group", c.topk_group, str("must lie in 1..num_expert_group (", c.num_expert_group, ")"));
  }
  if (any_moe && c.num_experts % c.num_expert_group != 0) {
    o.fail(group_key, c.num_expert_group, str("must divide num_experts (", c.num_experts, ")"));
  }
  if (c.use_grouped_topk && c.num_expert_group > 1) {
    o.fail_unsupported(
        group_key, c.num_expert_group,
        "group-limited routing (more than one expert group: DeepSeek-V3's n_group, or use_grouped_topk) is not "
        "supported");
  }
  o.positive("activation_situ_beta", c.activation_situ_beta);
  if (!std::isinf(c.activation_situ_linear_beta))
    o.positive("activation_situ_linear_beta", c.activation_situ_linear_beta);
  o.non_negative("num_nextn_predict_layers", c.num_nextn_predict_layers);
  if (c.num_nextn_predict_layers > 0) {
    warn(o.source(), str(o.path("num_nextn_predict_layers"), " = ", c.num_nextn_predict_layers,
                         ": multi-token-prediction layers are not built by myriad; their weights are ignored"));
  }
  o.positive("router_init_std", c.router_init_std);

  // AttnRes.
  const std::string mode =
      o.choice_or("attn_res_mode", deepseek || transformers_native ? "none" : "block", {"block", "skip", "none"});
  c.attn_res_mode = mode == "block" ? AttnResMode::kBlock : mode == "skip" ? AttnResMode::kSkip : AttnResMode::kNone;
  if (c.attn_res_mode == AttnResMode::kNone) {
    c.attn_res_block_size = o.int_or("attn_res_block_size", 1);
  } else {
    c.attn_res_block_size =
        o.req_int("attn_res_block_size",
                  str(" (attn_res_mode is \"", mode, "\"; set attn_res_mode to \"none\" for a plain residual stream)"));
  }
  o.at_least("attn_res_block_size", c.attn_res_block_size, 1);

  // Balancing and capacity (myriad's own fields).
  const std::string bal = o.choice_or("balancing", "qb", {"qb", "aux_loss", "sign_update"});
  c.balancing = bal == "qb" ? Balancing::kQuantile : bal == "aux_loss" ? Balancing::kAuxLoss : Balancing::kSignUpdate;
  c.aux_loss_coef = o.double_or("aux_loss_coef", c.aux_loss_coef);
  c.bias_update_rate = o.double_or("bias_update_rate", c.bias_update_rate);
  if (c.aux_loss_coef < 0) o.fail("aux_loss_coef", c.aux_loss_coef, "must be >= 0");
  if (c.bias_update_rate < 0) o.fail("bias_update_rate", c.bias_update_rate, "must be >= 0");
  c.capacity_factor_start = o.opt_double("capacity_factor_start");
  std::optional<double> cf_end = o.opt_double("capacity_factor_end");
  std::optional<int64_t> cf_steps = o.opt_int("capacity_factor_steps");
  if (!c.capacity_factor_start) {
    if (cf_end) o.fail("capacity_factor_end", *cf_end, "given without capacity_factor_start");
    if (cf_steps) o.fail("capacity_factor_steps", *cf_steps, "given without capacity_factor_start");
  } else {
    const double start = *c.capacity_factor_start;
    o.positive("capacity_factor_start", start);
    c.capacity_factor_end = cf_end.value_or(start);
    c.capacity_factor_steps = cf_steps.value_or(0);
    o.positive("capacity_factor_end", c.capacity_factor_end);
    if (c.capacity_factor_end > start) {
      o.fail("capacity_factor_end", c.capacity_factor_end,
             str("must be <= capacity_factor_start (", start, "): the schedule goes from high to low"));
    }
    o.non_negative("capacity_factor_steps", c.capacity_factor_steps);
    if (c.capacity_factor_end != start && c.capacity_factor_steps == 0) {
      o.fail("capacity_factor_steps", c.capacity_factor_steps,
             "must be > 0 when capacity_factor_end differs from capacity_factor_start");
    }
  }

  // Tokens.
  c.pad_token_id = o.opt_int("pad_token_id");
  c.bos_token_id = o.opt_int("bos_token_id");
  c.eos_token_id = o.opt_int("eos_token_id");
  c.media_placeholder_token_id = o.opt_int("media_placeholder_token_id");
  c.image_placeholder = o.opt_string("image_placeholder");
  check_token_id(o, "pad_token_id", c.pad_token_id, c.vocab_size);
  check_token_id(o, "bos_token_id", c.bos_token_id, c.vocab_size);
  check_token_id(o, "eos_token_id", c.eos_token_id, c.vocab_size);
  check_token_id(o, "media_placeholder_token_id", c.media_placeholder_token_id, c.vocab_size);
}

// A field of the wrapper (K3's top level) that may repeat a text_config field: the text value wins, and
// both present must agree.
template <class T>
void merge_outer(Obj& top, const std::string& key, std::optional<T> outer, std::optional<T>& inner) {
  if (!outer) return;
  if (inner && *inner != *outer) {
    top.fail(key, *outer, str("disagrees with text_config.", key, " (", json(*inner).dump(), ")"));
  }
  inner = outer;
}

void parse_vision_if_present(Obj& o, ModelConfig& c) {
  if (const json* vc = o.opt_object("vision_config")) {
    Obj vo(*vc, o.path("vision_config"), o.source());
    c.vision_config = parse_vision(vo, c.hidden_size);
  }
}

}  // namespace

const char* attn_res_mode_name(AttnResMode mode) {
  switch (mode) {
    case AttnResMode::kBlock:
      return "block";
    case AttnResMode::kSkip:
      return "skip";
    case AttnResMode::kNone:
      return "none";
  }
  return "?";
}

const char* balancing_name(Balancing balancing) {
  switch (balancing) {
    case Balancing::kQuantile:
      return "qb";
    case Balancing::kAuxLoss:
      return "aux_loss";
    case Balancing::kSignUpdate:
      return "sign_update";
  }
  return "?";
}

const char* hidden_act_name(HiddenAct act) {
  return act == HiddenAct::kSilu ? "silu" : "situ";
}

const char* router_activation_name(RouterActivation act) {
  return act == RouterActivation::kSoftmax ? "softmax" : "sigmoid";
}

const char* topk_method_name(TopkMethod method) {
  return method == TopkMethod::kGreedy ? "greedy" : "noaux_tc";
}

const char* mixer_name(Mixer mixer) {
  return mixer == Mixer::kKda ? "KDA" : "MLA";
}

Mixer ModelConfig::mixer(int64_t layer) const {
  MYRIAD_CHECK(layer >= 0 && layer < num_hidden_layers, "layer ", layer, " of ", num_hidden_layers);
  if (!linear_attn_config) return Mixer::kMla;
  const auto& kda = linear_attn_config->kda_layers;
  return std::find(kda.begin(), kda.end(), layer + 1) != kda.end() ? Mixer::kKda : Mixer::kMla;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  MYRIAD_CHECK(layer >= 0 && layer < num_hidden_layers, "layer ", layer, " of ", num_hidden_layers);
  return layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
}

double ModelConfig::capacity_factor_at(int64_t step) const {
  const double start = capacity_factor_start.value_or(0.0);
  if (capacity_factor_steps <= 0 || step >= capacity_factor_steps) return capacity_factor_end;
  if (step <= 0) return start;
  return start + (capacity_factor_end - start) * double(step) / double(capacity_factor_steps);
}

int64_t ModelConfig::num_kda_layers() const {
  return linear_attn_config ? int64_t(linear_attn_config->kda_layers.size()) : 0;
}

int64_t ModelConfig::num_mla_layers() const {
  return num_hidden_layers - num_kda_layers();
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

ModelConfig parse_model_config(const json& j, const std::string& source, std::vector<std::string>* warnings) {
  // Hugging Face configs carry fields for other tools: an unknown field is a warning, not an error.
  const JsonSource ctx{source, UnknownFields::kWarn, &ignored_fields(), warnings};
  MYRIAD_REQUIRE(j.is_object(), kConfig, source, ": the config must be a JSON object (got ", j.type_name(), ")");
  ModelConfig c;
  c.source = source;
  Obj top(j, "", ctx);
  if (const json* tc = top.opt_object("text_config")) {
    // K3's multimodal layout: text_config + vision_config, token ids repeated at the top level.
    c.nested = true;
    c.wrapper_model_type = top.string_or("model_type", "");
    Obj text(*tc, "text_config", ctx);
    parse_text(text, c);
    parse_vision_if_present(text, c);  // tolerated inside text_config too
    text.finish();
    std::optional<bool> tie_outer = top.opt_bool("tie_word_embeddings");
    std::optional<bool> tie_inner =
        text.present("tie_word_embeddings") ? std::optional<bool>(c.tie_word_embeddings) : std::nullopt;
    merge_outer(top, "tie_word_embeddings", tie_outer, tie_inner);
    c.tie_word_embeddings = tie_inner.value_or(c.tie_word_embeddings);
    for (const char* key : {"pad_token_id", "bos_token_id", "eos_token_id", "media_placeholder_token_id"}) {
      std::optional<int64_t>& inner = std::string(key) == "pad_token_id"   ? c.pad_token_id
                                      : std::string(key) == "bos_token_id" ? c.bos_token_id
                                      : std::string(key) == "eos_token_id" ? c.eos_token_id
                                                                           : c.media_placeholder_token_id;
      merge_outer(top, key, top.opt_int(key), inner);
      check_token_id(top, key, inner, c.vocab_size);
    }
    std::optional<std::string> ph = top.opt_string("image_placeholder");
    merge_outer(top, "image_placeholder", ph, c.image_placeholder);
    if (c.vision_config) {
      if (top.present("vision_config")) {
        top.fail("vision_config", *top.find("vision_config"), "given both here and inside text_config; give one");
      }
    } else {
      parse_vision_if_present(top, c);
    }
  } else {
    parse_text(top, c);
    parse_vision_if_present(top, c);
  }
  top.finish();
  return c;
}

namespace {

// K3's image processor settings (its preprocessor_config.json: {"media_proc_cfg": {...}}). The patch size and
// merge window must be the vision_config's; the budget, the side limit and the normalisation are taken.
void read_media_proc_cfg(const std::string& path, VisionConfig& v) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open ", path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const json doc = parse_json_document(text, path, ErrorKind::kFormat);
  const json* cfg = doc.is_object() && doc.contains("media_proc_cfg") ? &doc["media_proc_cfg"] : nullptr;
  if (!cfg) return;  // another processor's file (no media_proc_cfg): nothing of K3's to follow
  MYRIAD_REQUIRE(cfg->is_object(), kFormat, path, ": media_proc_cfg must be an object");
  auto positive = [&](const char* key) -> std::optional<int64_t> {
    if (!cfg->contains(key) || (*cfg)[key].is_null()) return std::nullopt;
    const json& x = (*cfg)[key];
    MYRIAD_REQUIRE(x.is_number_integer() && x.get<int64_t>() > 0, kFormat, path, ": media_proc_cfg.", key, " = ",
                   x.dump(), " must be a positive integer");
    return x.get<int64_t>();
  };
  if (const auto ps = positive("patch_size"))
    MYRIAD_REQUIRE(*ps == v.patch_size, kFormat, path, ": media_proc_cfg.patch_size = ", *ps,
                   " differs from config.json's vision_config.patch_size = ", v.patch_size);
  if (cfg->contains("merge_kernel_size")) {
    const json& m = (*cfg)["merge_kernel_size"];
    const bool ok = (m.is_number_integer() && m.get<int64_t>() == v.merge_kernel_size[0] &&
                     m.get<int64_t>() == v.merge_kernel_size[1]) ||
                    (m.is_array() && m.size() == 2 && m[0].is_number_integer() && m[1].is_number_integer() &&
                     m[0].get<int64_t>() == v.merge_kernel_size[0] && m[1].get<int64_t>() == v.merge_kernel_size[1]);
    MYRIAD_REQUIRE(ok, kFormat, path, ": media_proc_cfg.merge_kernel_size = ", m.dump(),
                   " differs from config.json's vision_config.merge_kernel_size = ", json(v.merge_kernel_size).dump());
  }
  v.in_patch_limit = positive("in_patch_limit");
  v.patch_limit_on_one_side = positive("patch_limit_on_one_side");
  for (const auto& [field, dst] : {std::pair{"image_mean", &v.image_mean}, std::pair{"image_std", &v.image_std}}) {
    const std::string key = field;  // a copy: clang 14 cannot capture a structured binding in the lambda
    const bool is_std = key == "image_std";
    if (!cfg->contains(key)) continue;
    const json& x = (*cfg)[key];
    const bool ok = x.is_array() && x.size() == 3 && std::all_of(x.begin(), x.end(), [is_std](const json& e) {
                      return e.is_number() && (!is_std || e.get<double>() > 0);
                    });
    MYRIAD_REQUIRE(ok, kFormat, path, ": media_proc_cfg.", key, " = ", x.dump(), " must be three numbers",
                   is_std ? " > 0" : "");
    *dst = std::array<double, 3>{x[0].get<double>(), x[1].get<double>(), x[2].get<double>()};
  }
}

}  // namespace

ModelConfig load_model_config(const std::string& path, std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open model config ", p.string());
  verify_checksum(p.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MYRIAD_REQUIRE(!in.bad(), kIo, "cannot read model config ", p.string());
  ModelConfig c = parse_model_config(parse_json_document(text, p.string(), ErrorKind::kFormat), p.string(), warnings);
  const fs::path pre = p.parent_path() / "preprocessor_config.json";
  if (c.vision_config && fs::exists(pre, ec)) read_media_proc_cfg(pre.string(), *c.vision_config);
  return c;
}

std::string model_config_summary(const ModelConfig& c) {
  std::ostringstream os;
  os << c.model_type;
  if (c.nested) os << " (text_config of " << (c.wrapper_model_type.empty() ? "?" : c.wrapper_model_type) << ")";
  os << ": " << c.num_hidden_layers << " layers: " << c.num_kda_layers() << " KDA + " << c.num_mla_layers() << " MLA; "
     << c.num_dense_layers() << " dense + " << c.num_moe_layers() << " MoE\n";
  os << "  D " << c.hidden_size << ", vocab " << c.vocab_size << ", context " << c.max_position_embeddings
     << ", hidden_act " << hidden_act_name(c.hidden_act) << ", rms_norm_eps " << c.rms_norm_eps
     << (c.tie_word_embeddings ? ", tied embeddings" : "") << "\n";
  if (c.num_kda_layers() > 0) {
    const auto& la = *c.linear_attn_config;
    os << "  KDA: " << la.num_heads << " heads x " << la.head_dim << ", conv " << la.short_conv_kernel_size
       << (std::isinf(la.gate_lower_bound) ? std::string(", unbounded (softplus) gate")
                                           : ", gate lower bound " + std::to_string(la.gate_lower_bound))
       << (la.use_full_rank_gate ? ", full-rank gate" : "") << "\n";
  }
  if (c.num_mla_layers() > 0) {
    os << "  MLA: " << c.num_attention_heads << " heads, q_lora "
       << (c.q_lora_rank ? std::to_string(*c.q_lora_rank) : std::string("none")) << ", kv_lora " << c.kv_lora_rank
       << ", qk " << c.qk_nope_head_dim << "+" << c.qk_rope_head_dim << (c.mla_use_nope ? " (no RoPE)" : " (RoPE)")
       << ", v " << c.v_head_dim << (c.mla_use_output_gate ? ", output gate" : "") << "\n";
  }
  if (c.num_moe_layers() > 0) {
    os << "  MoE: " << c.num_experts << " experts top-" << c.num_experts_per_token << " + " << c.num_shared_experts
       << " shared, expert width " << c.moe_intermediate_size << ", latent "
       << (c.routed_expert_hidden_size ? std::to_string(*c.routed_expert_hidden_size) : std::string("none (D)"))
       << ", router " << router_activation_name(c.moe_router_activation_func) << ", scale " << c.routed_scaling_factor
       << "\n";
  }
  if (c.num_dense_layers() > 0) os << "  dense FFN width " << c.intermediate_size << "\n";
  os << "  AttnRes " << attn_res_mode_name(c.attn_res_mode);
  if (c.attn_res_mode != AttnResMode::kNone) os << " (block size " << c.attn_res_block_size << ")";
  os << "; balancing " << balancing_name(c.balancing);
  if (c.has_capacity_limit()) {
    os << ", capacity factor " << *c.capacity_factor_start << " -> " << c.capacity_factor_end << " over "
       << c.capacity_factor_steps << " steps";
  } else {
    os << ", no capacity limit";
  }
  os << "\n";
  if (c.vision_config) {
    const auto& v = *c.vision_config;
    os << "  vision: patch " << v.patch_size << ", " << v.vt_num_hidden_layers << " layers, width " << v.vt_hidden_size
       << ", " << v.vt_num_attention_heads << " heads, merge " << v.merge_kernel_size[0] << "x"
       << v.merge_kernel_size[1] << "\n";
  }
  return os.str();
}

}  // namespace myriad
