// The two seams through which parallelism reaches the model (docs/design.md §4), driven from outside as expert and
// sequence parallelism will drive them:
//   - the MoE dispatcher: the training forward and the inference model send every MoE layer's copies through the
//     dispatcher they are given (and only through it), and a dispatcher that moves the rows through a buffer of
//     its own changes nothing;
//   - the sequence context: a sequence run as two shards in turn, the second continuing from the states the
//     first left (conv tails and KDA state, handed over by the context), gives the whole sequence's hidden
//     states and the same gradients;
//   - gradient-ready markers: during the backward each layer is reported once, in decreasing order, and at that
//     moment every one of its weights already holds its final gradient (what the overlapped all-reduce sends).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "autograd/functions.h"
#include "infer/decode_weights.h"
#include "infer/inference_model.h"
#include "model/config.h"
#include "model/gradient_ready.h"
#include "model/moe_dispatch.h"
#include "model/sequence_context.h"
#include "model/transformer.h"

namespace myriad {
namespace {

using ag::Var;

ModelConfig load(const char* name) {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/" + name, nullptr);
}

std::vector<int64_t> tokens_of(const ModelConfig& c, int64_t T) {
  std::vector<int64_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 53 + 7) % c.vocab_size;
  return ids;
}

// The local dispatcher's work, with the dispatched rows copied into a buffer of the dispatcher's own (as an
// all-to-all would hand over rows received from elsewhere) and every call counted.
class CopyingDispatcher final : public MoeDispatcher {
 public:
  Range local_experts(int64_t num_experts) const override { return {0, num_experts}; }
  ExpertBatch dispatch(const Var& z, const ExpertGroups& groups, const Var& weights) const override {
    ++dispatches;
    ExpertBatch b = local_moe_dispatcher().dispatch(z, groups, weights);
    b.rows = ag::add(b.rows, Var(Tensor::zeros(b.rows.shape()), false));  // a new buffer, on the tape
    copies += b.rows.shape()[0];
    return b;
  }
  Var combine(const Var& expert_out, const ExpertBatch& batch, int64_t tokens) const override {
    ++combines;
    return local_moe_dispatcher().combine(expert_out, batch, tokens);
  }
  mutable int64_t dispatches = 0, combines = 0, copies = 0;
};

TEST(MoeDispatchSeam, TrainingAndInferenceRouteEveryMoeLayerThroughTheGivenDispatcher) {
  const ModelConfig c = load("tiny.json");
  const Transformer model(c, ModelWeights::random(c, 3));
  const int64_t T = 40;
  std::vector<int64_t> ids = tokens_of(c, T), tg(ids.begin() + 1, ids.end());
  tg.push_back(-100);
  const Tensor tokens = Tensor::from_vector(ids, {T}), targets = Tensor::from_vector(tg, {T});
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe_layers += c.is_moe_layer(l);
  ASSERT_GT(moe_layers, 0);

  const float local_loss = model.forward(tokens, targets).loss.value().data<float>()[0];
  CopyingDispatcher d;
  ForwardOptions opt;
  opt.moe_dispatcher = &d;
  const float loss = model.forward(tokens, targets, opt).loss.value().data<float>()[0];
  EXPECT_EQ(d.dispatches, moe_layers);
  EXPECT_EQ(d.combines, moe_layers);
  EXPECT_EQ(d.copies, moe_layers * T * c.num_experts_per_token);  // no capacity limit: every copy served
  EXPECT_EQ(loss, local_loss);  // the same operations on the same values, in the same order

  InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  SequenceState a = inf.new_sequence(), b = inf.new_sequence();
  const BatchEntry ea{&a, ids32}, eb{&b, ids32};
  const Tensor local_logits = inf.forward(std::span<const BatchEntry>(&ea, 1), true);
  CopyingDispatcher di;
  inf.set_moe_dispatcher(&di);
  const Tensor logits = inf.forward(std::span<const BatchEntry>(&eb, 1), true);
  EXPECT_EQ(di.dispatches, moe_layers);
  EXPECT_EQ(di.combines, moe_layers);
  EXPECT_EQ(logits.to_vector(), local_logits.to_vector());
}

// Shards run one after the other in this process: the context hands each KDA layer's conv tails and final state
// from one shard to the next (what a sequence-parallel context composes across ranks).
class SequentialShards final : public SequenceContext {
 public:
  int64_t token_offset() const override { return offset; }
  Var kda_conv_state_in(int64_t layer, int which, const Var&) override {
    auto it = conv.find(layer);
    return it == conv.end() ? Var() : it->second[size_t(which)];
  }
  Var kda_state_in(int64_t layer) override {
    auto it = state.find(layer);
    return it == state.end() ? Var() : it->second;
  }
  bool wants_kda_shard_states() const override { return true; }
  void kda_shard_done(int64_t layer, const std::array<Var, 3>& tails, const Var& out) override {
    next_conv[layer] = tails;
    next_state[layer] = out;
  }
  Var mla_latents(int64_t, const Var& rows) override { return rows; }
  // The next shard starts where this one ended.
  void advance(int64_t tokens) {
    offset += tokens;
    conv = next_conv;
    state = next_state;
  }
  int64_t offset = 0;
  std::map<int64_t, std::array<Var, 3>> conv, next_conv;
  std::map<int64_t, Var> state, next_state;
};

TEST(SequenceContextSeam, TwoShardsInTurnEqualTheWholeSequenceForwardAndBackward) {
  ModelConfig c = load("tiny.json");
  // Every mixer a KDA layer: attention over earlier shards' latents (more keys than queries) is not built yet.
  c.linear_attn_config->kda_layers.clear();
  for (int64_t l = 1; l <= c.num_hidden_layers; ++l) c.linear_attn_config->kda_layers.push_back(l);
  c.linear_attn_config->full_attn_layers.clear();
  ASSERT_EQ(c.num_kda_layers(), c.num_hidden_layers);
  Transformer model(c, ModelWeights::random(c, 9));
  const int64_t T = 96, T1 = 40;  // shard 1 ends inside a 64-token chunk: the chunk boundaries differ
  const std::vector<int64_t> ids = tokens_of(c, T);
  const Tensor tokens = Tensor::from_vector(ids, {T});
  const Tensor no_targets;

  model.weights().zero_grad();
  const ForwardResult whole = model.forward(tokens, no_targets);
  ag::backward(ag::sum(whole.hidden));
  std::map<std::string, std::vector<float>> whole_grad;
  for (const auto& [name, w] : model.weights().all())
    if (w.has_grad()) whole_grad[name] = w.grad().to_vector();

  model.weights().zero_grad();
  SequentialShards ctx;
  ForwardOptions opt;
  opt.sequence = &ctx;
  const ForwardResult first = model.forward(tokens.slice(0, 0, T1).contiguous(), no_targets, opt);
  ctx.advance(T1);
  const ForwardResult second = model.forward(tokens.slice(0, T1, T).contiguous(), no_targets, opt);
  ASSERT_EQ(ctx.state.size(), size_t(c.num_hidden_layers));

  // Hidden states: the chunkwise KDA from a carried state against one pass over the whole sequence (different
  // chunk boundaries), through 4 layers: f32 rounding of O(1) values, ~1e-6; 1e-4 would still catch a lost state
  // (the second shard's rows would then differ at O(0.1)).
  const std::vector<float> full = whole.hidden.value().to_vector();
  const std::vector<float> a = first.hidden.value().to_vector(), b = second.hidden.value().to_vector();
  const int64_t D = c.hidden_size;
  double worst = 0;
  for (int64_t i = 0; i < T * D; ++i) {
    const float got = i < T1 * D ? a[size_t(i)] : b[size_t(i - T1 * D)];
    worst = std::max(worst, double(std::abs(got - full[size_t(i)])));
  }
  EXPECT_LT(worst, 1e-4) << "largest hidden-state difference";

  // Gradients: the loss over both shards, back through the handed-over KDA states into the first shard.
  ag::backward(ag::add(ag::sum(first.hidden), ag::sum(second.hidden)));
  for (const auto& [name, g] : whole_grad) {
    const Var& w = model.weights().at(name);
    ASSERT_TRUE(w.has_grad()) << name;
    const std::vector<float> got = w.grad().to_vector();
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      num += (got[i] - g[i]) * double(got[i] - g[i]);
      den += double(g[i]) * g[i];
    }
    // Relative L2 error of each weight's gradient: f32 sums over 96 tokens in a different order, ~1e-6; a state
    // or conv tail that did not carry the gradient back into the first shard would miss a share of O(1e-2).
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-4) << name;
  }
}

// Copies each reported layer's gradients at the moment it is reported.
class SnapshotListener final : public GradientReadyListener {
 public:
  explicit SnapshotListener(const ModelWeights& w) : w_(w) {}
  void layer_ready(int64_t layer) override {
    order.push_back(layer);
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    for (const auto& [name, v] : w_.all())
      if (name.rfind(prefix, 0) == 0 && v.has_grad()) seen[name] = v.grad().to_vector();
  }
  std::vector<int64_t> order;
  std::map<std::string, std::vector<float>> seen;

 private:
  const ModelWeights& w_;
};

TEST(GradientReadySeam, EachLayerIsReportedOnceWithItsFinalGradients) {
  for (const char* attn_res : {"block", "none"})
    for (bool checkpoint : {false, true}) {
      SCOPED_TRACE(std::string("attn_res_mode ") + attn_res + (checkpoint ? ", checkpointed layers" : ""));
      ModelConfig c = load("tiny.json");
      c.attn_res_mode = std::string(attn_res) == "block" ? AttnResMode::kBlock : AttnResMode::kNone;
      Transformer model(c, ModelWeights::random(c, 5));
      const int64_t T = 48;
      const Tensor tokens = Tensor::from_vector(tokens_of(c, T), {T});
      std::vector<int64_t> next = tokens_of(c, T + 1);
      next.erase(next.begin());
      const Tensor targets = Tensor::from_vector(next, {T});
      SnapshotListener listener(model.weights());
      ForwardOptions opt;
      opt.checkpoint_layers = checkpoint;
      opt.gradient_ready = &listener;
      model.weights().zero_grad();
      const ForwardResult r = model.forward(tokens, targets, opt);
      EXPECT_TRUE(listener.order.empty()) << "a layer was reported during the forward";
      ag::backward(r.loss);
      std::vector<int64_t> want(static_cast<size_t>(c.num_hidden_layers));
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) want[size_t(c.num_hidden_layers - 1 - l)] = l;
      EXPECT_EQ(listener.order, want);
      // Every layer weight with a gradient now had exactly this gradient when its layer was reported (a weight
      // that received a contribution after the report would differ; one reported before its first one is missing).
      int64_t layer_weights = 0;
      for (const auto& [name, v] : model.weights().all()) {
        if (name.rfind("model.layers.", 0) != 0 || !v.has_grad()) continue;
        ++layer_weights;
        const auto it = listener.seen.find(name);
        ASSERT_NE(it, listener.seen.end()) << name << " had no gradient yet when its layer was reported";
        EXPECT_EQ(it->second, v.grad().to_vector()) << name << " changed after its layer was reported";
      }
      EXPECT_GT(layer_weights, 10);
      // Without a listener the same backward gives the same gradients (the markers change nothing).
      std::map<std::string, std::vector<float>> with;
      for (const auto& [name, v] : model.weights().all())
        if (v.has_grad()) with[name] = v.grad().to_vector();
      model.weights().zero_grad();
      opt.gradient_ready = nullptr;
      ag::backward(model.forward(tokens, targets, opt).loss);
      for (const auto& [name, g] : with) EXPECT_EQ(g, model.weights().at(name).grad().to_vector()) << name;
    }
}

}  // namespace
}  // namespace myriad
