// Writing a model in another project's layout; see layout_convert.h.
#include "deploy/layout_convert.h"

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "data/tokenize/tokenizer.h"
#include "deploy/foreign_runtime.h"
#include "deploy/prune.h"
#include "infer/weight_layout.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

using ojson = nlohmann::ordered_json;

// Every reason the target's modeling code would compute something else than this config.
void check_convertible(const ModelConfig& c, CheckpointLayoutTarget target) {
  std::vector<std::string> why;
  const bool kimi = target == CheckpointLayoutTarget::kTransformersKimiLinear;
  if (c.attn_res_mode != AttnResMode::kNone) why.push_back("AttnRes (attn_res_mode)");
  if (c.routed_expert_hidden_size) why.push_back("latent MoE (routed_expert_hidden_size)");
  if (c.hidden_act != HiddenAct::kSilu) why.push_back("SiTU-GLU (hidden_act situ)");
  if (c.num_mla_layers() > 0 && c.mla_use_output_gate) why.push_back("the MLA output gate");
  if (c.num_moe_layers() > 0 && c.moe_router_activation_func != RouterActivation::kSigmoid)
    why.push_back("softmax routing (the target routes with sigmoid scores)");
  if (c.num_moe_layers() > 0 && c.topk_method != TopkMethod::kNoauxTc)
    why.push_back("greedy top-k without e_score_correction_bias");
  for (int64_t l = c.first_k_dense_replace; l < c.num_hidden_layers && c.num_moe_layers() > 0; ++l)
    if (!c.is_moe_layer(l)) {
      why.push_back("dense layers after the first MoE layer (moe_layer_freq)");
      break;
    }
  if (c.tie_word_embeddings) why.push_back("tied embeddings");
  for (std::string& w : myriad_only_attention(c)) why.push_back(std::move(w));
  if (kimi) {
    if (c.num_kda_layers() > 0) {
      if (!std::isinf(c.linear_attn_config->gate_lower_bound)) why.push_back("the bounded KDA gate (gate_lower_bound)");
      if (c.linear_attn_config->use_full_rank_gate) why.push_back("the full-rank KDA output gate");
    }
    if (c.num_mla_layers() > 0 && !c.mla_use_nope) why.push_back("RoPE on MLA (its MLA is NoPE)");
  } else {
    if (c.num_kda_layers() > 0) why.push_back("KDA layers");
    if (c.mla_use_nope) why.push_back("NoPE MLA (DeepSeek-V3 applies RoPE)");
  }
  if (why.empty()) return;
  std::string msg;
  for (const std::string& s : why) msg += (msg.empty() ? "" : "; ") + s;
  throw_error(ErrorKind::kUnsupported, c.source, ": ", kimi ? "transformers' kimi_linear" : "DeepSeek-V3",
              " cannot express: ", msg);
}

// The config.json fields both targets share (DeepseekV3Config's names).
ojson common_config(const ModelConfig& c) {
  ojson j;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["n_shared_experts"] = c.num_shared_experts;
  j["n_routed_experts"] = c.num_experts;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["q_lora_rank"] = c.q_lora_rank ? ojson(*c.q_lora_rank) : ojson(nullptr);
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["num_experts_per_tok"] = c.num_experts_per_token;
  j["norm_topk_prob"] = c.moe_renormalize;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = false;
  for (const auto& [k, v] :
       {std::pair{"pad_token_id", c.pad_token_id}, {"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id}})
    if (v) j[k] = *v;
  return j;
}

ojson target_config(const ModelConfig& c, CheckpointLayoutTarget target) {
  ojson j = common_config(c);
  if (target == CheckpointLayoutTarget::kTransformersKimiLinear) {
    j["architectures"] = {"KimiLinearForCausalLM"};
    j["model_type"] = "kimi_linear";
    const LinearAttnConfig* la = c.linear_attn_config ? &*c.linear_attn_config : nullptr;
    j["linear_num_key_heads"] = la ? la->num_heads : 0;
    j["linear_key_head_dim"] = la ? la->head_dim : 0;
    j["linear_conv_kernel_dim"] = la ? la->short_conv_kernel_size : 4;
    ojson layers = ojson::array(), mlp = ojson::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      layers.push_back(c.mixer(l) == Mixer::kKda ? "linear_attention" : "full_attention");
      mlp.push_back(c.is_moe_layer(l) ? "sparse" : "dense");
    }
    j["layer_types"] = layers;
    j["mlp_layer_types"] = mlp;
  } else {
    j["architectures"] = {"DeepseekV3ForCausalLM"};
    j["model_type"] = "deepseek_v3";
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["moe_layer_freq"] = c.moe_layer_freq;
    j["scoring_func"] = "sigmoid";
    j["topk_method"] = "noaux_tc";
    j["rope_theta"] = c.rope_theta;
    if (c.rope_scaling) {
      const RopeScaling& r = *c.rope_scaling;
      ojson rs = {{"type", "yarn"}, {"factor", r.factor}};
      if (r.original_max_position_embeddings)
        rs["original_max_position_embeddings"] = *r.original_max_position_embeddings;
      if (r.beta_fast) rs["beta_fast"] = *r.beta_fast;
      if (r.beta_slow) rs["beta_slow"] = *r.beta_slow;
      if (r.mscale) rs["mscale"] = *r.mscale;
      if (r.mscale_all_dim) rs["mscale_all_dim"] = *r.mscale_all_dim;
      j["rope_scaling"] = rs;
    }
    j["num_nextn_predict_layers"] = 0;
  }
  return j;
}

// One output tensor: its spec and how to make it (f32 values in the output's shape, cast afterwards).
struct Out {
  std::string name;
  Shape shape;
  std::function<Tensor()> make;
};

Tensor f32(const Tensor& t) {
  return t.dtype() == DType::kF32 ? t.contiguous() : t.to(DType::kF32);
}

// Rows [row0, row0 + R) of a [rows, cols] matrix from rotate-half pairs (i, i + R/2) to interleaved (2i, 2i + 1).
void interleave_rows(Tensor& w, int64_t row0, int64_t R) {
  const int64_t cols = w.size(1);
  float* d = w.data<float>();
  const std::vector<float> old(d + row0 * cols, d + (row0 + R) * cols);
  for (int64_t i = 0; i < R / 2; ++i) {
    std::memcpy(d + (row0 + 2 * i) * cols, old.data() + i * cols, size_t(cols) * sizeof(float));
    std::memcpy(d + (row0 + 2 * i + 1) * cols, old.data() + (R / 2 + i) * cols, size_t(cols) * sizeof(float));
  }
}

std::vector<Out> plan(const Checkpoint& ck, const ModelConfig& c, CheckpointLayoutTarget target) {
  const bool kimi = target == CheckpointLayoutTarget::kTransformersKimiLinear;
  std::vector<Out> out;
  auto same = [&](const std::string& to, const std::string& from) {
    out.push_back({to, ck.shape(from), [&ck, from] { return f32(ck.tensor(from)); }});
  };
  same("model.embed_tokens.weight", "model.embed_tokens.weight");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    same(p + "input_layernorm.weight", p + "input_layernorm.weight");
    same(p + "post_attention_layernorm.weight", p + "post_attention_layernorm.weight");
    const std::string a = p + "self_attn.";
    if (c.mixer(l) == Mixer::kKda) {
      const int64_t H = c.linear_attn_config->num_heads, K = c.linear_attn_config->head_dim;
      for (const char* x : {"q_proj", "k_proj", "v_proj", "o_proj", "o_norm"})
        same(a + x + ".weight", a + x + ".weight");
      for (const auto& [to, from] : {std::pair{"forget_gate_down", "f_a_proj"},
                                     {"forget_gate_up", "f_b_proj"},
                                     {"beta_proj", "b_proj"},
                                     {"output_gate_down", "g_a_proj"},
                                     {"output_gate_up", "g_b_proj"}})
        same(a + to + ".weight", a + from + ".weight");
      const int64_t W = ck.shape(a + "q_conv1d.weight").back();
      out.push_back({a + "conv1d.weight", {3 * H * K, 1, W}, [&ck, a, H, K, W] {
                       Tensor t = Tensor::empty({3 * H * K, 1, W});
                       int64_t r = 0;
                       for (const char* x : {"q", "k", "v"}) {
                         t.slice(0, r, r + H * K).copy_from(f32(ck.tensor(a + x + "_conv1d.weight")));
                         r += H * K;
                       }
                       return t;
                     }});
      out.push_back({a + "A_log", {H, 1}, [&ck, a, H] { return f32(ck.tensor(a + "A_log")).reshape({H, 1}); }});
      out.push_back({a + "dt_bias", {H, K}, [&ck, a, H, K] { return f32(ck.tensor(a + "dt_bias")).reshape({H, K}); }});
    } else {
      const int64_t H = c.num_attention_heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim, C = c.kv_lora_rank;
      const bool repair = !kimi && !c.rope_interleave;  // DeepSeek-V3 stores RoPE rows interleaved
      if (c.q_lora_rank) {
        same(a + "q_a_proj.weight", a + "q_a_proj.weight");
        same(a + "q_a_layernorm.weight", a + "q_a_layernorm.weight");
      }
      const std::string q = a + (c.q_lora_rank ? "q_b_proj.weight" : "q_proj.weight");
      out.push_back({q, ck.shape(q), [&ck, q, repair, H, Dn, Dr] {
                       Tensor w = f32(ck.tensor(q)).clone();
                       if (repair)
                         for (int64_t h = 0; h < H; ++h) interleave_rows(w, h * (Dn + Dr) + Dn, Dr);
                       return w;
                     }});
      const std::string kv = a + "kv_a_proj_with_mqa.weight";
      out.push_back({kv, ck.shape(kv), [&ck, kv, repair, C, Dr] {
                       Tensor w = f32(ck.tensor(kv)).clone();
                       if (repair) interleave_rows(w, C, Dr);
                       return w;
                     }});
      for (const char* x : {"kv_a_layernorm", "kv_b_proj", "o_proj"}) same(a + x + ".weight", a + x + ".weight");
    }
    if (!c.is_moe_layer(l)) {
      for (const char* x : {"gate_proj", "up_proj", "down_proj"})
        same(p + "mlp." + x + ".weight", p + "mlp." + x + ".weight");
      continue;
    }
    const std::string m = p + "block_sparse_moe.", o = p + "mlp.";
    same(o + "gate.weight", m + "gate.weight");
    same(o + "gate.e_score_correction_bias", m + "gate.e_score_correction_bias");
    const int64_t E = c.num_experts, F = c.moe_intermediate_size, D = c.hidden_size;
    if (kimi) {
      out.push_back({o + "experts.gate_up_proj", {E, 2 * F, D}, [&ck, m, E, F, D] {
                       Tensor t = Tensor::empty({E, 2 * F, D});
                       for (int64_t e = 0; e < E; ++e) {
                         const std::string x = m + "experts." + std::to_string(e) + ".";
                         t.select(0, e).slice(0, 0, F).copy_from(f32(ck.tensor(x + "w1.weight")));
                         t.select(0, e).slice(0, F, 2 * F).copy_from(f32(ck.tensor(x + "w3.weight")));
                       }
                       return t;
                     }});
      out.push_back({o + "experts.down_proj", {E, D, F}, [&ck, m, E, F, D] {
                       Tensor t = Tensor::empty({E, D, F});
                       for (int64_t e = 0; e < E; ++e)
                         t.select(0, e).copy_from(f32(ck.tensor(m + "experts." + std::to_string(e) + ".w2.weight")));
                       return t;
                     }});
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".", y = o + "experts." + std::to_string(e) + ".";
        same(y + "gate_proj.weight", x + "w1.weight");
        same(y + "up_proj.weight", x + "w3.weight");
        same(y + "down_proj.weight", x + "w2.weight");
      }
    }
    if (c.num_shared_experts > 0)
      for (const char* x : {"gate_proj", "up_proj", "down_proj"})
        same(o + "shared_experts." + x + ".weight", m + "shared_experts." + x + ".weight");
  }
  same("model.norm.weight", "model.norm.weight");
  same("lm_head.weight", "lm_head.weight");
  return out;
}

}  // namespace

CheckpointLayoutTarget parse_layout_target(const std::string& name) {
  if (name == "transformers") return CheckpointLayoutTarget::kTransformersKimiLinear;
  if (name == "deepseek-v3") return CheckpointLayoutTarget::kDeepSeekV3;
  throw_error(ErrorKind::kValue, "--to ", name, ": must be transformers (kimi_linear) or deepseek-v3");
}

LayoutConvertReport convert_model_layout(const std::string& model_dir, const std::string& out_dir,
                                         CheckpointLayoutTarget target, DType dtype, bool force) {
  MYRIAD_REQUIRE(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16, kValue,
                 "convert: --dtype must be f32, bf16 or f16");
  const ModelLocation loc = locate_model(model_dir, "the published layout ships its tokenizer beside the weights");
  const ModelConfig c = load_model_config((fs::path(loc.checkpoint_dir) / "config.json").string(), nullptr);
  check_convertible(c, target);
  std::error_code ec;
  MYRIAD_REQUIRE(fs::weakly_canonical(out_dir, ec) != fs::weakly_canonical(loc.checkpoint_dir, ec), kValue,
                 "convert: --out ", out_dir, " is the input model's directory; choose another");
  MYRIAD_REQUIRE(force || !fs::exists(out_dir, ec) || directory_is_empty(out_dir), kIo, "convert: ", out_dir,
                 " exists and is not empty (--force replaces it)");
  const Checkpoint ck = open_model_checkpoint(loc.checkpoint_dir, c);
  for (const std::string& n : ck.names())
    MYRIAD_REQUIRE(n.find(".qweight") == std::string::npos, kUnsupported, ck.path(), " is block-quantized (", n,
                   "); convert the unquantized model");
  const std::vector<Out> outs = plan(ck, c, target);
  // A_log, dt_bias and the router's correction bias stay f32 whatever --dtype, as published checkpoints keep them
  // (their modeling code reads them in f32).
  auto keep_f32 = [](const std::string& n) {
    for (const char* s : {".A_log", ".dt_bias", ".e_score_correction_bias"})
      if (n.size() >= std::strlen(s) && n.compare(n.size() - std::strlen(s), std::strlen(s), s) == 0) return true;
    return false;
  };
  std::vector<TensorSpec> specs;
  for (const Out& o : outs) specs.push_back({o.name, keep_f32(o.name) ? DType::kF32 : dtype, o.shape});
  StagedDirectory staged(out_dir);
  save_safetensors((fs::path(staged.path()) / "model.safetensors").string(), specs, [&](size_t i) {
    const Tensor t = outs[i].make();
    MYRIAD_CHECK(t.shape() == outs[i].shape, "convert: ", outs[i].name, " made ", shape_str(t.shape()));
    return specs[i].dtype == DType::kF32 ? t : t.to(specs[i].dtype);
  });
  ojson cfg = target_config(c, target);
  cfg["torch_dtype"] = dtype == DType::kF32 ? "float32" : dtype == DType::kBF16 ? "bfloat16" : "float16";
  write_file_atomic((fs::path(staged.path()) / "config.json").string(), cfg.dump(2) + "\n");
  Tokenizer::load(loc.tokenizer_dir).save((fs::path(staged.path()) / "tokenizer").string());
  staged.commit();
  LayoutConvertReport r;
  r.tensors = int64_t(specs.size());
  for (const TensorSpec& s : specs) r.bytes += *dtype_bytes(s.dtype, uint64_t(shape_numel(s.shape)));
  return r;
}

}  // namespace myriad
