// `myriad params --config FILE [--json] [--seq T]`: the parameter accounting of a model config (model/accounting.h):
// total and activated parameters, a breakdown per component and per layer kind, cache sizes and training FLOPs
// per token at context length T (default: min(8192, max_position_embeddings)).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "model/accounting.h"
#include "model/config.h"
#include "model/param_spec.h"

namespace {

using myriad::Component;
using myriad::ModelAccounting;
using nlohmann::ordered_json;

// 1234567 -> "1,234,567"
std::string grouped(int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return v < 0 ? "-" + s : s;
}

// 2779485802080 -> "2.78T"; 443740384 -> "443.74M"
std::string human(double v) {
  const char* units[] = {"", "K", "M", "B", "T", "P"};
  int u = 0;
  while (std::abs(v) >= 1000.0 && u < 5) {
    v /= 1000.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%.2f%s", v, units[u]);
  return buf;
}

// Bytes: 1536 -> "1.50 KiB"
std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024.0 && u < 5) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string count(int64_t v) {
  return grouped(v) + " (" + human(double(v)) + ")";
}

std::string pad(std::string s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w;
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) line += (i ? "  " : "  ") + pad(r[i], w[i], /*right=*/i > 0);
    std::printf("%s\n", line.c_str());
  }
}

int run_params(const myriad::cli::Args& args) {
  const auto config_path = args.get("config");
  MYRIAD_REQUIRE(config_path.has_value(), kValue, "params needs --config FILE (see myriad params --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "params takes no positional arguments, got '", args.positional()[0],
                 "'");
  std::vector<std::string> warnings;
  const myriad::ModelConfig c = myriad::load_model_config(*config_path, &warnings);
  const int64_t seq = args.get_int("seq", long(std::min<int64_t>(8192, c.max_position_embeddings)), 1, 1L << 40);
  const ModelAccounting a = myriad::account_model(c);
  const myriad::TrainingFlops f = myriad::training_flops_per_token(c, a, seq);
  const double mla_tok = double(a.mla_cache_elems_per_token), kda_seq = double(a.kda_state_elems_per_sequence);

  struct Kind {
    const char* name;
    const myriad::LayerKindCount* k;
  };
  const Kind kinds[] = {{"kda_mixer", &a.kda_mixer},
                        {"mla_mixer", &a.mla_mixer},
                        {"dense_ffn", &a.dense_ffn},
                        {"moe_ffn", &a.moe_ffn},
                        {"layer_norms_and_attn_res", &a.layer_extras}};

  if (args.has("json")) {
    ordered_json j;
    j["config"] = c.source;
    j["total_params"] = a.total_params;
    j["active_params"] = a.active_params;
    j["active_params_with_embeddings"] = a.active_params_with_embeddings;
    j["trainable_params"] = a.trainable_params;
    j["buffer_params"] = a.buffer_params;
    j["weight_decay_params"] = a.decay_params;
    j["tensors"] = a.num_tensors;
    ordered_json comps = ordered_json::object();
    for (int i = 0; i < myriad::kNumComponents; ++i) {
      const auto& cc = a.components[size_t(i)];
      comps[myriad::component_name(Component(i))] = {
          {"params", cc.params}, {"active", cc.active}, {"tensors", cc.tensors}};
    }
    j["components"] = std::move(comps);
    ordered_json lk = ordered_json::object();
    for (const Kind& k : kinds)
      lk[k.name] = {{"layers", k.k->layers}, {"params_per_layer", k.k->params}, {"active_per_layer", k.k->active}};
    j["layer_kinds"] = std::move(lk);
    j["routed_expert_params"] = a.expert_params;
    j["cache"] = {{"mla_latent_elems_per_token", a.mla_cache_elems_per_token},
                  {"mla_latent_bytes_per_token_f32", a.mla_cache_elems_per_token * 4},
                  {"mla_latent_bytes_per_token_bf16", a.mla_cache_elems_per_token * 2},
                  {"kda_state_elems_per_sequence", a.kda_state_elems_per_sequence},
                  {"kda_state_bytes_per_sequence_f32", a.kda_state_elems_per_sequence * 4},
                  {"kda_state_bytes_per_sequence_bf16", a.kda_state_elems_per_sequence * 2}};
    j["training_flops_per_token"] = {{"seq_len", seq},
                                     {"matmul", f.matmul},
                                     {"mla_attention", f.mla_attention},
                                     {"kda_state", f.kda_state},
                                     {"total", f.total()}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("config %s\n%s\n", c.source.c_str(), myriad::model_config_summary(c).c_str());
  std::printf(
      "parameters:  %s total, %s activated per token (input embeddings and vision tower not counted), %s with "
      "embeddings\n",
      human(double(a.total_params)).c_str(), human(double(a.active_params)).c_str(),
      human(double(a.active_params_with_embeddings)).c_str());
  std::printf("  total           %s\n", count(a.total_params).c_str());
  std::printf("  activated       %s\n", count(a.active_params).c_str());
  std::printf("  + embeddings    %s\n", count(a.active_params_with_embeddings).c_str());
  std::printf("  trainable       %s; buffers %s (e_score_correction_bias); with weight decay %s\n\n",
              count(a.trainable_params).c_str(), grouped(a.buffer_params).c_str(), count(a.decay_params).c_str());

  std::vector<std::vector<std::string>> rows = {{"component", "tensors", "parameters", "", "activated", "", "share"}};
  for (int i = 0; i < myriad::kNumComponents; ++i) {
    const auto& cc = a.components[size_t(i)];
    if (cc.tensors == 0) continue;
    char share[16];
    std::snprintf(share, sizeof(share), "%.2f%%", 100.0 * double(cc.params) / double(a.total_params));
    rows.push_back({myriad::component_name(Component(i)), grouped(cc.tensors), grouped(cc.params),
                    human(double(cc.params)), grouped(cc.active), human(double(cc.active)), share});
  }
  rows.push_back({"total", grouped(a.num_tensors), grouped(a.total_params), human(double(a.total_params)),
                  grouped(a.active_params), human(double(a.active_params)), "100.00%"});
  print_table(rows);

  std::printf("\nper layer kind (each layer; layer norms and AttnRes queries counted apart):\n");
  rows = {{"kind", "layers", "parameters", "", "activated", ""}};
  for (const Kind& k : kinds) {
    if (k.k->layers == 0) continue;
    rows.push_back({k.name, grouped(k.k->layers), grouped(k.k->params), human(double(k.k->params)),
                    grouped(k.k->active), human(double(k.k->active))});
  }
  if (a.expert_params > 0)
    rows.push_back({"one routed expert", "", grouped(a.expert_params), human(double(a.expert_params)), "", ""});
  print_table(rows);

  std::printf("\ncaches:\n");
  if (a.mla_cache_elems_per_token > 0) {
    std::printf("  MLA latent per token of context: %s numbers (%lld MLA layer%s x (%lld + %lld)): %s f32, %s bf16\n",
                grouped(a.mla_cache_elems_per_token).c_str(), static_cast<long long>(a.mla_mixer.layers),
                a.mla_mixer.layers == 1 ? "" : "s", static_cast<long long>(c.kv_lora_rank),
                static_cast<long long>(c.qk_rope_head_dim), human_bytes(mla_tok * 4).c_str(),
                human_bytes(mla_tok * 2).c_str());
    std::printf("    at the full context of %s tokens: %s f32, %s bf16 per sequence\n",
                grouped(c.max_position_embeddings).c_str(),
                human_bytes(mla_tok * 4 * double(c.max_position_embeddings)).c_str(),
                human_bytes(mla_tok * 2 * double(c.max_position_embeddings)).c_str());
  }
  if (a.kda_state_elems_per_sequence > 0) {
    std::printf(
        "  KDA state per sequence (any length): %s numbers (%lld KDA layers x (H K V + (W-1) 3 H K)): %s f32, "
        "%s bf16\n",
        grouped(a.kda_state_elems_per_sequence).c_str(), static_cast<long long>(a.kda_mixer.layers),
        human_bytes(kda_seq * 4).c_str(), human_bytes(kda_seq * 2).c_str());
  }

  std::printf("\ntraining FLOPs per token at context T = %s (forward + backward):\n", grouped(seq).c_str());
  std::printf("  matmuls (6 x activated)     %.4g\n", f.matmul);
  if (f.mla_attention > 0) std::printf("  MLA attention (causal)      %.4g\n", f.mla_attention);
  if (f.kda_state > 0)
    std::printf("  KDA chunkwise (chunk %lld)    %.4g\n", static_cast<long long>(myriad::kKdaChunkSize), f.kda_state);
  std::printf("  total                       %.4g\n", f.total());
  return 0;
}

}  // namespace

MYRIAD_COMMAND("params", "count a model config's parameters (total, activated, per component), caches and FLOPs",
               "myriad params --config FILE [--json] [--seq T]",
               {{"config", "FILE", "model config.json (or a directory holding one)"},
                {"json", "", "print the accounting as JSON"},
                {"seq", "T", "context length for the FLOP estimate (default min(8192, max_position_embeddings))"}},
               run_params);
