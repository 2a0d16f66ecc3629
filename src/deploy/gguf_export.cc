// GGUF export; see gguf_export.h for the layout, the conversions and what is refused.
#include "deploy/gguf_export.h"

#include <sentencepiece_processor.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/dtype.h"
#include "core/error.h"
#include "data/tokenize/bpe_tokenizer.h"
#include "data/tokenize/tokenizer.h"
#include "deploy/foreign_runtime.h"
#include "deploy/prune.h"
#include "infer/weight_layout.h"
#include "io/checkpoint.h"
#include "quant/ggml_blocks.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

// A tensor of the checkpoint as contiguous f32 values (F32 as stored; BF16 / F16 widened exactly).
std::vector<float> read_f32(const Checkpoint& ck, const std::string& name) {
  const Tensor t = ck.tensor(name).contiguous();
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype()) {
    case DType::kF32:
      std::memcpy(out.data(), t.raw_data(), size_t(n) * sizeof(float));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_f32(static_cast<const uint16_t*>(t.raw_data())[i]);
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[size_t(i)] = f16_to_f32(static_cast<const uint16_t*>(t.raw_data())[i]);
      break;
    default:
      throw_error(ErrorKind::kFormat, ck.path(), ": tensor ", name, " is ", dtype_name(t.dtype()),
                  "; GGUF export reads F32, BF16 or F16");
  }
  return out;
}

// The rows of a [rows, cols] matrix whose RoPE part [col0, col0 + R) is reordered from rotate-half pairs
// (i, i + R/2) to interleaved pairs (2i, 2i + 1): row col0 + 2i <- col0 + i, col0 + 2i + 1 <- col0 + R/2 + i.
void interleave_rope_rows(std::vector<float>& w, int64_t cols, int64_t row0, int64_t R) {
  const std::vector<float> old(w.begin() + row0 * cols, w.begin() + (row0 + R) * cols);
  for (int64_t i = 0; i < R / 2; ++i) {
    std::memcpy(&w[size_t((row0 + 2 * i) * cols)], &old[size_t(i * cols)], size_t(cols) * sizeof(float));
    std::memcpy(&w[size_t((row0 + 2 * i + 1) * cols)], &old[size_t((R / 2 + i) * cols)], size_t(cols) * sizeof(float));
  }
}

std::string as_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

class Exporter {
 public:
  Exporter(const ModelConfig& c, const Checkpoint& ck, GgufArch arch, GgmlType type, GgufWriter& w)
      : c_(c), ck_(ck), arch_(arch), type_(type), w_(w) {}

  // One GGUF tensor: `ne` in ggml order; `produce` returns its f32 values (row-major, ne[0] innermost).
  // quantizable: may be stored as the block type (when ne[0] divides into blocks).
  void tensor(const std::string& name, std::vector<int64_t> ne, bool quantizable,
              std::function<std::vector<float>()> produce) {
    const bool quantize = quantizable && type_ != GgmlType::kF32 && ne.size() >= 2 && ne[0] % 32 == 0;
    const GgmlType t = quantize ? type_ : GgmlType::kF32;
    (quantize ? report.quantized : report.kept_f32) += 1;
    w_.add_tensor(name, std::move(ne), t, [t, produce = std::move(produce)] {
      const std::vector<float> v = produce();
      if (t == GgmlType::kF32) return as_bytes(v);
      std::string out;
      (t == GgmlType::kQ8_0 ? quantize_q8_0 : quantize_q4_0)(v.data(), int64_t(v.size()), out);
      return out;
    });
  }

  // A checkpoint tensor as is, under a GGUF name; PyTorch shape reversed into ne.
  void copy(const std::string& gguf, const std::string& hf, bool quantizable) {
    const Shape& s = ck_.shape(hf);
    tensor(gguf, std::vector<int64_t>(s.rbegin(), s.rend()), quantizable, [this, hf] { return read_f32(ck_, hf); });
  }

  void run() {
    copy("token_embd.weight", "model.embed_tokens.weight", true);
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) layer(l);
    if (k3_attn_res()) res_score("output_res_score.weight", "model.output_attn_res_");
    copy("output_norm.weight", "model.norm.weight", false);
    // kimi-k3 requires output.weight; the others fall back to token_embd for tied embeddings
    if (!c_.tie_word_embeddings)
      copy("output.weight", "lm_head.weight", true);
    else if (arch_ == GgufArch::kKimiK3)
      copy("output.weight", "model.embed_tokens.weight", true);
  }

  GgufExportReport report;

 private:
  bool k3_attn_res() const { return arch_ == GgufArch::kKimiK3 && c_.attn_res_mode == AttnResMode::kBlock; }

  // An AttnRes query: llama.cpp's kimi-k3 scores with the product of its norm weight and projection (one [D]).
  void res_score(const std::string& gguf, const std::string& hf_prefix) {
    tensor(gguf, {c_.hidden_size}, false, [this, hf_prefix] {
      std::vector<float> w = read_f32(ck_, hf_prefix + "norm.weight");
      const std::vector<float> proj = read_f32(ck_, hf_prefix + "proj.weight");
      for (size_t i = 0; i < w.size(); ++i) w[i] *= proj[i];
      return w;
    });
  }

  void layer(int64_t l) {
    const std::string p = "model.layers." + std::to_string(l) + ".", b = "blk." + std::to_string(l) + ".";
    if (k3_attn_res()) {
      res_score(b + "attn_res_score.weight", p + "self_attention_res_");
      res_score(b + "ffn_res_score.weight", p + "mlp_res_");
    }
    copy(b + "attn_norm.weight", p + "input_layernorm.weight", false);
    if (c_.mixer(l) == Mixer::kKda)
      kda(p + "self_attn.", b);
    else
      mla(p + "self_attn.", b);
    copy(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", false);
    if (c_.is_moe_layer(l))
      moe(p + "block_sparse_moe.", b);
    else
      for (const char* w : {"gate", "up", "down"})
        copy(b + "ffn_" + w + ".weight", p + "mlp." + w + "_proj.weight", true);
  }

  void kda(const std::string& p, const std::string& b) {
    const int64_t H = c_.linear_attn_config->num_heads, K = c_.linear_attn_config->head_dim;
    for (const char* x : {"q", "k", "v"}) copy(b + "attn_" + x + ".weight", p + x + "_proj.weight", true);
    for (const char* x : {"q", "k", "v"}) {
      const std::string hf = p + x + "_conv1d.weight";
      const int64_t W = ck_.shape(hf).back();
      tensor(b + "ssm_conv1d_" + x + ".weight", {W, 1, H * K, 1}, false, [this, hf] { return read_f32(ck_, hf); });
    }
    // kimi-k3 stores A_log's heads as a plain [H]; kimi-linear keeps its checkpoint's [1, 1, H, 1]
    std::vector<int64_t> a_ne = arch_ == GgufArch::kKimiK3 ? std::vector<int64_t>{H} : std::vector<int64_t>{1, H, 1, 1};
    tensor(b + "ssm_a", std::move(a_ne), false, [this, hf = p + "A_log"] {
      std::vector<float> a = read_f32(ck_, hf);
      for (float& x : a) x = -std::exp(x);
      return a;
    });
    copy(b + "ssm_f_a.weight", p + "f_a_proj.weight", true);
    copy(b + "ssm_f_b.weight", p + "f_b_proj.weight", true);
    copy(b + "ssm_dt.bias", p + "dt_bias", false);
    copy(b + "ssm_beta.weight", p + "b_proj.weight", true);
    if (c_.linear_attn_config->use_full_rank_gate) {
      copy(b + "ssm_g.weight", p + "g_proj.weight", true);
    } else {
      copy(b + "ssm_g_a.weight", p + "g_a_proj.weight", true);
      copy(b + "ssm_g_b.weight", p + "g_b_proj.weight", true);
    }
    copy(b + "ssm_norm.weight", p + "o_norm.weight", false);
    copy(b + "attn_output.weight", p + "o_proj.weight", true);
  }

  void mla(const std::string& p, const std::string& b) {
    const int64_t H = c_.num_attention_heads, Dn = c_.qk_nope_head_dim, Dr = c_.qk_rope_head_dim, Dv = c_.v_head_dim,
                  C = c_.kv_lora_rank, D = c_.hidden_size;
    // deepseek2 rotates interleaved pairs: re-pair rotate-half weights (a rope_interleave model is stored so).
    const bool rope = arch_ == GgufArch::kDeepSeek2 && !c_.rope_interleave;
    // q: per head [nope | rope] rows.
    const std::string q_hf = p + (c_.q_lora_rank ? "q_b_proj.weight" : "q_proj.weight");
    const std::string q_gguf = b + (c_.q_lora_rank ? "attn_q_b.weight" : "attn_q.weight");
    if (c_.q_lora_rank) {
      copy(b + "attn_q_a.weight", p + "q_a_proj.weight", true);
      copy(b + "attn_q_a_norm.weight", p + "q_a_layernorm.weight", false);
    }
    const int64_t q_in = ck_.shape(q_hf).back();
    tensor(q_gguf, {q_in, H * (Dn + Dr)}, true, [=, this] {
      std::vector<float> w = read_f32(ck_, q_hf);
      if (rope)
        for (int64_t h = 0; h < H; ++h) interleave_rope_rows(w, q_in, h * (Dn + Dr) + Dn, Dr);
      return w;
    });
    // kv_a: [c_kv | k_pe] rows.
    tensor(b + "attn_kv_a_mqa.weight", {D, C + Dr}, true, [=, this] {
      std::vector<float> w = read_f32(ck_, p + "kv_a_proj_with_mqa.weight");
      if (rope) interleave_rope_rows(w, D, C, Dr);
      return w;
    });
    copy(b + "attn_kv_a_norm.weight", p + "kv_a_layernorm.weight", false);
    // kv_b [H (Dn + Dv), C], per head [k_nope | v]: k_b [H, C, Dn] (transposed), v_b [H, Dv, C].
    const std::string kv_b = p + "kv_b_proj.weight";
    tensor(b + "attn_k_b.weight", {Dn, C, H}, true, [=, this] {
      const std::vector<float> w = read_f32(ck_, kv_b);
      std::vector<float> out(size_t(H * C * Dn));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t r = 0; r < Dn; ++r)
          for (int64_t c = 0; c < C; ++c) out[size_t((h * C + c) * Dn + r)] = w[size_t((h * (Dn + Dv) + r) * C + c)];
      return out;
    });
    tensor(b + "attn_v_b.weight", {C, Dv, H}, true, [=, this] {
      const std::vector<float> w = read_f32(ck_, kv_b);
      std::vector<float> out(size_t(H * Dv * C));
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(&out[size_t(h * Dv * C)], &w[size_t((h * (Dn + Dv) + Dn) * C)], size_t(Dv * C) * sizeof(float));
      return out;
    });
    if (c_.mla_use_output_gate) copy(b + "attn_gate.weight", p + "g_proj.weight", true);
    copy(b + "attn_output.weight", p + "o_proj.weight", true);
  }

  void moe(const std::string& p, const std::string& b) {
    copy(b + "ffn_gate_inp.weight", p + "gate.weight", false);
    if (c_.topk_method == TopkMethod::kNoauxTc)
      copy(b + "exp_probs_b.bias", p + "gate.e_score_correction_bias", false);
    else if (arch_ != GgufArch::kDeepSeek2)  // llama.cpp's kimi-* require the bias; zero selects as greedy
      tensor(b + "exp_probs_b.bias", {c_.num_experts}, false,
             [n = c_.num_experts] { return std::vector<float>(size_t(n), 0.0f); });
    const int64_t E = c_.num_experts;
    for (const auto& [gguf, hf] : {std::pair{"ffn_gate_exps", "w1"}, {"ffn_up_exps", "w3"}, {"ffn_down_exps", "w2"}}) {
      const std::string first = p + "experts.0." + hf + ".weight";
      const Shape& s = ck_.shape(first);  // [out, in]
      tensor(b + gguf + ".weight", {s[1], s[0], E}, true, [=, this, hf = std::string(hf)] {
        std::vector<float> out;
        out.reserve(size_t(E * s[0] * s[1]));
        for (int64_t e = 0; e < E; ++e) {
          const std::string name = p + "experts." + std::to_string(e) + "." + hf + ".weight";
          MYRIAD_REQUIRE(ck_.shape(name) == s, kFormat, ck_.path(), ": expert tensor ", name, " has shape ",
                         shape_str(ck_.shape(name)), ", expert 0's is ", shape_str(s));
          const std::vector<float> w = read_f32(ck_, name);
          out.insert(out.end(), w.begin(), w.end());
        }
        return out;
      });
    }
    if (c_.routed_expert_hidden_size) {  // latent MoE (kimi-k3 only): experts run at width L between these
      copy(b + "ffn_routed_down.weight", p + "routed_expert_down_proj.weight", true);
      copy(b + "ffn_routed_up.weight", p + "routed_expert_up_proj.weight", true);
      if (c_.latent_moe_use_norm) copy(b + "ffn_routed_norm.weight", p + "routed_expert_norm.weight", false);
    }
    if (c_.num_shared_experts > 0)
      for (const char* w : {"gate", "up", "down"})
        copy(b + "ffn_" + w + "_shexp.weight", p + "shared_experts." + w + "_proj.weight", true);
  }

  const ModelConfig& c_;
  const Checkpoint& ck_;
  GgufArch arch_;
  GgmlType type_;
  GgufWriter& w_;
};

// The model's hyperparameters under llama.cpp's keys for the architecture (what its converter writes).
void write_hparams(const ModelConfig& c, GgufArch arch, GgufWriter& w) {
  const std::string a = gguf_arch_name(arch);
  auto u32 = [&](const std::string& k, int64_t v) { w.add_u32(a + "." + k, uint32_t(v)); };
  u32("vocab_size", c.vocab_size);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("feed_forward_length", c.intermediate_size);
  u32("block_count", c.num_hidden_layers);
  u32("attention.head_count", c.num_attention_heads);
  if (arch != GgufArch::kDeepSeek2) {  // MQA-shaped MLA layers (1), KDA layers 0
    std::vector<int32_t> kv(size_t(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) kv[size_t(l)] = c.mixer(l) == Mixer::kMla ? 1 : 0;
    w.add_i32_array(a + ".attention.head_count_kv", kv);
  } else {
    u32("attention.head_count_kv", 1);
  }
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.add_f32(a + ".rope.freq_base", float(c.rope_theta));
  if (c.q_lora_rank) u32("attention.q_lora_rank", *c.q_lora_rank);
  u32("attention.kv_lora_rank", c.kv_lora_rank);
  u32("attention.key_length", c.kv_lora_rank + c.qk_rope_head_dim);
  if (arch != GgufArch::kKimiLinear) u32("attention.value_length", c.kv_lora_rank);
  u32("attention.key_length_mla", c.qk_nope_head_dim + c.qk_rope_head_dim);
  u32("attention.value_length_mla", c.v_head_dim);
  u32("rope.dimension_count", c.qk_rope_head_dim);
  if (c.rope_scaling && arch == GgufArch::kDeepSeek2) {
    const RopeScaling& r = *c.rope_scaling;
    w.add_string(a + ".rope.scaling.type", "yarn");
    w.add_f32(a + ".rope.scaling.factor", float(r.factor));
    if (r.original_max_position_embeddings)
      u32("rope.scaling.original_context_length", *r.original_max_position_embeddings);
    if (r.mscale_all_dim) w.add_f32(a + ".rope.scaling.yarn_log_multiplier", float(0.1 * *r.mscale_all_dim));
    if (r.beta_fast) w.add_f32(a + ".rope.scaling.yarn_beta_fast", float(*r.beta_fast));
    if (r.beta_slow) w.add_f32(a + ".rope.scaling.yarn_beta_slow", float(*r.beta_slow));
  }
  u32("leading_dense_block_count", c.num_moe_layers() > 0 ? c.first_k_dense_replace : c.num_hidden_layers);
  if (c.num_moe_layers() > 0) {
    u32("expert_count", c.num_experts);
    u32("expert_used_count", c.num_experts_per_token);
    u32("expert_feed_forward_length", c.moe_intermediate_size);
    u32("expert_shared_count", c.num_shared_experts);
    w.add_f32(a + ".expert_weights_scale", float(c.routed_scaling_factor));
    w.add_bool(a + ".expert_weights_norm", c.moe_renormalize && c.num_experts_per_token > 1);
    u32("expert_gating_func", c.moe_router_activation_func == RouterActivation::kSigmoid ? 2 : 1);
  }
  if (arch != GgufArch::kDeepSeek2 && c.num_kda_layers() > 0) {
    u32("ssm.conv_kernel", c.linear_attn_config->short_conv_kernel_size);
    u32("kda.head_dim", c.linear_attn_config->head_dim);
  }
  if (arch == GgufArch::kKimiK3) {
    if (!std::isinf(c.linear_attn_config->gate_lower_bound))  // absent: the softplus gate
      w.add_f32(a + ".kda.gate_lower_bound", float(c.linear_attn_config->gate_lower_bound));
    if (c.routed_expert_hidden_size) u32("expert_latent_length", *c.routed_expert_hidden_size);
    u32("attn_res.block_size", c.attn_res_mode == AttnResMode::kBlock ? c.attn_res_block_size : 0);
    w.add_f32(a + ".activation.situ_beta", float(c.activation_situ_beta));
    // llama.cpp: a linear beta <= 0 leaves the up branch unclamped (myriad's null, +infinity)
    w.add_f32(a + ".activation.situ_linear_beta",
              std::isinf(c.activation_situ_linear_beta) ? 0.0f : float(c.activation_situ_linear_beta));
  }
}

// The byte-level pre-tokenizers llama.cpp knows by name (tokenizer.ggml.pre; it runs its own copy of each
// pattern), as published tokenizer.json files write their steps; tiktoken files are Kimi's ("kimi-k2").
const char* bpe_pre_name(const BpeTokenizer& b) {
  if (b.format() == BpeTokenizer::Format::kTiktoken) return "kimi-k2";
  static const char* const kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* const kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* const kDeepSeekV3 =
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::vector<std::pair<const char*, std::vector<std::string>>> known = {
      {"llama-bpe", {std::string("split ") + kLlama3, "bytelevel"}},
      {"deepseek-v3",
       {R"(split \p{N}{1,3})", "split [一-龥぀-ゟ゠-ヿ]+", std::string("split ") + kDeepSeekV3, "bytelevel"}},
      {"qwen2", {std::string("split ") + kQwen2, "bytelevel"}}};
  const std::vector<std::string> sig = b.pretokenizer().signature();
  for (const auto& [name, steps] : known)
    if (sig == steps) return name;
  std::string steps;
  for (const std::string& st : sig) steps += (steps.empty() ? "" : "; ") + st;
  throw_error(ErrorKind::kUnsupported, "GGUF export: the tokenizer's pre-tokenizer (", steps,
              ") is none of those llama.cpp knows by name (Llama 3's, DeepSeek-V3's, Qwen 2's; Kimi's tiktoken)");
}

// A tiktoken or Hugging Face byte-level BPE as llama.cpp's "gpt2" tokenizer: every token as its ByteLevel string,
// the merges (tiktoken's derived from the ranks, ByteBpe::merges), the added tokens by their text (CONTROL when
// special, USER_DEFINED otherwise), ids without a token "[PAD<id>]" UNUSED, up to the config's vocab_size.
void write_bpe_vocabulary(const Tokenizer& tok, const ModelConfig& c, GgufWriter& w) {
  const BpeTokenizer& b = *tok.bpe();
  const int64_t n = c.vocab_size;
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), 5);
  const std::vector<std::string>& bytes = b.bpe().token_bytes();
  for (int64_t id = 0; id < n; ++id) {
    tokens[size_t(id)] = "[PAD" + std::to_string(id) + "]";
    if (id < int64_t(bytes.size()) && !bytes[size_t(id)].empty()) {
      tokens[size_t(id)] = byte_level_string(bytes[size_t(id)]);
      types[size_t(id)] = 1;
    }
  }
  for (const AddedToken& a : b.added().tokens()) {
    if (a.id < 0 || a.id >= n) continue;
    tokens[size_t(a.id)] = a.content;
    types[size_t(a.id)] = a.special ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (const ByteBpe::Merge& m : b.bpe().merges())
    merges.push_back(byte_level_string(bytes[size_t(m.left)]) + " " + byte_level_string(bytes[size_t(m.right)]));
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", bpe_pre_name(b));
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  auto special_id = [&](const std::optional<int64_t>& from_config, const std::string& name) -> int64_t {
    if (from_config) return *from_config;
    const AddedToken* a = name.empty() ? nullptr : b.added().find(name);
    return a ? a->id : -1;
  };
  if (const int64_t bos = special_id(c.bos_token_id, b.bos_token()); bos >= 0)
    w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
  if (const int64_t eos = special_id(c.eos_token_id, b.eos_token()); eos >= 0)
    w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
  if (c.pad_token_id) w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(*c.pad_token_id));
  w.add_bool("tokenizer.ggml.add_bos_token", false);  // the chat formats write what a prompt starts with
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

// The vocabulary: myriad's SentencePiece as llama.cpp's "llama" tokenizer, the byte-level BPEs as "gpt2".
void write_vocabulary(const Tokenizer& tok, const ModelConfig& c, GgufWriter& w) {
  if (tok.kind() != TokenizerKind::kSentencePiece) {
    MYRIAD_REQUIRE(tok.vocab_size() <= c.vocab_size, kConfig, "GGUF export: the tokenizer has ", tok.vocab_size(),
                   " tokens, more than the config's vocab_size ", c.vocab_size);
    write_bpe_vocabulary(tok, c, w);
    return;
  }
  MYRIAD_REQUIRE(tok.vocab_size() == c.vocab_size, kConfig, "GGUF export: the tokenizer has ", tok.vocab_size(),
                 " tokens, the config's vocab_size is ", c.vocab_size);
  sentencepiece::SentencePieceProcessor sp;
  const auto status = sp.LoadFromSerializedProto(tok.model_bytes());
  MYRIAD_REQUIRE(status.ok(), kFormat, "GGUF export: the tokenizer model: ", status.ToString());
  const int n = sp.GetPieceSize();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<float> scores(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    pieces[size_t(i)] = sp.IdToPiece(i);
    scores[size_t(i)] = sp.GetScore(i);
    // gguf TokenType: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6. myriad's reserved
    // specials (SentencePiece user-defined symbols) are control tokens to llama.cpp: never split, rendered only
    // when asked.
    const bool special = sp.IsControl(i) || tok.has_special(pieces[size_t(i)]);
    types[size_t(i)] = sp.IsUnknown(i) ? 2 : special ? 3 : sp.IsByte(i) ? 6 : 1;
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", pieces);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  if (sp.unk_id() >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(sp.unk_id()));
  if (c.bos_token_id) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(*c.bos_token_id));
  if (c.eos_token_id) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(*c.eos_token_id));
  if (c.pad_token_id) w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(*c.pad_token_id));
  if (tok.end_of_text_id() >= 0) w.add_u32("tokenizer.ggml.eot_token_id", uint32_t(tok.end_of_text_id()));
  w.add_bool("tokenizer.ggml.add_bos_token", false);  // myriad prompts start without <s>
  w.add_bool("tokenizer.ggml.add_eos_token", false);
}

}  // namespace

const char* gguf_arch_name(GgufArch a) {
  switch (a) {
    case GgufArch::kKimiLinear:
      return "kimi-linear";
    case GgufArch::kKimiK3:
      return "kimi-k3";
    case GgufArch::kDeepSeek2:
      break;
  }
  return "deepseek2";
}

namespace {

// What each architecture cannot carry of a config, one reason each (empty: it carries the model).
std::vector<std::string> gaps(const ModelConfig& c, GgufArch arch) {
  std::vector<std::string> why;
  const bool moe = c.num_moe_layers() > 0, mla = c.num_mla_layers() > 0;
  // GGUF runtimes attend densely with plain queries: a model trained otherwise would answer differently there.
  for (std::string& w : myriad_only_attention(c)) why.push_back(std::move(w));
  for (int64_t l = c.first_k_dense_replace; l < c.num_hidden_layers && moe; ++l)
    if (!c.is_moe_layer(l)) {
      why.push_back("dense layers after the first MoE layer (moe_layer_freq " + std::to_string(c.moe_layer_freq) + ")");
      break;
    }
  if (arch == GgufArch::kDeepSeek2) {
    if (c.attn_res_mode != AttnResMode::kNone)
      why.push_back(std::string("AttnRes (attn_res_mode ") + attn_res_mode_name(c.attn_res_mode) + ")");
    if (c.routed_expert_hidden_size) why.push_back("latent MoE (routed_expert_hidden_size)");
    if (c.hidden_act == HiddenAct::kSitu) why.push_back("SiTU-GLU (hidden_act situ; deepseek2 runs SwiGLU, silu)");
    if (mla && c.mla_use_output_gate) why.push_back("the MLA output gate (mla_use_output_gate)");
    if (c.mla_use_nope) why.push_back("NoPE MLA without KDA layers (deepseek2 applies RoPE; kimi-* need KDA layers)");
    return why;
  }
  const LinearAttnConfig& la = *c.linear_attn_config;
  // llama.cpp's kimi-* read one head count for the KDA and the MLA layers
  if (mla && la.num_heads != c.num_attention_heads)
    why.push_back("KDA heads (" + std::to_string(la.num_heads) + ") other than the MLA heads (" +
                  std::to_string(c.num_attention_heads) + ")");
  if (mla && !c.mla_use_nope) why.push_back("RoPE on MLA (kimi-* MLA is NoPE)");
  if (moe && c.moe_router_activation_func != RouterActivation::kSigmoid)
    why.push_back("softmax routing (kimi-* route with sigmoid scores)");
  if (arch == GgufArch::kKimiK3) {
    if (c.attn_res_mode == AttnResMode::kSkip)
      why.push_back("attn_res_mode skip (kimi-k3 computes block AttnRes or none)");
    if (c.hidden_act != HiddenAct::kSitu) why.push_back("SwiGLU (hidden_act silu; kimi-k3 runs SiTU-GLU in every FFN)");
    if (!la.use_full_rank_gate)
      why.push_back("the low-rank KDA output gate (use_full_rank_gate false; kimi-k3 has ssm_g)");
    if (!moe) why.push_back("a model without MoE layers (kimi-k3 requires the expert keys)");
    return why;
  }
  if (c.attn_res_mode != AttnResMode::kNone)
    why.push_back(std::string("AttnRes (attn_res_mode ") + attn_res_mode_name(c.attn_res_mode) + ")");
  if (c.routed_expert_hidden_size) why.push_back("latent MoE (routed_expert_hidden_size)");
  if (c.hidden_act == HiddenAct::kSitu) why.push_back("SiTU-GLU (hidden_act situ; kimi-linear runs SwiGLU, silu)");
  if (mla && c.mla_use_output_gate) why.push_back("the MLA output gate (mla_use_output_gate)");
  if (!std::isinf(la.gate_lower_bound))
    why.push_back("the bounded KDA gate (gate_lower_bound; kimi-linear computes the unbounded softplus gate)");
  if (la.use_full_rank_gate) why.push_back("the full-rank KDA output gate (use_full_rank_gate; only ssm_g_a/g_b)");
  if (mla && c.q_lora_rank)
    why.push_back("a low-rank MLA query (q_lora_rank; llama.cpp's kimi-linear reads q_proj only, as Kimi-Linear)");
  if (moe && (!c.moe_renormalize || c.num_experts_per_token < 2))
    why.push_back(
        "unnormalized expert weights (moe_renormalize false, or top-1 routing: kimi-linear always "
        "renormalizes the chosen experts' weights)");
  return why;
}

std::string joined(const std::vector<std::string>& v) {
  std::string msg;
  for (const std::string& s : v) msg += (msg.empty() ? "" : "; ") + s;
  return msg;
}

}  // namespace

GgufArch gguf_arch_for(const ModelConfig& c) {
  if (c.num_kda_layers() == 0) {
    const std::vector<std::string> why = gaps(c, GgufArch::kDeepSeek2);
    MYRIAD_REQUIRE(why.empty(), kUnsupported, c.source, ": GGUF deepseek2 cannot carry: ", joined(why));
    return GgufArch::kDeepSeek2;
  }
  // kimi-linear where it carries everything (the older, more widely read format), else kimi-k3
  const std::vector<std::string> linear = gaps(c, GgufArch::kKimiLinear);
  if (linear.empty()) return GgufArch::kKimiLinear;
  const std::vector<std::string> k3 = gaps(c, GgufArch::kKimiK3);
  MYRIAD_REQUIRE(k3.empty(), kUnsupported, c.source, ": GGUF kimi-k3 cannot carry: ", joined(k3),
                 " (and kimi-linear: ", joined(linear), ")");
  return GgufArch::kKimiK3;
}

GgufExportReport export_gguf(const std::string& model_dir, const std::string& out_path, const GgufExportOptions& o) {
  MYRIAD_REQUIRE(o.type == GgmlType::kF32 || o.type == GgmlType::kQ8_0 || o.type == GgmlType::kQ4_0, kValue,
                 "GGUF export: type ", ggml_type_name(o.type), ": must be f32, q8_0 or q4_0");
  const ModelLocation loc = locate_model(model_dir, "a GGUF file carries the tokenizer");
  const ModelConfig c = load_model_config((fs::path(loc.checkpoint_dir) / "config.json").string(), nullptr);
  const GgufArch arch = gguf_arch_for(c);
  const Checkpoint ck = open_model_checkpoint(loc.checkpoint_dir, c);
  for (const std::string& n : ck.names())
    MYRIAD_REQUIRE(n.find(".qweight") == std::string::npos, kUnsupported, ck.path(), " is block-quantized by myriad (",
                   n, "); export the unquantized model");
  const Tokenizer tok = Tokenizer::load(loc.tokenizer_dir);

  GgufWriter w;
  w.add_string("general.architecture", gguf_arch_name(arch));
  std::string name = o.name;
  if (name.empty()) name = fs::path(model_dir).filename().string();
  if (name.empty()) name = fs::path(model_dir).parent_path().filename().string();
  w.add_string("general.name", name);
  // LlamaFileType: ALL_F32 0, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7.
  w.add_u32("general.file_type", o.type == GgmlType::kF32 ? 0 : o.type == GgmlType::kQ4_0 ? 2 : 7);
  w.add_u32("general.quantization_version", 2);
  write_hparams(c, arch, w);
  write_vocabulary(tok, c, w);

  Exporter ex(c, ck, arch, o.type, w);
  ex.run();
  GgufExportReport r = ex.report;
  r.arch = arch;
  r.tensors = int64_t(w.tensor_count());
  r.metadata_keys = int64_t(w.key_count());
  for (const std::string& n : ck.names()) r.source_bytes += ck.entry(n).bytes();
  r.file_bytes = w.write(out_path);
  return r;
}

}  // namespace myriad
