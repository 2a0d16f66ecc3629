// Expert pruning (model/prune.h) on the tiny model (8 experts, top-2, MoE layers 1-3) with random weights and a
// small tokenizer trained here: the kept set against an importance computed independently in this file from the
// original model's routing, the sliced router and renumbered experts against the original tensors, the output
// loading and running, exact logits when the dropped experts are never routed to, run directories, data
// reading, and the errors.
#include "deploy/prune.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "data/datasets/shards.h"
#include "io/checkpoint.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kTiny = MYRIAD_SOURCE_DIR "/configs/tiny.json";
constexpr int64_t kCalibTokens = 1100;  // two windows of the default 1024: [0, 1024) and [1024, 1100)

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

template <class F>
void expect_error(F f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string moe(int64_t l) {
  return "model.layers." + std::to_string(l) + ".block_sparse_moe.";
}

class PruneTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = new Tokenizer(Tokenizer::train_from_texts(generate_corpus(5, 120000), 400));
    std::string text;
    for (const std::string& d : generate_corpus(6, 40000)) text += d + "\n";
    calib_text_ = new std::string(text);
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete calib_text_;
  }
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::path(testing::TempDir()) / (std::string("myriad_prune_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    calib_ = (dir_ / "calib.txt").string();
    write_all(calib_, *calib_text_);
    config_ = load_model_config(kTiny, nullptr);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A model directory: config.json, model.safetensors, tokenizer/.
  std::string write_model(const std::string& name, const ModelWeights& w, const std::string& config_text) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    write_all((d / "config.json").string(), config_text);
    NamedTensors t;
    for (const auto& [n, v] : w.all()) t.emplace_back(n, v.value());
    save_checkpoint(d.string(), t);
    tok_->save((d / "tokenizer").string());
    return d.string();
  }

  // Random weights with a wider router than the init's (std 0.006 * 50), so that routing is far from uniform.
  ModelWeights spread_router_weights(uint64_t seed) {
    ModelWeights w = ModelWeights::random(config_, seed);
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
      if (!config_.is_moe_layer(l)) continue;
      const Tensor& g = w.at(moe(l) + "gate.weight").value();
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= 50.0f;
    }
    return w;
  }

  std::vector<int32_t> calib_tokens() const {
    std::vector<int32_t> ids = tok_->encode(*calib_text_);
    EXPECT_GT(int64_t(ids.size()), kCalibTokens);
    ids.resize(size_t(kCalibTokens));
    return ids;
  }

  PruneOptions options(const std::string& in, const std::string& out, const std::string& keep) const {
    PruneOptions o;
    o.in_dir = in;
    o.calib_path = calib_;
    o.out_dir = (dir_ / out).string();
    o.keep = parse_keep_spec(keep);
    o.max_tokens = kCalibTokens;
    return o;
  }

  static Tokenizer* tok_;
  static std::string* calib_text_;
  fs::path dir_;
  std::string calib_;
  ModelConfig config_;
};

Tokenizer* PruneTest::tok_ = nullptr;
std::string* PruneTest::calib_text_ = nullptr;

// Per MoE layer: copies and summed mixture weight per expert, by a plain loop over tokens (sort the biased scores,
// take k, weights s / sum over the k), over the same windows prune uses.
struct NaiveLayer {
  std::vector<int64_t> copies;
  std::vector<double> weight;
};
std::map<int64_t, NaiveLayer> naive_importance(const Transformer& model, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = model.config();
  const int64_t E = c.num_experts, k = c.num_experts_per_token, W = std::min<int64_t>(1024, c.max_position_embeddings);
  std::map<int64_t, NaiveLayer> out;
  ag::NoGradGuard ng;
  for (size_t begin = 0; begin < tokens.size(); begin += size_t(W)) {
    const size_t len = std::min(size_t(W), tokens.size() - begin);
    std::vector<int64_t> ids(tokens.begin() + long(begin), tokens.begin() + long(begin + len));
    const ForwardResult fr = model.forward(Tensor::from_vector(ids, {int64_t(len)}), Tensor());
    for (const RoutingStats& st : fr.routing) {
      NaiveLayer& nl = out[st.layer];
      nl.copies.resize(size_t(E), 0);
      nl.weight.resize(size_t(E), 0.0);
      const std::vector<float> s = st.scores.to_vector();
      const std::vector<float> b = model.p(moe(st.layer) + "gate.e_score_correction_bias").value().to_vector();
      for (size_t t = 0; t < len; ++t) {
        std::vector<int64_t> order(static_cast<size_t>(E));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return s[t * size_t(E) + size_t(x)] + b[size_t(x)] > s[t * size_t(E) + size_t(y)] + b[size_t(y)];
        });
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += s[t * size_t(E) + size_t(order[size_t(j)])];
        for (int64_t j = 0; j < k; ++j) {
          const size_t e = size_t(order[size_t(j)]);
          nl.copies[e] += 1;
          nl.weight[e] += c.routed_scaling_factor * s[t * size_t(E) + e] / sum;
        }
      }
    }
  }
  return out;
}

TEST_F(PruneTest, KeepsTopExpertsByRoutingWeightAndSlicesTheRouter) {
  const ModelWeights w = spread_router_weights(11);
  const std::string in = write_model("model", w, read_all(kTiny));
  const PruneResult r = prune_model(options(in, "pruned", "4"));
  ASSERT_EQ(r.kept, 4);
  ASSERT_EQ(r.of, 8);
  EXPECT_EQ(r.calibration_tokens, kCalibTokens);

  // The kept sets against the naive importance.
  Checkpoint ck_in = Checkpoint::open(in);
  const Transformer model(config_, ModelWeights::from_checkpoint(ck_in, config_));
  const auto naive = naive_importance(model, calib_tokens());
  ASSERT_EQ(naive.size(), 3u);
  ASSERT_EQ(r.layers.size(), 3u);
  const json report = json::parse(read_all((dir_ / "pruned" / "prune_report.json").string()));
  double kept_w = 0, total_w = 0;
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const int64_t l = r.layers[i].layer;
    const NaiveLayer& nl = naive.at(l);
    std::vector<int64_t> order(8);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return nl.weight[size_t(a)] > nl.weight[size_t(b)]; });
    // A margin between the 4th and 5th, so the expected set does not hinge on rounding.
    EXPECT_GT(nl.weight[size_t(order[3])] - nl.weight[size_t(order[4])], 1e-3) << "layer " << l;
    std::vector<int64_t> expect(order.begin(), order.begin() + 4);
    std::sort(expect.begin(), expect.end());
    EXPECT_EQ(r.layers[i].kept, expect) << "layer " << l;
    EXPECT_EQ(report["layers"][i]["kept_ids"].get<std::vector<int64_t>>(), expect);
    double w_kept = 0, w_all = std::accumulate(nl.weight.begin(), nl.weight.end(), 0.0);
    for (size_t j = 0; j < 4; ++j) {
      const json& kj = report["layers"][i]["kept"][j];
      EXPECT_EQ(kj["id"].get<int64_t>(), expect[j]);
      EXPECT_EQ(kj["frequency"].get<int64_t>(), nl.copies[size_t(expect[j])]);
      // f32 mixture weights summed in double, in the same order on both sides: agreement to rounding.
      EXPECT_NEAR(kj["weight_share"].get<double>(), nl.weight[size_t(expect[j])] / w_all, 1e-6);
      w_kept += nl.weight[size_t(expect[j])];
    }
    EXPECT_NEAR(r.layers[i].retained_weight, w_kept / w_all, 1e-6);
    EXPECT_LT(r.layers[i].retained_weight, 1.0);
    kept_w += w_kept;
    total_w += w_all;
  }
  EXPECT_NEAR(r.retained_weight, kept_w / total_w, 1e-6);
  EXPECT_NEAR(report["retained_weight_fraction"].get<double>(), kept_w / total_w, 1e-6);

  // The tensors: router rows and bias sliced, experts renumbered, everything else byte for byte.
  const std::string out = (dir_ / "pruned").string();
  const Checkpoint ck_out = Checkpoint::open(out);
  std::set<std::string> seen;
  for (const PruneLayerResult& lr : r.layers) {
    const std::string m = moe(lr.layer);
    const Tensor g_in = ck_in.tensor(m + "gate.weight"), g_out = ck_out.tensor(m + "gate.weight");
    const Tensor b_in = ck_in.tensor(m + "gate.e_score_correction_bias");
    const Tensor b_out = ck_out.tensor(m + "gate.e_score_correction_bias");
    ASSERT_EQ(g_out.shape(), (Shape{4, config_.hidden_size}));
    ASSERT_EQ(b_out.shape(), (Shape{4}));
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t e = lr.kept[size_t(i)];
      EXPECT_TRUE(same_bytes(g_out.select(0, i), g_in.select(0, e))) << m << " row " << i;
      EXPECT_EQ(b_out.at({i}), b_in.at({e}));
      for (const char* part : {"w1", "w2", "w3"}) {
        const std::string to = m + "experts." + std::to_string(i) + "." + part + ".weight";
        const std::string from = m + "experts." + std::to_string(e) + "." + part + ".weight";
        EXPECT_TRUE(same_bytes(ck_out.tensor(to), ck_in.tensor(from))) << to << " <- " << from;
        seen.insert(to);
      }
    }
    for (int64_t i = 4; i < 8; ++i) EXPECT_FALSE(ck_out.contains(m + "experts." + std::to_string(i) + ".w1.weight"));
    seen.insert(m + "gate.weight");
    seen.insert(m + "gate.e_score_correction_bias");
  }
  EXPECT_EQ(ck_out.names().size(), ck_in.names().size() - 3 * 4 * 3);
  for (const std::string& name : ck_out.names()) {
    if (seen.count(name)) continue;
    ASSERT_TRUE(ck_in.contains(name)) << name;
    EXPECT_TRUE(same_bytes(ck_out.tensor(name), ck_in.tensor(name))) << name;
  }

  // config.json: the new count, the record, no warnings; the tokenizer copied; the model loads and runs.
  std::vector<std::string> warnings;
  const ModelConfig pc = load_model_config(out, &warnings);
  EXPECT_TRUE(warnings.empty()) << (warnings.empty() ? "" : warnings.front());
  EXPECT_EQ(pc.num_experts, 4);
  const json cfg = json::parse(read_all(out + "/config.json"));
  EXPECT_EQ(cfg["pruning"],
            (json{{"kept", 4}, {"of", 8}, {"calibration_tokens", kCalibTokens}, {"importance", "routing_weight"}}));
  EXPECT_EQ(Tokenizer::load(out + "/tokenizer").hash(), tok_->hash());
  const Transformer pruned(pc, ModelWeights::from_checkpoint(ck_out, pc));
  const std::vector<int32_t> ids = calib_tokens();
  std::vector<int64_t> x(ids.begin(), ids.begin() + 65), y(ids.begin() + 1, ids.begin() + 66);
  ag::NoGradGuard ng;
  const ForwardResult fr = pruned.forward(Tensor::from_vector(x, {65}), Tensor::from_vector(y, {65}));
  EXPECT_TRUE(std::isfinite(fr.loss.value().data<float>()[0]));
  // Dropping experts that carried weight changes the output (so the exact equality of the next test means something).
  const ForwardResult fo = model.forward(Tensor::from_vector(x, {65}), Tensor::from_vector(y, {65}));
  EXPECT_NE(fr.loss.value().data<float>()[0], fo.loss.value().data<float>()[0]);
  ASSERT_EQ(fr.routing.size(), 3u);
  EXPECT_EQ(fr.routing[0].scores.shape(), (Shape{65, 4}));
  EXPECT_GT(r.bytes_before, r.bytes_after);
  EXPECT_EQ(r.bytes_after, fs::file_size(out + "/model.safetensors"));
  EXPECT_EQ(r.bytes_before, fs::file_size(in + "/model.safetensors"));
}

// Experts the calibration never routes to (their correction bias is -100; scores lie in (0, 1)) are the ones
// dropped, and then the pruned model computes what the original did: each token picks the same experts
// (sigmoid scores depend on their own router row only; the renumbering keeps the order, so ties and the
// dispatch order are unchanged) with the same weights.
// NOTE: the same, not bit for bit: the router product has 8 columns before and 4 after, and OpenBLAS may sum a
// narrower product in another order (its AVX2 kernels do), so router logits differ in the last bit. The test asks
// for identical loads per kept expert (the discrete decisions) and logits within 1e-5 of their scale: f32
// rounding through four layers is ~1e-6 relative, while a wrong expert or weight changes logits at O(1e-2).
TEST_F(PruneTest, NeverRoutedExpertsAreDroppedAndLogitsAreUnchanged) {
  ModelWeights w = spread_router_weights(12);
  const std::map<int64_t, std::vector<int64_t>> dropped = {{1, {0, 2, 5, 7}}, {2, {1, 3, 4, 6}}, {3, {4, 5, 6, 7}}};
  for (const auto& [l, ds] : dropped) {
    const Tensor& b = w.at(moe(l) + "gate.e_score_correction_bias").value();
    for (int64_t e : ds) b.data<float>()[e] = -100.0f;
  }
  // As a training run: RUN/checkpoints/step-000007/ named by RUN/checkpoints/latest.
  const fs::path run = dir_ / "run";
  fs::create_directories(run / "checkpoints");
  write_model("run/checkpoints/step-000007", w, read_all(kTiny));
  write_all((run / "checkpoints" / "step-000007" / "trainer_state.json").string(), "{}");
  write_all((run / "checkpoints" / "latest").string(), "step-000007\n");

  PruneOptions o = options(run.string(), "pruned", "50%");
  o.eval_path = calib_;
  const PruneResult r = prune_model(o);
  EXPECT_EQ(r.checkpoint_dir, (run / "checkpoints" / "step-000007").string());
  ASSERT_EQ(r.layers.size(), 3u);
  for (const PruneLayerResult& lr : r.layers) {
    std::vector<int64_t> expect;
    for (int64_t e = 0; e < 8; ++e)
      if (!std::count(dropped.at(lr.layer).begin(), dropped.at(lr.layer).end(), e)) expect.push_back(e);
    EXPECT_EQ(lr.kept, expect) << "layer " << lr.layer;
    EXPECT_EQ(lr.retained_weight, 1.0);
    EXPECT_EQ(lr.retained_copies, 1.0);
  }

  const Transformer original(config_, std::move(w));
  const std::string out = (dir_ / "pruned").string();
  const ModelConfig pc = load_model_config(out, nullptr);
  const Transformer pruned(pc, ModelWeights::from_checkpoint(Checkpoint::open(out), pc));
  const std::vector<int32_t> ids = calib_tokens();
  ag::NoGradGuard ng;
  for (size_t begin = 0; begin < ids.size(); begin += 1024) {
    const size_t len = std::min<size_t>(1024, ids.size() - begin);
    const Tensor x = Tensor::from_vector(
        std::vector<int64_t>(ids.begin() + long(begin), ids.begin() + long(begin + len)), {int64_t(len)});
    const ForwardResult fa = original.forward(x, Tensor()), fb = pruned.forward(x, Tensor());
    ASSERT_EQ(fa.routing.size(), 3u);
    ASSERT_EQ(fb.routing.size(), 3u);
    for (size_t i = 0; i < fa.routing.size(); ++i) {
      const std::vector<int64_t>& ds = dropped.at(fa.routing[i].layer);
      std::vector<int64_t> kept_load;
      for (int64_t e = 0; e < 8; ++e)
        if (std::count(ds.begin(), ds.end(), e) == 0) kept_load.push_back(fa.routing[i].load[size_t(e)]);
      EXPECT_EQ(fb.routing[i].load, kept_load) << "layer " << fa.routing[i].layer << ", window at " << begin;
    }
    const std::vector<float> a = original.logits(fa.hidden).to_vector(), b = pruned.logits(fb.hidden).to_vector();
    ASSERT_EQ(a.size(), b.size());
    float scale = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) {
      scale = std::max(scale, std::abs(a[i]));
      diff = std::max(diff, std::abs(a[i] - b[i]));
    }
    EXPECT_LE(diff, 1e-5f * scale) << "window at " << begin << ": max |logit difference| " << diff;
  }
  ASSERT_TRUE(r.eval_before && r.eval_after);
  EXPECT_NEAR(r.eval_before->perplexity, r.eval_after->perplexity, 1e-5 * r.eval_before->perplexity);
  EXPECT_EQ(r.eval_before->tokens, kCalibTokens);
}

TEST_F(PruneTest, RefusesBadKeepCountsAnExistingOutputAndBadInput) {
  const std::string in = write_model("model", ModelWeights::random(config_, 3), read_all(kTiny));
  expect_error([&] { prune_model(options(in, "a", "1")); }, ErrorKind::kValue, "num_experts_per_token (2)");
  expect_error([&] { prune_model(options(in, "a", "9")); }, ErrorKind::kValue, "more than the model's num_experts");
  expect_error([&] { prune_model(options(in, "a", "10%")); }, ErrorKind::kValue, "= 1: fewer experts");
  EXPECT_FALSE(fs::exists(dir_ / "a"));

  // An existing, non-empty output: refused without --force (and left as it was), replaced with it.
  fs::create_directories(dir_ / "out");
  write_all((dir_ / "out" / "keep.txt").string(), "mine");
  expect_error([&] { prune_model(options(in, "out", "4")); }, ErrorKind::kIo, "pass --force");
  EXPECT_EQ(read_all((dir_ / "out" / "keep.txt").string()), "mine");
  PruneOptions o = options(in, "out", "4");
  o.force = true;
  prune_model(o);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "keep.txt"));
  EXPECT_TRUE(fs::exists(dir_ / "out" / "model.safetensors"));
  for (const auto& e : fs::directory_iterator(dir_))  // no temporary directory left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // The output may not be the input.
  o.out_dir = in;
  expect_error([&] { prune_model(o); }, ErrorKind::kValue, "input model's directory");

  // Empty calibration data, a missing model, a model without MoE layers.
  write_all((dir_ / "empty.txt").string(), "");
  PruneOptions e = options(in, "b", "4");
  e.calib_path = (dir_ / "empty.txt").string();
  expect_error([&] { prune_model(e); }, ErrorKind::kValue, "holds no text");
  expect_error([&] { prune_model(options((dir_ / "nope").string(), "b", "4")); }, ErrorKind::kIo, "does not exist");
  fs::create_directories(dir_ / "bare");
  expect_error([&] { prune_model(options((dir_ / "bare").string(), "b", "4")); }, ErrorKind::kIo, "holds no model");
  json dense = json::parse(read_all(kTiny));
  dense["first_k_dense_replace"] = 4;
  const ModelConfig dc = parse_model_config(dense, "dense", nullptr);
  ASSERT_EQ(dc.num_moe_layers(), 0);
  const std::string dense_dir = write_model("dense", ModelWeights::random(dc, 4), dense.dump());
  expect_error([&] { prune_model(options(dense_dir, "b", "4")); }, ErrorKind::kUnsupported, "no MoE layers");
  EXPECT_FALSE(fs::exists(dir_ / "b"));
}

TEST(PruneKeep, ParsesCountsAndPercentagesAndRoundsUp) {
  EXPECT_EQ(resolve_keep(parse_keep_spec("4"), 8, 2), 4);
  EXPECT_EQ(resolve_keep(parse_keep_spec("75%"), 8, 2), 6);
  EXPECT_EQ(resolve_keep(parse_keep_spec("50%"), 8, 2), 4);
  EXPECT_EQ(resolve_keep(parse_keep_spec("25%"), 8, 2), 2);
  EXPECT_EQ(resolve_keep(parse_keep_spec("30%"), 8, 2), 3);  // 2.4 rounded up
  EXPECT_EQ(resolve_keep(parse_keep_spec("100%"), 896, 16), 896);
  EXPECT_EQ(resolve_keep(parse_keep_spec("12.5%"), 896, 16), 112);
  for (const char* bad : {"", "0", "-3", "abc", "4x", "0%", "101%", "%", "x%"})
    EXPECT_THROW(parse_keep_spec(bad), Error) << bad;
}

TEST_F(PruneTest, ReadsTextJsonlAndShardDirectories) {
  // Text: the file's tokens then <|endoftext|>, cut at max_tokens.
  const std::vector<int32_t> all = tok_->encode(*calib_text_);
  std::vector<int32_t> expect = all;
  expect.push_back(kEndOfTextId);
  EXPECT_EQ(read_data_tokens(calib_, "train", *tok_, 0), expect);
  EXPECT_EQ(read_data_tokens(calib_, "train", *tok_, 10), std::vector<int32_t>(all.begin(), all.begin() + 10));
  // JSONL: each document's tokens then <|endoftext|>; bad lines skipped.
  write_all((dir_ / "d.jsonl").string(), "{\"text\": \"one two\"}\nnot json\n{\"text\": \"three\"}\n");
  std::vector<int32_t> j = tok_->encode("one two");
  j.push_back(kEndOfTextId);
  for (int32_t t : tok_->encode("three")) j.push_back(t);
  j.push_back(kEndOfTextId);
  EXPECT_EQ(read_data_tokens((dir_ / "d.jsonl").string(), "train", *tok_, 0), j);
  // A shard directory: the named split.
  fs::create_directories(dir_ / "shards");
  const std::vector<int32_t> tr = {5, 6, 7, 8}, va = {9, 10, 11};
  write_shard((dir_ / "shards" / "train-00000.bin").string(), ShardDType::kU16, tr);
  write_shard((dir_ / "shards" / "val-00000.bin").string(), ShardDType::kU16, va);
  EXPECT_EQ(read_data_tokens((dir_ / "shards").string(), "train", *tok_, 0), tr);
  EXPECT_EQ(read_data_tokens((dir_ / "shards").string(), "val", *tok_, 2), (std::vector<int32_t>{9, 10}));
}

}  // namespace
}  // namespace myriad
