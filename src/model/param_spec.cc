// Parameter specification (see param_spec.h): the tensor list of docs/tensors.md, built from the config.
#include "model/param_spec.h"

#include <unordered_set>

#include "core/error.h"
#include "io/checkpoint.h"

namespace myriad {

const char* component_name(Component c) {
  switch (c) {
    case Component::kEmbeddings:
      return "embeddings";
    case Component::kKda:
      return "kda";
    case Component::kMla:
      return "mla";
    case Component::kAttnRes:
      return "attn_res";
    case Component::kDenseFfn:
      return "dense_ffn";
    case Component::kRouter:
      return "router";
    case Component::kRoutedExperts:
      return "routed_experts";
    case Component::kSharedExperts:
      return "shared_experts";
    case Component::kLatentProj:
      return "latent_proj";
    case Component::kNorms:
      return "norms";
    case Component::kHead:
      return "head";
    case Component::kVision:
      return "vision_tower";
    case Component::kProjector:
      return "mm_projector";
  }
  return "?";
}

namespace {

// Appends specs with a fixed component / layer; the helpers say which kind of tensor each one is.
class SpecList {
 public:
  explicit SpecList(std::vector<ParamSpec>* out) : out_(out) {}
  void at(Component c, int64_t layer, std::string prefix) {
    component_ = c;
    layer_ = layer;
    prefix_ = std::move(prefix);
  }
  // A linear (or embedding) weight: N(0, initializer_range), weight decay.
  void linear(const std::string& name, Shape shape, int64_t expert = -1) {
    add(name, std::move(shape), ParamInit::kNormal, /*decay=*/true, expert);
  }
  void rmsnorm(const std::string& name, int64_t n) { add(name, {n}, ParamInit::kOnes, /*decay=*/false); }
  void add(const std::string& name, Shape shape, ParamInit init, bool decay, int64_t expert = -1, bool buffer = false) {
    ParamSpec s;
    s.name = prefix_ + name;
    s.shape = std::move(shape);
    s.component = component_;
    s.layer = layer_;
    s.expert = expert;
    s.weight_decay = decay;
    s.buffer = buffer;
    s.init = init;
    out_->push_back(std::move(s));
  }

 private:
  std::vector<ParamSpec>* out_;
  Component component_ = Component::kNorms;
  int64_t layer_ = -1;
  std::string prefix_;
};

void add_kda(SpecList& s, const ModelConfig& c) {
  const LinearAttnConfig& la = *c.linear_attn_config;
  const int64_t D = c.hidden_size, H = la.num_heads, K = la.head_dim, HK = H * K, W = la.short_conv_kernel_size;
  for (const char* p : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) s.linear(p, {HK, D});
  for (const char* p : {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"})
    s.add(p, {HK, 1, W}, ParamInit::kConv, /*decay=*/true);
  s.add("A_log", {H}, ParamInit::kALog, /*decay=*/false);
  s.linear("f_a_proj.weight", {K, D});
  s.linear("f_b_proj.weight", {HK, K});
  s.add("dt_bias", {HK}, ParamInit::kDtBias, /*decay=*/false);
  s.linear("b_proj.weight", {H, D});
  if (la.use_full_rank_gate) {
    s.linear("g_proj.weight", {HK, D});
  } else {
    s.linear("g_a_proj.weight", {K, D});
    s.linear("g_b_proj.weight", {HK, K});
  }
  s.rmsnorm("o_norm.weight", K);
  s.linear("o_proj.weight", {D, HK});
}

void add_mla(SpecList& s, const ModelConfig& c) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, Dn = c.qk_nope_head_dim, Dr = c.qk_rope_head_dim,
                Dv = c.v_head_dim, Ckv = c.kv_lora_rank;
  if (c.q_lora_rank) {
    const int64_t Cq = *c.q_lora_rank;
    s.linear("q_a_proj.weight", {Cq, D});
    s.rmsnorm("q_a_layernorm.weight", Cq);
    s.linear("q_b_proj.weight", {H * (Dn + Dr), Cq});
  } else {
    s.linear("q_proj.weight", {H * (Dn + Dr), D});
  }
  s.linear("kv_a_proj_with_mqa.weight", {Ckv + Dr, D});
  s.rmsnorm("kv_a_layernorm.weight", Ckv);
  s.linear("kv_b_proj.weight", {H * (Dn + Dv), Ckv});
  if (c.mla_use_output_gate) s.linear("g_proj.weight", {H * Dv, D});
  s.linear("o_proj.weight", {D, H * Dv});
}

// A SiTU-GLU D -> width -> D (dense FFN, shared experts).
void add_glu(SpecList& s, int64_t D, int64_t width) {
  s.linear("gate_proj.weight", {width, D});
  s.linear("up_proj.weight", {width, D});
  s.linear("down_proj.weight", {D, width});
}

void add_moe(SpecList& s, const ModelConfig& c, int64_t l) {
  const int64_t D = c.hidden_size, E = c.num_experts, F = c.moe_intermediate_size, L = c.expert_width();
  const std::string pre = "model.layers." + std::to_string(l) + ".block_sparse_moe.";
  s.at(Component::kRouter, l, pre);
  s.add("gate.weight", {E, D}, ParamInit::kRouterNormal, /*decay=*/true);
  if (c.topk_method == TopkMethod::kNoauxTc)
    s.add("gate.e_score_correction_bias", {E}, ParamInit::kZeros, /*decay=*/false, -1, /*buffer=*/true);
  s.at(Component::kRoutedExperts, l, pre);
  for (int64_t j = 0; j < E; ++j) {
    const std::string e = "experts." + std::to_string(j) + ".";
    s.linear(e + "w1.weight", {F, L}, j);
    s.linear(e + "w2.weight", {L, F}, j);
    s.linear(e + "w3.weight", {F, L}, j);
  }
  if (c.routed_expert_hidden_size) {
    s.at(Component::kLatentProj, l, pre);
    s.linear("routed_expert_down_proj.weight", {L, D});
    if (c.latent_moe_use_norm) s.rmsnorm("routed_expert_norm.weight", L);
    s.linear("routed_expert_up_proj.weight", {D, L});
  }
  if (c.num_shared_experts > 0) {
    s.at(Component::kSharedExperts, l, pre + "shared_experts.");
    add_glu(s, D, c.num_shared_experts * F);
  }
}

// K3's vision tower and projector (docs/vision.md): MoonViT blocks with K3's options (rmsnorm or layernorm,
// biases where attn_bias / linear_bias / patch_embed_proj_bias say) and the patch-merger MLP.
void add_vision(SpecList& s, const VisionConfig& v) {
  const int64_t Dv = v.vt_hidden_size, A = v.qkv_hidden_size.value_or(Dv), I = v.vt_intermediate_size;
  const int64_t p = v.patch_size, merged = Dv * v.merge_kernel_size[0] * v.merge_kernel_size[1];
  const bool layernorm = v.norm_type == "layernorm";
  auto norm = [&](const std::string& name) {
    s.rmsnorm(name + ".weight", Dv);
    if (layernorm) s.add(name + ".bias", {Dv}, ParamInit::kZeros, /*decay=*/false);
  };
  auto bias = [&](const std::string& name, int64_t n, bool on) {
    if (on) s.add(name + ".bias", {n}, ParamInit::kZeros, /*decay=*/false);
  };
  s.at(Component::kVision, -1, "vision_tower.patch_embed.");
  s.linear("proj.weight", {Dv, 3, p, p});
  bias("proj", Dv, v.patch_embed_proj_bias);
  s.linear("pos_emb.weight", {*v.init_pos_emb_height, *v.init_pos_emb_width, Dv});
  for (int64_t l = 0; l < v.vt_num_hidden_layers; ++l) {
    s.at(Component::kVision, -1, "vision_tower.encoder.blocks." + std::to_string(l) + ".");
    norm("norm0");
    s.linear("wqkv.weight", {3 * A, Dv});
    bias("wqkv", 3 * A, v.attn_bias);
    s.linear("wo.weight", {Dv, A});
    bias("wo", Dv, v.attn_bias);
    norm("norm1");
    s.linear("mlp.fc0.weight", {I, Dv});
    bias("mlp.fc0", I, v.linear_bias);
    s.linear("mlp.fc1.weight", {Dv, I});
    bias("mlp.fc1", Dv, v.linear_bias);
  }
  s.at(Component::kVision, -1, "vision_tower.encoder.");
  norm("final_layernorm");
  s.at(Component::kProjector, -1, "mm_projector.");
  const bool v1 = v.mm_projector_type == "patchmerger";  // Kimi-VL / K2.5: pre-LayerNorm and biases
  if (v1) {
    s.rmsnorm("pre_norm.weight", Dv);  // a LayerNorm (weight 1, bias 0 at init)
    s.add("pre_norm.bias", {Dv}, ParamInit::kZeros, /*decay=*/false);
  }
  s.linear("proj.0.weight", {merged, merged});
  bias("proj.0", merged, v1);
  s.linear("proj.2.weight", {*v.text_hidden_size, merged});
  bias("proj.2", *v.text_hidden_size, v1);
  if (!v1) s.rmsnorm("post_norm.weight", *v.text_hidden_size);  // K3's patchmergerv2: RMSNorm after the MLP
}

}  // namespace

std::vector<ParamSpec> model_param_specs(const ModelConfig& c) {
  std::vector<ParamSpec> out;
  SpecList s(&out);
  const int64_t D = c.hidden_size;
  const bool attn_res = c.attn_res_mode == AttnResMode::kBlock;

  s.at(Component::kEmbeddings, -1, "model.");
  s.linear("embed_tokens.weight", {c.vocab_size, D});

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    s.at(Component::kNorms, l, pre);
    s.rmsnorm("input_layernorm.weight", D);
    s.rmsnorm("post_attention_layernorm.weight", D);
    if (attn_res) {
      s.at(Component::kAttnRes, l, pre);
      s.rmsnorm("self_attention_res_norm.weight", D);
      s.add("self_attention_res_proj.weight", {1, D}, ParamInit::kZeros, /*decay=*/true);
      s.rmsnorm("mlp_res_norm.weight", D);
      s.add("mlp_res_proj.weight", {1, D}, ParamInit::kZeros, /*decay=*/true);
    }
    if (c.mixer(l) == Mixer::kKda) {
      s.at(Component::kKda, l, pre + "self_attn.");
      add_kda(s, c);
    } else {
      s.at(Component::kMla, l, pre + "self_attn.");
      add_mla(s, c);
    }
    if (c.is_moe_layer(l)) {
      add_moe(s, c, l);
    } else {
      s.at(Component::kDenseFfn, l, pre + "mlp.");
      add_glu(s, D, c.intermediate_size);
    }
  }

  s.at(Component::kNorms, -1, "model.");
  s.rmsnorm("norm.weight", D);
  if (attn_res) {
    s.at(Component::kAttnRes, -1, "model.");
    s.rmsnorm("output_attn_res_norm.weight", D);
    s.add("output_attn_res_proj.weight", {1, D}, ParamInit::kZeros, /*decay=*/true);
  }
  if (!c.tie_word_embeddings) {
    s.at(Component::kHead, -1, "");
    s.linear("lm_head.weight", {c.vocab_size, D});
  }
  if (c.vision_config) add_vision(s, *c.vision_config);
  return out;
}

void validate_checkpoint_against_config(const Checkpoint& ck, const ModelConfig& c) {
  const std::vector<ParamSpec> specs = model_param_specs(c);
  std::string first;
  int64_t problems = 0;
  auto problem = [&](const std::string& what) {
    if (problems++ == 0) first = what;
  };
  auto found = [&](const std::string& name) {
    return str("shape ", shape_str(ck.shape(name)), " ", dtype_name(ck.dtype(name)));
  };
  std::unordered_set<std::string> expected;
  expected.reserve(specs.size());
  for (const ParamSpec& s : specs) {
    expected.insert(s.name);
    const std::string want = str("shape ", shape_str(s.shape), " ", dtype_name(s.dtype));
    if (!ck.contains(s.name)) {
      problem(str("tensor ", s.name, " is missing: expected ", want, ", found none"));
    } else if (ck.shape(s.name) != s.shape ||
               !(ck.dtype(s.name) == s.dtype ||
                 (s.dtype == DType::kF32 && (ck.dtype(s.name) == DType::kBF16 || ck.dtype(s.name) == DType::kF16)))) {
      problem(str("tensor ", s.name, ": expected ", want, ", found ", found(s.name)));
    }
  }
  for (const std::string& name : ck.names()) {
    if (!expected.count(name))
      problem(str("tensor ", name, " is not part of the model: expected none, found ", found(name)));
  }
  if (problems == 0) return;
  throw_error(ErrorKind::kFormat, "checkpoint ", ck.path(), " does not match config ", c.source, ": ", first,
              problems > 1 ? str(" (and ", problems - 1, " more mismatched tensors)") : std::string());
}

bool is_quantizable_linear(const ParamSpec& spec) {
  const Component c = spec.component;
  const bool weight = spec.name.size() > 7 && spec.name.compare(spec.name.size() - 7, 7, ".weight") == 0;
  return spec.shape.size() == 2 && weight && c != Component::kEmbeddings && c != Component::kRouter &&
         c != Component::kNorms && c != Component::kAttnRes && c != Component::kVision && c != Component::kProjector;
}

}  // namespace myriad
