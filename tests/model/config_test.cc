// Model config: the real K3 file (nested) and configs/kimi-k3.json (flat) parse and agree; configs/tiny.json
// parses; every validation rule fails with kConfig and a message naming the JSON path and the value; unknown
// fields warn once with their path, known-ignored fields do not.
#include "model/config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "timing_bounds.h"

namespace myriad {
namespace {

using json = nlohmann::json;

const std::string kSharedK3 = MYRIAD_SOURCE_DIR "/../shared/data/kimi-k3-config.json";
const std::string kFlatK3 = MYRIAD_SOURCE_DIR "/configs/kimi-k3.json";
const std::string kTiny = MYRIAD_SOURCE_DIR "/configs/tiny.json";

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

json tiny() {
  return read_json(kTiny);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

namespace fs = std::filesystem;

// Parses `j`, expecting an Error of `kind` whose message contains every string of `parts`.
void expect_error(const json& j, const std::vector<std::string>& parts, ErrorKind kind = ErrorKind::kConfig) {
  try {
    parse_model_config(j, "test.json", nullptr);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("test.json"), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "missing \"" << p << "\" in: " << m;
    return;
  }
  ADD_FAILURE() << "no error for config: " << j.dump().substr(0, 200);
}

ModelConfig parse_ok(const json& j, std::vector<std::string>* warnings = nullptr) {
  return parse_model_config(j, "test.json", warnings);
}

// Layer-by-layer structure, 0-based: "K"/"M" for the mixer, "d"/"e" for dense / MoE.
std::string layout(const ModelConfig& c) {
  std::string s;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    s += c.mixer(l) == Mixer::kKda ? 'K' : 'M';
    s += c.is_moe_layer(l) ? 'e' : 'd';
  }
  return s;
}

void expect_k3_numbers(const ModelConfig& c) {
  EXPECT_EQ(c.model_type, "kimi_linear");
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_hidden_layers, 93);
  EXPECT_EQ(c.num_kda_layers(), 69);
  EXPECT_EQ(c.num_mla_layers(), 24);
  EXPECT_EQ(c.num_dense_layers(), 1);
  EXPECT_EQ(c.num_moe_layers(), 92);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.num_experts_per_token, 16);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.routed_expert_hidden_size, 3584);
  EXPECT_EQ(c.expert_width(), 3584);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.num_attention_heads, 96);
  EXPECT_EQ(c.num_key_value_heads, 96);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_FALSE(c.head_dim.has_value());
  EXPECT_TRUE(c.mla_use_nope);
  EXPECT_TRUE(c.mla_use_output_gate);
  EXPECT_EQ(c.hidden_act, HiddenAct::kSitu);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.activation_situ_beta, 4.0);
  EXPECT_DOUBLE_EQ(c.activation_situ_linear_beta, 25.0);
  EXPECT_EQ(c.moe_router_activation_func, RouterActivation::kSigmoid);
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.attn_res_block_size, 12);
  EXPECT_EQ(c.attn_res_mode, AttnResMode::kBlock);
  EXPECT_EQ(c.balancing, Balancing::kQuantile);
  EXPECT_FALSE(c.has_capacity_limit());
  EXPECT_FALSE(c.tie_word_embeddings);
  ASSERT_TRUE(c.linear_attn_config.has_value());
  EXPECT_EQ(c.linear_attn_config->num_heads, 96);
  EXPECT_EQ(c.linear_attn_config->head_dim, 128);
  EXPECT_EQ(c.linear_attn_config->short_conv_kernel_size, 4);
  EXPECT_DOUBLE_EQ(c.linear_attn_config->gate_lower_bound, -5.0);
  EXPECT_TRUE(c.linear_attn_config->use_full_rank_gate);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_id, 163586);
  EXPECT_EQ(c.pad_token_id, 163839);
  // 3 KDA : 1 MLA, plus a final MLA layer; layer 0 dense.
  const std::string lay = layout(c);
  EXPECT_EQ(lay.substr(0, 16), "KdKeKeMeKeKeKeMe");
  EXPECT_EQ(lay.substr(lay.size() - 8), "KeKeMeMe");
}

TEST(ModelConfig, SharedK3ParsesNested) {
  if (!std::filesystem::exists(kSharedK3)) GTEST_SKIP() << "missing " << kSharedK3;
  std::vector<std::string> warnings;
  ModelConfig c = load_model_config(kSharedK3, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_TRUE(c.nested);
  EXPECT_EQ(c.wrapper_model_type, "kimi_k3");
  expect_k3_numbers(c);
  EXPECT_EQ(c.media_placeholder_token_id, 163605);
  EXPECT_EQ(c.image_placeholder, "<|kimi_image_placeholder|>");
  ASSERT_TRUE(c.vision_config.has_value());
  const VisionConfig& v = *c.vision_config;
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.vt_hidden_size, 1024);
  EXPECT_EQ(v.vt_intermediate_size, 4096);
  EXPECT_EQ(v.vt_num_attention_heads, 12);
  EXPECT_EQ(v.vt_num_hidden_layers, 27);
  EXPECT_EQ(v.merge_kernel_size, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(v.text_hidden_size, 7168);
  EXPECT_EQ(v.mm_hidden_size, 1024);
  EXPECT_EQ(v.activation_func, "gelu_pytorch_tanh");
}

TEST(ModelConfig, FlatK3ParsesAndAgreesWithShared) {
  std::vector<std::string> warnings;
  ModelConfig flat = load_model_config(kFlatK3, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_FALSE(flat.nested);
  EXPECT_FALSE(flat.vision_config.has_value());
  expect_k3_numbers(flat);
  if (!std::filesystem::exists(kSharedK3)) GTEST_SKIP() << "missing " << kSharedK3;
  // configs/kimi-k3.json is K3's text_config verbatim.
  EXPECT_EQ(read_json(kFlatK3), read_json(kSharedK3)["text_config"]);
  ModelConfig nested = load_model_config(kSharedK3, nullptr);
  EXPECT_EQ(layout(flat), layout(nested));
  EXPECT_EQ(flat.linear_attn_config->kda_layers, nested.linear_attn_config->kda_layers);
  EXPECT_EQ(flat.linear_attn_config->full_attn_layers, nested.linear_attn_config->full_attn_layers);
}

TEST(ModelConfig, SummaryNamesTheKeyNumbers) {
  const std::string s = model_config_summary(load_model_config(kFlatK3, nullptr));
  for (const char* part : {"93 layers", "69 KDA + 24 MLA", "1 dense + 92 MoE", "D 7168", "vocab 163840",
                           "context 1048576", "896 experts top-16", "2 shared", "latent 3584", "96 heads"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part << " not in:\n" << s;
  }
}

TEST(ModelConfig, TinyParses) {
  std::vector<std::string> warnings;
  ModelConfig c = load_model_config(kTiny, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(layout(c), "KdKeKeMe");
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_token, 2);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.routed_expert_hidden_size, 32);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.attn_res_block_size, 2);
  EXPECT_EQ(c.balancing, Balancing::kQuantile);
  EXPECT_EQ(c.media_placeholder_token_id, 11);  // <|image|> in myriad's tokenizer (data/tokenize/tokenizer.h)
}

// activation_situ_linear_beta: absent is K3's 25, null is upstream's "no clamp" (+infinity), a number is itself,
// and 0 or a negative number is still refused.
TEST(ModelConfig, SituLinearBetaNullMeansNoClamp) {
  json j = tiny();
  j.erase("activation_situ_linear_beta");
  EXPECT_EQ(parse_ok(j).activation_situ_linear_beta, 25.0);
  j["activation_situ_linear_beta"] = nullptr;
  const double b2 = parse_ok(j).activation_situ_linear_beta;
  EXPECT_TRUE(std::isinf(b2) && b2 > 0) << b2;
  j["activation_situ_linear_beta"] = 7.5;
  EXPECT_EQ(parse_ok(j).activation_situ_linear_beta, 7.5);
  j["activation_situ_linear_beta"] = 0;
  expect_error(j, {"activation_situ_linear_beta"});
}

TEST(ModelConfig, LoadsFromDirectoryAndReportsIoAndFormatErrors) {
  const auto dir = std::filesystem::temp_directory_path() / "myriad_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << tiny().dump();
  EXPECT_EQ(load_model_config(dir.string(), nullptr).hidden_size, 64);
  // Loading `name` fails with `kind`, the message holding `needle`.
  auto expect_load_error = [&](const std::string& name, ErrorKind kind, const std::string& needle) {
    try {
      load_model_config((dir / name).string(), nullptr);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::ofstream(dir / "broken.json") << "{\"hidden_size\": 64,";
  expect_load_error("broken.json", ErrorKind::kFormat, "broken.json");
  // A number beyond a double: nlohmann reports it as out_of_range, not a parse error; it was std::terminate (fuzzing).
  std::ofstream(dir / "overflow.json") << "{\"hidden_size\": 1e705}";
  expect_load_error("overflow.json", ErrorKind::kFormat, "overflow.json: not valid JSON");
  expect_load_error("absent.json", ErrorKind::kIo, "absent.json");
  std::filesystem::remove_all(dir);
}

// ---- one test per validation rule ----

TEST(ModelConfigRules, TopLevelMustBeAnObject) {
  expect_error(json::array({1, 2}), {"JSON object", "array"});
}

TEST(ModelConfigRules, StringWhereIntExpected) {
  json j = tiny();
  j["hidden_size"] = "64";
  expect_error(j, {"hidden_size", "\"64\"", "must be an integer", "string"});
}

TEST(ModelConfigRules, FloatWhereIntExpected) {
  json j = tiny();
  j["num_hidden_layers"] = 4.0;
  expect_error(j, {"num_hidden_layers", "4.0", "must be an integer", "float"});
}

TEST(ModelConfigRules, IntWhereBoolExpected) {
  json j = tiny();
  j["mla_use_nope"] = 1;
  expect_error(j, {"mla_use_nope", "= 1", "true or false"});
}

TEST(ModelConfigRules, StringWhereNumberExpected) {
  json j = tiny();
  j["rms_norm_eps"] = "1e-5";
  expect_error(j, {"rms_norm_eps", "\"1e-5\"", "must be a number"});
}

TEST(ModelConfigRules, StringWhereListExpected) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = "1,2,3";
  expect_error(j, {"linear_attn_config.kda_layers", "\"1,2,3\"", "list of integers"});
}

TEST(ModelConfigRules, FloatInsideLayerList) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 3.5};
  expect_error(j, {"linear_attn_config.kda_layers[2]", "3.5", "must be an integer"});
}

TEST(ModelConfigRules, MissingRequiredField) {
  for (const char* key :
       {"vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings", "rms_norm_eps", "kv_lora_rank",
        "num_attention_heads", "num_experts", "num_experts_per_token", "moe_intermediate_size", "intermediate_size"}) {
    SCOPED_TRACE(key);
    json j = tiny();
    j.erase(key);
    expect_error(j, {key, "required field is missing"});
  }
}

TEST(ModelConfigRules, NullRequiredFieldIsATypeError) {
  json j = tiny();
  j["vocab_size"] = nullptr;
  expect_error(j, {"vocab_size", "null", "must be an integer"});
}

TEST(ModelConfigRules, ZeroOrNegativeSizes) {
  for (const char* key :
       {"vocab_size", "hidden_size", "num_hidden_layers", "max_position_embeddings", "intermediate_size",
        "num_attention_heads", "kv_lora_rank", "v_head_dim", "num_experts", "num_experts_per_token",
        "moe_intermediate_size", "routed_expert_hidden_size", "q_lora_rank"}) {
    for (int v : {0, -3}) {
      SCOPED_TRACE(std::string(key) + " = " + std::to_string(v));
      json j = tiny();
      j[key] = v;
      expect_error(j, {key, str("= ", v), "must be > 0"});
    }
  }
  json j = tiny();
  j["linear_attn_config"]["head_dim"] = 0;
  expect_error(j, {"linear_attn_config.head_dim", "= 0", "must be > 0"});
}

TEST(ModelConfigRules, TopKAboveExperts) {
  json j = tiny();
  j["num_experts_per_token"] = 9;
  expect_error(j, {"num_experts_per_token", "= 9", "must be <= num_experts (8)"});
}

TEST(ModelConfigRules, NegativeSharedExperts) {
  json j = tiny();
  j["num_shared_experts"] = -1;
  expect_error(j, {"num_shared_experts", "= -1", "must be >= 0"});
}

TEST(ModelConfigRules, LayerOutOfRange) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 5};
  expect_error(j, {"linear_attn_config.kda_layers[2]", "= 5", "1-based", "1..4"});
}

TEST(ModelConfigRules, ZeroBasedLayerListRejected) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {0, 1, 2};
  j["linear_attn_config"]["full_attn_layers"] = {3};
  expect_error(j, {"linear_attn_config.kda_layers[0]", "= 0", "1-based"});
}

TEST(ModelConfigRules, LayerMissingFromBothLists) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {1, 2};
  expect_error(j, {"linear_attn_config", "layer 3", "neither kda_layers nor full_attn_layers"});
}

TEST(ModelConfigRules, LayerInBothLists) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4};
  expect_error(j, {"linear_attn_config.full_attn_layers[0]", "= 4", "layer 4 is listed in both"});
}

TEST(ModelConfigRules, LayerListedTwice) {
  json j = tiny();
  j["linear_attn_config"]["kda_layers"] = {1, 2, 2, 3};
  expect_error(j, {"linear_attn_config.kda_layers[2]", "= 2", "listed twice in kda_layers"});
}

TEST(ModelConfigRules, KdaSizesRequiredWhenKdaLayersExist) {
  json j = tiny();
  j["linear_attn_config"].erase("num_heads");
  expect_error(j, {"linear_attn_config.num_heads", "required field is missing", "KDA"});
}

TEST(ModelConfigRules, FirstKDenseReplaceBeyondLayers) {
  json j = tiny();
  j["first_k_dense_replace"] = 5;
  expect_error(j, {"first_k_dense_replace", "= 5", "num_hidden_layers (4)"});
  j["first_k_dense_replace"] = -1;
  expect_error(j, {"first_k_dense_replace", "= -1"});
}

TEST(ModelConfigRules, KvHeadsMustDivideHeads) {
  json j = tiny();
  j["num_key_value_heads"] = 3;
  expect_error(j, {"num_key_value_heads", "= 3", "must divide num_attention_heads (4)"});
}

TEST(ModelConfigRules, GateLowerBoundMustBeNegative) {
  for (double v : {0.0, 1.5}) {
    json j = tiny();
    j["linear_attn_config"]["gate_lower_bound"] = v;
    expect_error(j, {"linear_attn_config.gate_lower_bound", json(v).dump(), "must be < 0"});
  }
}

// Absent or null, the gate is Kimi-Linear's and fla's unbounded softplus gate (their configs have no such field),
// not a bound the file never gave.
TEST(ModelConfigRules, NoGateLowerBoundMeansTheUnboundedGate) {
  for (bool null : {false, true}) {
    json j = tiny();
    if (null)
      j["linear_attn_config"]["gate_lower_bound"] = nullptr;
    else
      j["linear_attn_config"].erase("gate_lower_bound");
    const ModelConfig c = parse_model_config(j, "test", nullptr);
    EXPECT_TRUE(std::isinf(c.linear_attn_config->gate_lower_bound) && c.linear_attn_config->gate_lower_bound < 0);
  }
}

TEST(ModelConfigRules, RmsNormEpsMustBePositive) {
  for (double v : {0.0, -1e-6}) {
    json j = tiny();
    j["rms_norm_eps"] = v;
    expect_error(j, {"rms_norm_eps", json(v).dump(), "must be > 0"});
  }
}

TEST(ModelConfigRules, AttnResBlockSize) {
  json j = tiny();
  j["attn_res_block_size"] = 0;
  expect_error(j, {"attn_res_block_size", "= 0", "must be >= 1"});
  j.erase("attn_res_block_size");
  expect_error(j, {"attn_res_block_size", "required field is missing", "\"none\""});
  j["attn_res_mode"] = "none";  // a plain residual needs no block size
  EXPECT_EQ(parse_ok(j).attn_res_mode, AttnResMode::kNone);
  j["attn_res_mode"] = "skip";
  j["attn_res_block_size"] = 3;
  EXPECT_EQ(parse_ok(j).attn_res_mode, AttnResMode::kSkip);
}

TEST(ModelConfigRules, CapacitySchedule) {
  json j = tiny();
  j["capacity_factor_start"] = 2.0;
  j["capacity_factor_end"] = 1.0;
  j["capacity_factor_steps"] = 100;
  ModelConfig c = parse_ok(j);
  ASSERT_TRUE(c.has_capacity_limit());
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(0), 2.0);
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(50), 1.5);
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(100), 1.0);
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(1000), 1.0);

  json bad = j;
  bad["capacity_factor_end"] = 3.0;
  expect_error(bad, {"capacity_factor_end", "3.0", "must be <= capacity_factor_start"});
  bad = j;
  bad["capacity_factor_steps"] = 0;
  expect_error(bad, {"capacity_factor_steps", "= 0", "must be > 0"});
  bad = j;
  bad["capacity_factor_steps"] = -5;
  expect_error(bad, {"capacity_factor_steps", "= -5", "must be >= 0"});
  bad = j;
  bad["capacity_factor_start"] = 0.0;
  bad["capacity_factor_end"] = 0.0;
  expect_error(bad, {"capacity_factor_start", "0.0", "must be > 0"});
  bad = j;
  bad.erase("capacity_factor_start");
  expect_error(bad, {"capacity_factor_end", "1.0", "without capacity_factor_start"});
  // A constant capacity factor: start alone.
  json constant = tiny();
  constant["capacity_factor_start"] = 1.25;
  c = parse_ok(constant);
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(0), 1.25);
  EXPECT_DOUBLE_EQ(c.capacity_factor_at(7), 1.25);
}

TEST(ModelConfigRules, UnknownHiddenAct) {
  json j = tiny();
  j["hidden_act"] = "gelu";
  expect_error(j, {"hidden_act", "\"gelu\"", "\"situ\"", "\"silu\""});
  j["hidden_act"] = "silu";
  EXPECT_EQ(parse_ok(j).hidden_act, HiddenAct::kSilu);
}

TEST(ModelConfigRules, UnknownRouterActivation) {
  json j = tiny();
  j["moe_router_activation_func"] = "relu";
  expect_error(j, {"moe_router_activation_func", "\"relu\"", "\"sigmoid\"", "\"softmax\""});
}

TEST(ModelConfigRules, UnknownTopkMethod) {
  json j = tiny();
  j["topk_method"] = "group_limited_greedy";
  expect_error(j, {"topk_method", "\"group_limited_greedy\"", "\"noaux_tc\""});
}

TEST(ModelConfigRules, RopeScaling) {
  json j = tiny();
  j["mla_use_nope"] = false;
  j["rope_theta"] = 50000;  // an integer is a valid number
  j["rope_scaling"] = {{"type", "yarn"},       {"factor", 32.0}, {"original_max_position_embeddings", 64},
                       {"beta_fast", 32},      {"beta_slow", 1}, {"mscale", 1.0},
                       {"mscale_all_dim", 1.0}};
  ModelConfig c = parse_ok(j);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling->factor, 32.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope_theta, 50000.0);

  json bad = j;
  bad["rope_scaling"]["type"] = "linear";
  expect_error(bad, {"rope_scaling.type", "\"linear\"", "unknown rope_scaling type"});
  bad = j;
  bad["rope_scaling"]["factor"] = 0.5;
  expect_error(bad, {"rope_scaling.factor", "0.5", ">= 1"});
  bad = j;
  bad["rope_scaling"]["original_max_position_embeddings"] = 4096;
  expect_error(bad, {"rope_scaling.original_max_position_embeddings", "4096", "max_position_embeddings (2048)"});
  bad = j;
  bad["qk_rope_head_dim"] = 7;
  expect_error(bad, {"qk_rope_head_dim", "= 7", "even"});
}

TEST(ModelConfigRules, SparseMlaAttention) {
  json j = tiny();
  EXPECT_FALSE(parse_ok(j).mla_sparse_attention.has_value());  // absent: dense
  j["mla_sparse_attention"] = json::object();
  ModelConfig c = parse_ok(j);
  ASSERT_TRUE(c.mla_sparse_attention.has_value());
  EXPECT_EQ(c.mla_sparse_attention->block_size, 64);
  EXPECT_EQ(c.mla_sparse_attention->top_k, 16);
  EXPECT_EQ(c.mla_sparse_attention->local_blocks(), 4);
  j["mla_sparse_attention"] = {{"block_size", 32}, {"top_k", 0}, {"window", 0}};
  c = parse_ok(j);
  EXPECT_EQ(c.mla_sparse_attention->block_size, 32);
  EXPECT_EQ(c.mla_sparse_attention->top_k, 0);
  EXPECT_EQ(c.mla_sparse_attention->local_blocks(), 0);
  json bad = j;
  bad["mla_sparse_attention"]["window"] = 48;
  expect_error(bad, {"mla_sparse_attention.window", "48", "multiple of block_size (32)"});
  bad = j;
  bad["mla_sparse_attention"]["block_size"] = 0;
  expect_error(bad, {"mla_sparse_attention.block_size", "0"});
  bad = j;
  bad["mla_sparse_attention"]["top_k"] = -1;
  expect_error(bad, {"mla_sparse_attention.top_k", "-1"});
}

TEST(ModelConfigRules, LognQueryScaling) {
  json j = tiny();
  EXPECT_FALSE(parse_ok(j).mla_logn_base.has_value());  // absent: off (K3)
  j["mla_logn_base"] = 4096;
  EXPECT_EQ(parse_ok(j).mla_logn_base, 4096);
  j["mla_logn_base"] = 1;  // ln(1) = 0: no length to scale from
  expect_error(j, {"mla_logn_base", "1", "must be >= 2"});
  j["mla_logn_base"] = "long";
  expect_error(j, {"mla_logn_base"});
}

TEST(ModelConfigRules, UnknownAttnResMode) {
  json j = tiny();
  j["attn_res_mode"] = "dense";
  expect_error(j, {"attn_res_mode", "\"dense\"", "\"block\"", "\"skip\"", "\"none\""});
}

TEST(ModelConfigRules, UnknownBalancing) {
  json j = tiny();
  j["balancing"] = "random";
  expect_error(j, {"balancing", "\"random\"", "\"qb\"", "\"aux_loss\"", "\"sign_update\""});
  j["balancing"] = "sign_update";
  j["bias_update_rate"] = 0.01;
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.balancing, Balancing::kSignUpdate);
  EXPECT_DOUBLE_EQ(c.bias_update_rate, 0.01);
  j["aux_loss_coef"] = -1.0;
  expect_error(j, {"aux_loss_coef", "-1.0", ">= 0"});
}

// model_type deepseek_v3: DeepSeek's field names as aliases and its defaults where its config is silent (SwiGLU,
// no AttnRes, interleaved RoPE), the same numbers as the kimi_linear spelling of the model.
TEST(ModelConfigRules, DeepSeekV3NamesAndDefaults) {
  json j = tiny();
  j.erase("linear_attn_config");
  for (const char* k :
       {"hidden_act", "attn_res_mode", "attn_res_block_size", "routed_expert_hidden_size", "num_experts",
        "num_experts_per_token", "num_shared_experts", "moe_renormalize", "moe_router_activation_func"})
    j.erase(k);
  j["model_type"] = "deepseek_v3";
  j["mla_use_nope"] = false;
  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["n_shared_experts"] = 1;
  j["norm_topk_prob"] = false;
  j["scoring_func"] = "softmax";
  j["n_group"] = 1;
  j["topk_group"] = 1;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_EQ(c.hidden_act, HiddenAct::kSilu);
  EXPECT_EQ(c.attn_res_mode, AttnResMode::kNone);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_token, 2);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_FALSE(c.moe_renormalize);
  EXPECT_EQ(c.moe_router_activation_func, RouterActivation::kSoftmax);
  j["rope_interleave"] = false;
  EXPECT_FALSE(parse_ok(j).rope_interleave);
  j["n_group"] = 2;  // DeepSeek-V3 routes within groups when n_group > 1: refused by the field's own name
  expect_error(j, {"n_group", "= 2", "group-limited routing"}, ErrorKind::kUnsupported);
  EXPECT_FALSE(parse_ok(tiny()).rope_interleave);  // kimi_linear: rotate-half
}

TEST(ModelConfigRules, WrongModelType) {
  json j = tiny();
  j["model_type"] = "llama";
  expect_error(j, {"model_type", "\"llama\"", "kimi_linear", "deepseek_v3"});
}

TEST(ModelConfigRules, TokenIdOutsideVocab) {
  json j = tiny();
  j["eos_token_id"] = 512;
  expect_error(j, {"eos_token_id", "= 512", "0..511"});
}

TEST(ModelConfigRules, AliasesAcceptedAndConflictsRejected) {
  json j = tiny();
  j.erase("num_experts");
  j.erase("num_experts_per_token");
  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_token, 2);
  j["num_experts_per_tok"] = 9;
  expect_error(j, {"num_experts_per_tok", "= 9", "must be <= num_experts (8)"});
  j = tiny();
  j["n_routed_experts"] = 16;
  expect_error(j, {"n_routed_experts", "= 16", "disagrees with num_experts (8)"});
}

TEST(ModelConfigRules, QLoraRankNullMeansPlainQProj) {
  json j = tiny();
  j["q_lora_rank"] = nullptr;
  EXPECT_FALSE(parse_ok(j).q_lora_rank.has_value());
  j.erase("q_lora_rank");
  EXPECT_FALSE(parse_ok(j).q_lora_rank.has_value());
}

TEST(ModelConfigRules, GroupedRoutingUnsupported) {
  json j = tiny();
  j["use_grouped_topk"] = true;
  j["num_expert_group"] = 2;
  j["topk_group"] = 1;
  expect_error(j, {"num_expert_group", "= 2", "not supported"}, ErrorKind::kUnsupported);
  j["topk_group"] = 3;
  expect_error(j, {"topk_group", "= 3", "num_expert_group (2)"});
  j = tiny();
  j["num_expert_group"] = 3;  // 8 experts
  expect_error(j, {"num_expert_group", "= 3", "must divide num_experts (8)"});
}

TEST(ModelConfigRules, AllDenseConfigNeedsNoMoeFields) {
  json j = tiny();
  j["first_k_dense_replace"] = 4;
  for (const char* k : {"num_experts", "num_experts_per_token", "moe_intermediate_size", "num_shared_experts"}) {
    j.erase(k);
  }
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.num_moe_layers(), 0);
  EXPECT_EQ(layout(c), "KdKdKdMd");
}

TEST(ModelConfigRules, NoLinearAttnConfigMeansAllMla) {
  json j = tiny();
  j.erase("linear_attn_config");
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.num_kda_layers(), 0);
  EXPECT_EQ(layout(c), "MdMeMeMe");
}

// ---- nested (K3 layout) paths ----

json nested_tiny() {
  json v = {{"patch_size", 14},
            {"vt_hidden_size", 64},
            {"vt_intermediate_size", 128},
            {"vt_num_attention_heads", 4},
            {"vt_num_hidden_layers", 2},
            {"merge_kernel_size", {2, 2}},
            {"text_hidden_size", 64}};
  return {{"model_type", "kimi_k3"}, {"text_config", tiny()}, {"vision_config", v}, {"eos_token_id", 2}};
}

TEST(ModelConfigNested, ParsesTextAndVision) {
  std::vector<std::string> warnings;
  ModelConfig c = parse_ok(nested_tiny(), &warnings);
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(c.nested);
  ASSERT_TRUE(c.vision_config.has_value());
  EXPECT_EQ(c.vision_config->vt_num_hidden_layers, 2);
  EXPECT_NE(model_config_summary(c).find("vision: patch 14"), std::string::npos);
}

TEST(ModelConfigNested, ErrorsCarryTheTextConfigPath) {
  json j = nested_tiny();
  j["text_config"]["linear_attn_config"]["kda_layers"] = {1, 2, 9};
  expect_error(j, {"text_config.linear_attn_config.kda_layers[2]", "= 9"});
  j = nested_tiny();
  j["text_config"]["num_experts_per_token"] = "2";
  expect_error(j, {"text_config.num_experts_per_token", "\"2\"", "must be an integer"});
}

TEST(ModelConfigNested, VisionRules) {
  json j = nested_tiny();
  j["vision_config"]["vt_num_attention_heads"] = 3;
  expect_error(j, {"vision_config.vt_hidden_size", "= 64", "divisible by vt_num_attention_heads (3)"});
  j["vision_config"]["qkv_hidden_size"] = 96;  // K3-style: the attention width is qkv_hidden_size
  EXPECT_EQ(parse_ok(j).vision_config->qkv_hidden_size, 96);
  j["vision_config"]["qkv_hidden_size"] = 100;
  expect_error(j, {"vision_config.qkv_hidden_size", "= 100", "divisible by vt_num_attention_heads (3)"});
  j = nested_tiny();
  j["vision_config"]["text_hidden_size"] = 128;
  expect_error(j, {"vision_config.text_hidden_size", "= 128", "hidden_size (64)"});
  j = nested_tiny();
  j["vision_config"]["merge_kernel_size"] = {2};
  expect_error(j, {"vision_config.merge_kernel_size", "[2]", "two positive integers"});
  j = nested_tiny();
  j["vision_config"].erase("patch_size");
  expect_error(j, {"vision_config.patch_size", "required field is missing"});
  j = nested_tiny();
  j["vision_config"]["activation_func"] = "swish";
  expect_error(j, {"vision_config.activation_func", "\"swish\""});
  // Choices the tower does not implement are refused when read, not computed as something else.
  j = nested_tiny();
  j["vision_config"]["activation_func"] = "quick_gelu";
  expect_error(j, {"vision_config.activation_func", "\"quick_gelu\""});
  j = nested_tiny();
  j["vision_config"]["merge_type"] = "sd2";
  expect_error(j, {"vision_config.merge_type", "\"sd2\""});
  j = nested_tiny();
  j["vision_config"]["pos_emb_interpolation_mode"] = "bicubic";
  expect_error(j, {"vision_config.pos_emb_interpolation_mode", "\"bicubic\""});
  j = nested_tiny();
  j["vision_config"]["mm_hidden_size"] = 32;
  expect_error(j, {"vision_config.mm_hidden_size", "= 32", "vt_hidden_size (64)"});
  j = nested_tiny();
  j["vision_config"]["vt_num_attention_heads"] = 8;  // head dim 8 / 2 pairs: fine; 64 / 32 = 2 is not
  EXPECT_NO_THROW(parse_ok(j));
  j["vision_config"]["vt_num_attention_heads"] = 32;
  expect_error(j, {"vision_config.vt_hidden_size", "= 64", "head dim divisible by 4"});
  // K3's values fill what the file leaves out.
  const VisionConfig v = *parse_ok(nested_tiny()).vision_config;
  EXPECT_EQ(v.init_pos_emb_height, 64);
  EXPECT_EQ(v.init_pos_emb_width, 64);
  EXPECT_EQ(v.mm_hidden_size, 64);
  EXPECT_EQ(v.merge_type, "sd2_tpool");
}

TEST(ModelConfigNested, OuterTokenIdsMustAgree) {
  json j = nested_tiny();
  j["eos_token_id"] = 5;
  expect_error(j, {"eos_token_id", "= 5", "disagrees with text_config.eos_token_id (2)"});
  j = nested_tiny();
  j["text_config"].erase("media_placeholder_token_id");
  j["media_placeholder_token_id"] = 7;
  EXPECT_EQ(parse_ok(j).media_placeholder_token_id, 7);
  j["media_placeholder_token_id"] = 600;
  expect_error(j, {"media_placeholder_token_id", "= 600", "vocab_size"});
}

// A small file must not describe a model too large to list: layers x experts is bounded (a 5 KB config with
// 200,000 experts took 15.7 GB and 32 s in `myriad params`); K3's 93 x 896 is well inside.
TEST(ModelConfigRules, LayersAndExpertsAreBounded) {
  json j = tiny();
  j["num_experts"] = (1 << 20) / j["num_hidden_layers"].get<int64_t>() + 1;
  expect_error(j, {"num_experts", "num_hidden_layers x num_experts must be <= 1048576"});
  j = tiny();
  j["num_hidden_layers"] = 100000;
  expect_error(j, {"num_hidden_layers", "must be <= 65536"});
}

// ---- unknown and known-ignored fields ----

TEST(ModelConfigWarnings, UnknownFieldsWarnOnceWithTheirPath) {
  json j = nested_tiny();
  j["foo"] = 1;
  j["text_config"]["bar"] = "x";
  j["text_config"]["linear_attn_config"]["baz"] = true;
  j["vision_config"]["qux"] = {1, 2};
  j["text_config"]["mystery"] = {{"deep", 1}};
  std::vector<std::string> warnings;
  parse_ok(j, &warnings);
  ASSERT_EQ(warnings.size(), 5u);
  for (const char* path :
       {"unknown field foo ", "unknown field text_config.bar ", "unknown field text_config.linear_attn_config.baz ",
        "unknown field vision_config.qux ", "unknown field text_config.mystery "}) {
    int hits = 0;
    for (const auto& w : warnings) hits += w.find(path) != std::string::npos;
    EXPECT_EQ(hits, 1) << path;
  }
  // Flat configs too, and a null warnings pointer is fine.
  json flat = tiny();
  flat["rope_scaling_extra"] = 2;
  warnings.clear();
  parse_ok(flat, &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("rope_scaling_extra"), std::string::npos);
  EXPECT_NO_THROW(parse_ok(flat, nullptr));
}

// A hostile config.json (a model file from the internet) is read in time linear in its size, without a flood of
// output or a crash: 100,000 unknown fields give 8 named warnings and one counting the rest. Nesting 100,000 deep is
// refused before parsing with one error naming the file: in an unknown field it was read (nlohmann parses and frees
// nesting without recursion), but in a known one the error message's dump() recursed once per level and
// `myriad params` died on the stack (found by review). All within 2 s.
TEST(ModelConfigWarnings, HugeAndDeepConfigsAreLinearAndQuiet) {
  const std::string dir = testing::TempDir() + "/myriad_config_huge";
  fs::create_directories(dir);
  std::string wide = read_text(kTiny);
  const size_t close = wide.rfind('}');
  std::string extra;
  for (int i = 0; i < 100000; ++i) extra += ", \"unknown_" + std::to_string(i) + "\": " + std::to_string(i);
  wide = wide.substr(0, close) + extra + "}";
  const std::string nest = std::string(100000, '[') + std::string(100000, ']');
  std::string deep_unknown = read_text(kTiny);
  deep_unknown = deep_unknown.substr(0, deep_unknown.rfind('}')) + ", \"mystery\": " + nest + "}";
  json tiny_json = json::parse(read_text(kTiny));
  tiny_json["hidden_size"] = "NEST";
  std::string deep_known = tiny_json.dump();
  deep_known.replace(deep_known.find("\"NEST\""), 6, nest);
  for (const auto& [name, text, want_warnings] :
       {std::tuple{"wide.json", wide, size_t(9)}, std::tuple{"deep_unknown.json", deep_unknown, size_t(0)},
        std::tuple{"deep_known.json", deep_known, size_t(0)}}) {
    SCOPED_TRACE(name);
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    std::vector<std::string> warnings;
    const auto t0 = std::chrono::steady_clock::now();
    if (want_warnings > 0) {
      ModelConfig c;
      ASSERT_NO_THROW(c = load_model_config(path, &warnings));
      EXPECT_EQ(c.num_hidden_layers, load_model_config(kTiny, nullptr).num_hidden_layers);
      ASSERT_EQ(warnings.size(), want_warnings);
      EXPECT_NE(warnings.back().find("99992 more unknown fields ignored"), std::string::npos) << warnings.back();
    } else {
      try {
        load_model_config(path, &warnings);
        ADD_FAILURE() << "loaded";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kFormat);
        EXPECT_NE(std::string(e.what()).find(path + ": JSON nested 100001 levels deep; at most 256 are read"),
                  std::string::npos)
            << e.what();
      }
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // NOTE: 2 s: the bound for 100,000 elements (optimised build); each read in well under 0.1 s here.
    if (testing_support::kTimeBoundsApply) {
      EXPECT_LT(took, 2.0);
    }
  }
  fs::remove_all(dir);
}

TEST(ModelConfigWarnings, KnownIgnoredFieldsAreSilent) {
  json j = tiny();
  j["architectures"] = {"KimiLinearForCausalLM"};
  j["auto_map"] = {{"AutoConfig", "configuration_kimi.KimiLinearConfig"}};
  j["torch_dtype"] = "bfloat16";
  j["dtype"] = "bfloat16";
  j["transformers_version"] = "4.56.0";
  j["use_cache"] = true;
  j["quantization_config"] = {{"quant_method", "compressed-tensors"}, {"nested_unknown", 1}};
  j["_name_or_path"] = "moonshotai/Kimi-K3";
  j["temperature"] = 0.7;
  j["attention_dropout"] = 0.0;
  std::vector<std::string> warnings;
  parse_ok(j, &warnings);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
}

TEST(ModelConfigWarnings, MissingModelTypeAndMtpLayersWarn) {
  json j = tiny();
  j.erase("model_type");
  j["num_nextn_predict_layers"] = 1;
  std::vector<std::string> warnings;
  parse_ok(j, &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("model_type"), std::string::npos);
  EXPECT_NE(warnings[1].find("num_nextn_predict_layers"), std::string::npos);
}

}  // namespace
}  // namespace myriad
