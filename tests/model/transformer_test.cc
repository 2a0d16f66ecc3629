// The C++ model's own invariants (its parity with the float64 reference is tests/model/parity.py):
// AttnRes reads, grouped MoE dispatch = a per-token loop, the decay range, bad input, and the 896-expert
// config taking optimizer steps.
#include "model/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "core/error.h"
#include "infer/decode_weights.h"
#include "infer/inference_model.h"
#include "model/config.h"
#include "model/sequence_context.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

using ag::Var;

ModelConfig load(const char* name) {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/" + name, nullptr);
}

Tensor randn(std::mt19937& rng, const Shape& s, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, double(std::abs(x[i] - y[i])));
  return m;
}

// ||b - a|| / ||a|| (L2), in double.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(b[i] - a[i]) * double(b[i] - a[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The training forward's logits of `ids` against the inference model's, from one prefill and token by token.
// f32 through 4 layers on both sides (chunkwise KDA, naive against absorbed MLA): ~1e-6 of O(1) logits, bound tol.
// Returns the training logits.
Tensor expect_inference_matches_training(const ModelConfig& c, const Transformer& model,
                                         const std::vector<int64_t>& ids, double tol) {
  ag::NoGradGuard ng;
  const int64_t T = int64_t(ids.size());
  const Tensor logits = model.logits(model.forward(Tensor::from_vector(ids, {T}), Tensor()).hidden);
  InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  SequenceState prefill = inf.new_sequence(), decode = inf.new_sequence();
  const BatchEntry e{&prefill, ids32};
  EXPECT_LE(max_abs_diff(inf.forward(std::span<const BatchEntry>(&e, 1), true), logits), tol) << "prefill";
  for (int64_t t = 0; t < T; ++t) {
    const BatchEntry one{&decode, std::span<const int32_t>(ids32.data() + t, 1)};
    EXPECT_LE(max_abs_diff(inf.forward(std::span<const BatchEntry>(&one, 1)), logits.slice(0, t, t + 1)), tol)
        << "decode token " << t;
  }
  return logits;
}

TEST(AttnRes, OneCandidateIsIdentityZeroQueryIsMeanAndGradientsReachEverySnapshot) {
  const ModelConfig c = load("tiny.json");
  Transformer model(c, ModelWeights::random(c, 1));
  std::mt19937 rng(2);
  const int64_t T = 5, D = c.hidden_size;
  Var a(randn(rng, {T, D}), true), b(randn(rng, {T, D}), true), r(randn(rng, {T, D}), true);
  const std::string norm = "model.layers.1.mlp_res_norm.weight", proj = "model.layers.1.mlp_res_proj.weight";
  {
    ag::NoGradGuard ng;
    // One candidate: softmax over one score is 1, the read is the candidate itself.
    EXPECT_LE(max_abs_diff(model.attn_res_read(norm, proj, {a}).value(), a.value()), 1e-6);
  }
  // Random init gives zero query projections (uniform mixing): the read is the mean of the candidates.
  Tensor proj_w = model.weights().at(proj).value();  // a handle on the weight's storage
  proj_w.zero();
  {
    ag::NoGradGuard ng;
    Tensor mean = Tensor::empty({T, D});
    for (int64_t i = 0; i < T * D; ++i)
      mean.data<float>()[i] =
          (a.value().data<float>()[i] + b.value().data<float>()[i] + r.value().data<float>()[i]) / 3;
    EXPECT_LE(max_abs_diff(model.attn_res_read(norm, proj, {a, b, r}).value(), mean), 1e-6);
  }
  // Gradients reach every candidate and the query weights (a non-zero query, so the softmax is not flat).
  proj_w.copy_from(randn(rng, {1, D}));
  model.weights().zero_grad();
  ag::backward(ag::sum(ag::mul(model.attn_res_read(norm, proj, {a, b, r}), Var(randn(rng, {T, D}), false))));
  for (const Var* v : {&a, &b, &r}) {
    ASSERT_TRUE(v->has_grad());
    double n = 0;
    for (float g : v->grad().to_vector()) n += std::abs(g);
    EXPECT_GT(n, 1e-3);
  }
  EXPECT_TRUE(model.weights().at(norm).has_grad() && model.weights().at(proj).has_grad());
}

// The grouped dispatch (copies sorted by expert, one matrix product per expert, weighted scatter back)
// against a loop over tokens that applies each token's chosen experts one at a time.
TEST(Moe, GroupedDispatchEqualsPerTokenLoop) {
  const ModelConfig c = load("tiny.json");
  Transformer model(c, ModelWeights::random(c, 3));
  std::mt19937 rng(4);
  const int64_t T = 23, D = c.hidden_size, E = c.num_experts, k = c.num_experts_per_token, l = 1;
  ASSERT_TRUE(c.is_moe_layer(l));
  Tensor x = randn(rng, {T, D});
  ag::NoGradGuard ng;
  RoutingStats stats;
  const Tensor grouped = model.moe_ffn(l, Var(x, false), &stats).value();
  int64_t copies = 0;
  for (int64_t n : stats.load) copies += n;
  EXPECT_EQ(copies, T * k);
  const std::string m = "model.layers.1.block_sparse_moe.";
  const float* bias = model.p(m + "gate.e_score_correction_bias").value().data<float>();
  for (int64_t t = 0; t < T; ++t) {
    Var xt(x.slice(0, t, t + 1).contiguous(), false);
    Var s = ag::sigmoid(ag::linear(xt, model.p(m + "gate.weight")));
    std::vector<std::pair<float, int>> order;
    for (int e = 0; e < E; ++e) order.push_back({-(s.value().data<float>()[e] + bias[e]), e});
    std::sort(order.begin(), order.end());
    double denom = 0;
    for (int j = 0; j < k; ++j) denom += s.value().data<float>()[order[size_t(j)].second];
    Var z = ag::linear(xt, model.p(m + "routed_expert_down_proj.weight"));
    Var u;
    for (int j = 0; j < k; ++j) {
      const int e = order[size_t(j)].second;
      const std::string ex = m + "experts." + std::to_string(e) + ".";
      Var y = ag::linear(ag::situ_glu(ag::linear(z, model.p(ex + "w1.weight")),
                                      ag::linear(z, model.p(ex + "w3.weight")), SituParams{4.0f, 25.0f}),
                         model.p(ex + "w2.weight"));
      Var term = ag::scale(y, float(c.routed_scaling_factor * s.value().data<float>()[e] / denom));
      u = u.defined() ? ag::add(u, term) : term;
    }
    Var y = ag::linear(ag::rmsnorm(u, model.p(m + "routed_expert_norm.weight"), float(c.rms_norm_eps)),
                       model.p(m + "routed_expert_up_proj.weight"));
    const std::string sh = m + "shared_experts.";
    y = ag::add(y, ag::linear(ag::situ_glu(ag::linear(xt, model.p(sh + "gate_proj.weight")),
                                           ag::linear(xt, model.p(sh + "up_proj.weight")), SituParams{4.0f, 25.0f}),
                              model.p(sh + "down_proj.weight")));
    // f32, different summation order over k experts: 1e-5 of O(0.1) outputs.
    EXPECT_LE(max_abs_diff(y.value(), grouped.slice(0, t, t + 1).contiguous()), 2e-5) << "token " << t;
  }
}

// A capacity limit (docs/design.md §1.6): no expert above ceil(cf m k / n), overflow rerouted or dropped (counted), and
// the layer still trains (gradients reach the router through the served copies).
TEST(Moe, CapacityLimitCapsLoadsAndCountsDrops) {
  ModelConfig c = load("tiny.json");
  c.capacity_factor_start = 1.0;
  c.capacity_factor_end = 1.0;
  Transformer model(c, ModelWeights::random(c, 9));
  std::mt19937 rng(10);
  const int64_t T = 64, k = c.num_experts_per_token, E = c.num_experts;
  // A skewed input: every token shares a large common direction, so the router prefers the same experts.
  Tensor x = randn(rng, {T, c.hidden_size}, 0.2f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < 8; ++d) x.data<float>()[t * c.hidden_size + d] += 3.0f;
  Tensor gw = model.p("model.layers.1.block_sparse_moe.gate.weight").value();
  gw.copy_from(randn(rng, {E, c.hidden_size}, 0.5f));
  RoutingStats st;
  Var xv(x, true);
  Var y = model.moe_ffn(1, xv, &st);
  const int64_t cap = (T * k + E - 1) / E;  // cf = 1
  int64_t served = 0;
  for (int64_t n : st.load) {
    EXPECT_LE(n, cap);
    served += n;
  }
  EXPECT_EQ(served + st.dropped, T * k);
  EXPECT_GT(st.rerouted + st.dropped, 0) << "the skewed batch should overflow some expert";
  model.weights().zero_grad();
  ag::backward(ag::sum(ag::mul(y, y)));
  EXPECT_TRUE(model.p("model.layers.1.block_sparse_moe.gate.weight").has_grad());
  EXPECT_TRUE(xv.has_grad());
}

TEST(Kda, DecayStaysInsideItsBounds) {
  std::mt19937 rng(5);
  const float lb = -5.0f;
  Var f(randn(rng, {7, 2, 3}, 30.0f), false), A(randn(rng, {2}), false), dt(randn(rng, {6}), false);
  Tensor g = ag::kda_gate(f, A, dt, lb).value();
  for (float v : g.to_vector()) {
    // alpha = e^g in [e^lb, 1]: strictly inside in exact arithmetic; f32's sigmoid may saturate to the ends.
    EXPECT_GE(v, lb);
    EXPECT_LE(v, 0.0f);
  }
}

// "skip" = "none" plus the held mixer output of each block's first layer, added after the block's last layer.
TEST(Transformer, SkipModeAddsTheHeldMixerOutputAfterEachBlock) {
  ModelConfig c = load("tiny.json");
  c.attn_res_mode = AttnResMode::kNone;
  Transformer none(c, ModelWeights::random(c, 8));
  c.attn_res_mode = AttnResMode::kSkip;
  c.attn_res_block_size = 2;
  Transformer skip(c, ModelWeights::random(c, 8));
  ag::NoGradGuard ng;
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {8});
  // By hand, from the "none" model's modules: r = h + mixer(norm(h)), h' = r + ffn(norm(r)) (+ the mixer output of
  // layer l-1 when l is odd).
  const float eps = float(c.rms_norm_eps);
  LocalSequenceContext whole;
  Var h = ag::embedding(none.p("model.embed_tokens.weight"), tokens);
  Var held;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const Var n = ag::rmsnorm(h, none.p(pre + "input_layernorm.weight"), eps);
    const Var m =
        c.mixer(l) == Mixer::kKda ? none.kda_mixer(l, n, ForwardOptions{}, whole) : none.mla_mixer(l, n, whole);
    const Var r = ag::add(h, m);
    const Var f = ag::rmsnorm(r, none.p(pre + "post_attention_layernorm.weight"), eps);
    h = ag::add(r, c.is_moe_layer(l) ? none.moe_ffn(l, f, nullptr) : none.dense_ffn(l, f));
    if (l % 2 == 0) held = m;
    if (l % 2 == 1) h = ag::add(h, held);
  }
  const Tensor want = ag::rmsnorm(h, none.p("model.norm.weight"), float(c.rms_norm_eps)).value();
  const Tensor got = skip.forward(tokens, Tensor()).hidden.value();
  EXPECT_LE(max_abs_diff(got, want), 1e-6);  // the same operations in the same order
  const Tensor plain = none.forward(tokens, Tensor()).hidden.value();
  EXPECT_GT(max_abs_diff(got, plain), 1e-3);  // and the skip really changes the result
}

TEST(Transformer, BadInputGivesClearErrors) {
  const ModelConfig c = load("tiny.json");
  Transformer model(c, ModelWeights::random(c, 6));
  ag::NoGradGuard ng;
  try {
    model.forward(Tensor::from_vector(std::vector<int64_t>{1, c.vocab_size, 2}, {3}), Tensor());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(c.vocab_size)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
  std::vector<int64_t> longer(static_cast<size_t>(c.max_position_embeddings + 1), 1);
  EXPECT_THROW(model.forward(Tensor::from_vector(longer, {int64_t(longer.size())}), Tensor()), Error);
}

// The 896-expert config takes optimizer steps: forward, backward, AdamW, and the loss on the batch falls.
TEST(Transformer, ManyExpertsConfigSteps) {
  const ModelConfig c = load("many-experts.json");
  ASSERT_EQ(c.num_experts, 896);
  Transformer model(c, ModelWeights::random(c, 7));
  std::vector<int64_t> ids(64), tg(64);
  for (int64_t t = 0; t < 64; ++t) ids[size_t(t)] = (t * 37 + 11) % c.vocab_size;
  for (int64_t t = 0; t < 64; ++t) tg[size_t(t)] = t + 1 < 64 ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {64}), targets = Tensor::from_vector(tg, {64});
  std::map<std::string, std::pair<Tensor, Tensor>> state;
  float first = 0, last = 0;
  for (int step = 1; step <= 4; ++step) {
    model.weights().zero_grad();
    ForwardResult r = model.forward(tokens, targets);
    const float loss = r.loss.value().data<float>()[0];
    ASSERT_TRUE(std::isfinite(loss));
    if (step == 1) first = loss;
    last = loss;
    ag::backward(r.loss);
    for (const auto& [name, v] : model.weights().all()) {
      if (!v.requires_grad() || !v.has_grad()) continue;
      auto& [m, s] = state[name];
      if (!m.defined()) {
        m = Tensor::zeros(v.shape());
        s = Tensor::zeros(v.shape());
      }
      ops::adamw_update(Device::kCPU, v.value().data<float>(), v.grad().data<float>(), m.data<float>(), s.data<float>(),
                        v.value().numel(), AdamWParams{3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, step});
    }
  }
  EXPECT_LT(last, first) << "the loss on a repeated batch should fall within 4 AdamW steps";
}

// balancing "aux_loss" acts through the loss: the forward returns every MoE layer's Switch-style balance loss
// (coef E sum_e f_e P_e, recomputed here in double from the routing statistics), and it reaches the router.
// Without it (the defect this guards against) a user who picked aux_loss trained with no balancing at all.
TEST(Transformer, AuxLossBalancingReturnsTheBalanceLossOnTheTape) {
  ModelConfig c = load("tiny.json");
  c.balancing = Balancing::kAuxLoss;
  c.aux_loss_coef = 0.25;
  Transformer model(c, ModelWeights::random(c, 5));
  std::vector<int64_t> ids(40), tg(40);
  for (int64_t t = 0; t < 40; ++t) ids[size_t(t)] = (t * 53 + 7) % c.vocab_size;
  for (int64_t t = 0; t < 40; ++t) tg[size_t(t)] = t + 1 < 40 ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {40}), targets = Tensor::from_vector(tg, {40});
  model.weights().zero_grad();
  ForwardResult r = model.forward(tokens, targets);
  ASSERT_TRUE(r.aux_loss.defined()) << "balancing aux_loss gave no balance loss";
  ASSERT_FALSE(r.routing.empty());
  const int64_t E = c.num_experts, k = c.num_experts_per_token;
  double want = 0;
  for (const RoutingStats& st : r.routing) {
    const int64_t T = st.scores.size(0);
    const float* s = st.scores.data<float>();
    for (int64_t e = 0; e < E; ++e) {
      double p = 0;
      for (int64_t t = 0; t < T; ++t) {
        double S = 0;
        for (int64_t j = 0; j < E; ++j) S += s[t * E + j];
        p += s[t * E + e] / S / double(T);
      }
      want += c.aux_loss_coef * double(E) * (double(st.load[size_t(e)]) / double(T * k)) * p;
    }
  }
  // f32 sums of 40 x 8 terms per layer: a few ulps of a value near coef (0.25).
  EXPECT_NEAR(r.aux_loss.value().data<float>()[0], want, 1e-5 * want);
  // The balance loss alone moves every MoE layer's router.
  ag::backward(r.aux_loss);
  for (const RoutingStats& st : r.routing) {
    const Var& gate = model.weights().at("model.layers." + std::to_string(st.layer) + ".block_sparse_moe.gate.weight");
    ASSERT_TRUE(gate.has_grad()) << "layer " << st.layer;
    double n = 0;
    for (float g : gate.grad().to_vector()) n += std::abs(g);
    EXPECT_GT(n, 0.0) << "layer " << st.layer;
  }
  // Other balancers have no balance loss; with checkpointing the loss would get no gradient: refused.
  ModelConfig q = c;
  q.balancing = Balancing::kQuantile;
  EXPECT_FALSE(Transformer(q, ModelWeights::random(q, 5)).forward(tokens, targets).aux_loss.defined());
  ForwardOptions ck;
  ck.checkpoint_layers = true;
  EXPECT_THROW(model.forward(tokens, targets, ck), Error);
}

// Upstream renormalises the mixture weights only with more than one expert per token: with top-1 routing,
// moe_renormalize must change nothing (renormalising would make every weight routed_scaling_factor, whatever
// the router's score).
TEST(Moe, TopOneRoutingIgnoresRenormalize) {
  ModelConfig c = load("tiny.json");
  c.num_experts_per_token = 1;
  c.routed_scaling_factor = 2.0;
  c.moe_renormalize = true;
  const ModelWeights w = ModelWeights::random(c, 21);
  ModelConfig plain = c;
  plain.moe_renormalize = false;
  std::mt19937 rng(5);
  const Var x(randn(rng, {24, c.hidden_size}), false);
  ag::NoGradGuard ng;
  const Tensor a = Transformer(c, w).moe_ffn(1, x, nullptr).value();
  const Tensor b = Transformer(plain, w).moe_ffn(1, x, nullptr).value();
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

// use_full_rank_gate false: the low-rank KDA output gate g_b(g_a(x)) runs in training and in inference (which
// agree), and it is a different gate from the full-rank one (the model reads g_a_proj, g_b_proj, not g_proj).
TEST(Kda, LowRankOutputGateRunsInTrainingAndInference) {
  ModelConfig c = load("tiny.json");
  c.linear_attn_config->use_full_rank_gate = false;
  const Transformer model(c, ModelWeights::random(c, 22));
  ASSERT_FALSE(model.weights().contains("model.layers.0.self_attn.g_proj.weight"));
  std::vector<int64_t> ids(30);
  for (int64_t t = 0; t < 30; ++t) ids[size_t(t)] = (t * 31 + 5) % c.vocab_size;
  ag::NoGradGuard ng;
  const Tensor logits = model.logits(model.forward(Tensor::from_vector(ids, {30}), Tensor()).hidden);
  InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  SequenceState st = inf.new_sequence();
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  const BatchEntry e{&st, ids32};
  const Tensor got = inf.forward(std::span<const BatchEntry>(&e, 1), true);
  // f32 through 4 layers, chunkwise KDA on both sides, naive against absorbed MLA: ~1e-6 of O(1) logits.
  EXPECT_LE(max_abs_diff(got, logits), 1e-4);
}

// No gate_lower_bound: Kimi-Linear's unbounded gate g = -exp(A_log) softplus(.) in training, in prefill and in
// token-by-token decode (which agree), with A_log raised to 6 so that tokens decay by up to ~40 each, far more than the
// bounded gate's 5 (the chunkwise kernel's pair-by-pair blocks run); it is a different gate from the bounded one.
TEST(Kda, UnboundedSoftplusGateRunsInTrainingPrefillAndDecode) {
  ModelConfig c = load("tiny.json");
  c.linear_attn_config->gate_lower_bound = -std::numeric_limits<double>::infinity();
  ModelWeights w = ModelWeights::random(c, 23);
  for (const auto& [name, t] : w.all())
    if (name.ends_with("A_log")) Tensor(t.value()).fill(6.0f);  // shared storage; exp(6) ~ 400: strong decay
  const Transformer model(c, w);
  ModelConfig bounded = c;
  bounded.linear_attn_config->gate_lower_bound = -5.0;
  const int64_t T = 40;
  std::vector<int64_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 37 + 11) % c.vocab_size;
  const Tensor logits = expect_inference_matches_training(c, model, ids, 1e-4);
  ag::NoGradGuard ng;
  const Transformer other(bounded, w);
  EXPECT_GT(max_abs_diff(other.logits(other.forward(Tensor::from_vector(ids, {T}), Tensor()).hidden), logits), 1e-2);
}

// The AttnRes reads are written once (model/layer_module.h attn_res_read) and run on the tape in training and on the
// kernels in inference. Initialised, every read's query is zero (a uniform softmax, where any weighting of the
// candidates looks alike), so here every read gets a random norm and query: prefill and token-by-token decode must
// still give the training forward's logits, and the reads must matter (the logits move far from the zero-query
// model's).
TEST(AttnRes, NonZeroQueriesGiveTheSameLogitsInTrainingPrefillAndDecode) {
  const ModelConfig c = load("tiny.json");
  ASSERT_EQ(c.attn_res_mode, AttnResMode::kBlock);
  const ModelWeights plain = ModelWeights::random(c, 24);
  ModelWeights w = ModelWeights::random(c, 24);
  std::mt19937 rng(25);
  int reads = 0;
  for (const auto& [name, t] : w.all()) {
    Tensor v(t.value());  // shared storage
    if (name.ends_with("res_proj.weight")) {
      v.copy_from(randn(rng, v.shape(), 2.0f));
      ++reads;
    } else if (name.ends_with("res_norm.weight")) {
      const Tensor r = randn(rng, v.shape(), 0.3f);
      for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] += 1.0f;
      v.copy_from(r);
    }
  }
  ASSERT_EQ(reads, 2 * c.num_hidden_layers + 1) << "q_pre and q_post per layer, and the output read";
  const Transformer model(c, w), zero(c, plain);
  const int64_t T = 40;
  std::vector<int64_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 29 + 3) % c.vocab_size;
  const Tensor logits = expect_inference_matches_training(c, model, ids, 1e-4);
  ag::NoGradGuard ng;
  EXPECT_GT(max_abs_diff(zero.logits(zero.forward(Tensor::from_vector(ids, {T}), Tensor()).hidden), logits), 1e-2);
}

// Block-sparse MLA (model/sparse_mla.h) through the whole model: the training forward (the sparse_attention op over
// the blocks chosen from the tape's values) and the inference model (the blocks chosen from the cache's block
// means, in prefill and decode) give the same logits; and the sparsity is real (dense logits differ). The MLA
// weights are scaled up so that its attention is peaked enough for the choice of blocks to matter.
TEST(Transformer, SparseMlaGivesTheSameLogitsInTrainingPrefillAndDecode) {
  ModelConfig c = load("tiny.json");
  c.mla_sparse_attention = SparseMlaConfig{4, 2, 8};
  ModelWeights w = ModelWeights::random(c, 31);
  for (const auto& [name, t] : w.all())
    if (name.find("self_attn.") != std::string::npos &&
        (name.find("q_b_proj") != std::string::npos || name.find("kv_b_proj") != std::string::npos ||
         name.find("o_proj") != std::string::npos)) {
      Tensor v(t.value());  // shared storage
      for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] *= 12.0f;
    }
  const Transformer model(c, w);
  const int64_t T = 72;  // 18 blocks of 4: up to 15 candidates, 2 chosen
  std::vector<int64_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 41 + 7) % c.vocab_size;
  const Tensor logits = expect_inference_matches_training(c, model, ids, 1e-4);
  ModelConfig dense = c;
  dense.mla_sparse_attention.reset();
  ag::NoGradGuard ng;
  const Transformer dense_model(dense, w);
  const double d =
      max_abs_diff(dense_model.logits(dense_model.forward(Tensor::from_vector(ids, {T}), Tensor()).hidden), logits);
  EXPECT_GT(d, 1e-2) << "the sparse model must differ from the dense one";
}

// Gradient checkpointing recomputes each layer in the backward: the same loss, routing statistics once per MoE
// layer (from the first pass), and the same gradients. The recomputed layer runs the same operations on the same
// values, but its gradients reach the layer's inputs in another order relative to the rest of the tape: f32
// reassociation, ~1e-6 relative, up to ~1e-5 for KDA's A_log, whose gradient sums T x K terms of both signs
// (cancellation). Bound 1e-4 per weight (relative L2); a layer missing from the recomputation would leave its
// weights with no gradient at all, a wrong one with O(1) errors.
TEST(Transformer, GradientCheckpointingGivesTheSameLossStatisticsAndGradients) {
  const ModelConfig c = load("tiny.json");
  Transformer model(c, ModelWeights::random(c, 12));
  std::vector<int64_t> ids(48), tg(48);
  for (int64_t t = 0; t < 48; ++t) ids[size_t(t)] = (t * 29 + 3) % c.vocab_size;
  for (int64_t t = 0; t < 48; ++t) tg[size_t(t)] = t + 1 < 48 ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {48}), targets = Tensor::from_vector(tg, {48});
  auto run = [&](bool checkpoint, std::map<std::string, std::vector<float>>& grads, size_t& routing) {
    model.weights().zero_grad();
    ForwardOptions o;
    o.checkpoint_layers = checkpoint;
    ForwardResult r = model.forward(tokens, targets, o);
    routing = r.routing.size();
    ag::backward(r.loss);
    for (const auto& [name, w] : model.weights().all())
      if (w.has_grad()) grads[name] = w.grad().to_vector();
    return r.loss.value().data<float>()[0];
  };
  std::map<std::string, std::vector<float>> plain, ck;
  size_t plain_routing = 0, ck_routing = 0;
  const float plain_loss = run(false, plain, plain_routing), ck_loss = run(true, ck, ck_routing);
  EXPECT_EQ(ck_loss, plain_loss);
  EXPECT_EQ(ck_routing, plain_routing);
  ASSERT_EQ(ck.size(), plain.size());
  for (const auto& [name, g] : plain) {
    ASSERT_TRUE(ck.count(name)) << name;
    EXPECT_LE(relative_l2(g, ck[name]), 1e-4) << name;
  }
}

// The two sequence forms of KDA (ops::kda_sequence_form: chunkwise, the default, and recurrent) run through the
// whole model give the same loss and the same gradient for every weight: the form is a speed choice, never a
// change of the model. Chunks of 16 over 80 tokens so that the chunkwise form crosses chunk boundaries with a
// partial last chunk. Tolerance: the forms sum the delta rule's terms in different orders (the WY form's
// triangular solve against per-token updates): f32 reassociation, ~1e-6 relative per op, compounded over the
// layers and the backward; 2e-4 relative L2 per weight. A wrong backward in either form gives O(1) errors.
TEST(Kda, ChunkwiseAndRecurrentFormsGiveTheSameLossAndGradients) {
  const ModelConfig c = load("tiny.json");
  Transformer model(c, ModelWeights::random(c, 21));
  const int64_t T = 80;
  std::vector<int64_t> ids(T), tg(T);
  for (int64_t t = 0; t < T; ++t) ids[size_t(t)] = (t * 31 + 7) % c.vocab_size;
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t + 1 < T ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {T}), targets = Tensor::from_vector(tg, {T});
  const ops::KdaForm before = ops::kda_sequence_form(Device::kCPU);
  auto run = [&](ops::KdaForm form, std::map<std::string, std::vector<float>>& grads) {
    ops::set_kda_sequence_form(form);
    model.weights().zero_grad();
    ForwardOptions o;
    o.kda_chunk = 16;
    ForwardResult r = model.forward(tokens, targets, o);
    ag::backward(r.loss);
    for (const auto& [name, w] : model.weights().all())
      if (w.has_grad()) grads[name] = w.grad().to_vector();
    return r.loss.value().data<float>()[0];
  };
  std::map<std::string, std::vector<float>> chunk, rec;
  const float chunk_loss = run(ops::KdaForm::kChunk, chunk), rec_loss = run(ops::KdaForm::kRecurrent, rec);
  ops::set_kda_sequence_form(before);
  EXPECT_NEAR(rec_loss, chunk_loss, 1e-5 * std::abs(chunk_loss));
  ASSERT_EQ(rec.size(), chunk.size());
  int kda_weights = 0;
  for (const auto& [name, g] : chunk) {
    ASSERT_TRUE(rec.count(name)) << name;
    kda_weights += name.find("A_log") != std::string::npos;
    EXPECT_LE(relative_l2(g, rec[name]), 2e-4) << name;
  }
  EXPECT_GT(kda_weights, 0) << "tiny.json must have KDA layers for this test to mean anything";
}

// Routing replay (model/ffn_module.h RoutingTap): imposing experts {a, b} on every token equals a forward whose
// correction bias selects exactly them (noaux_tc: the bias selects, it never weighs), in the loss and in every
// gradient, the router's included (the mixture weights come from this forward's own scores of the imposed
// experts). The two differ only in summation order (the copies' order in a row): f32 rounding, hence 1e-5.
// Replaying only the first rows leaves the others routed as usual; bad replays are refused.
TEST(RoutingReplay, ImposedExpertsEqualABiasThatSelectsThem) {
  const ModelConfig c = load("tiny.json");
  ASSERT_EQ(c.num_experts_per_token, 2);
  const int64_t T = 48, E = c.num_experts;
  std::mt19937 rng(11);
  std::vector<int64_t> ids(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  for (auto& v : ids) v = int64_t(rng() % uint32_t(c.vocab_size));
  for (int64_t t = 0; t < T; ++t) tg[size_t(t)] = t + 1 < T ? ids[size_t(t + 1)] : -100;
  const Tensor tokens = Tensor::from_vector(ids, {T}), targets = Tensor::from_vector(tg, {T});
  auto chosen = [&](int64_t l) { return std::pair<int32_t, int32_t>(int32_t(l % E), int32_t((l + 3) % E)); };
  std::vector<Tensor> replay(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    std::vector<int32_t> rows;
    for (int64_t t = 0; t < T; ++t) rows.insert(rows.end(), {chosen(l).first, chosen(l).second});
    replay[size_t(l)] = Tensor::from_vector(rows, {T, 2});
  }
  Transformer replayed(c, ModelWeights::random(c, 5)), biased(c, ModelWeights::random(c, 5));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    float* b = biased.weights()
                   .at("model.layers." + std::to_string(l) + ".block_sparse_moe.gate.e_score_correction_bias")
                   .value()
                   .data<float>();
    for (int64_t e = 0; e < E; ++e) b[e] = (e == chosen(l).first || e == chosen(l).second) ? 1000.0f : 0.0f;
  }
  ForwardOptions fo;
  fo.routing_replay = &replay;
  replayed.weights().zero_grad();
  const ForwardResult a = replayed.forward(tokens, targets, fo);
  ag::backward(a.loss);
  biased.weights().zero_grad();
  const ForwardResult b = biased.forward(tokens, targets);
  ag::backward(b.loss);
  EXPECT_NEAR(a.loss.value().data<float>()[0], b.loss.value().data<float>()[0], 1e-5);
  int checked = 0;
  for (const auto& [name, v] : replayed.weights().all()) {
    if (!v.has_grad()) continue;
    const Tensor& ga = v.grad();
    const Tensor& gb = biased.weights().at(name).grad();
    ASSERT_EQ(ga.numel(), gb.numel()) << name;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < ga.numel(); ++i) {
      diff = std::max(diff, double(std::fabs(ga.data<float>()[i] - gb.data<float>()[i])));
      scale = std::max(scale, double(std::fabs(gb.data<float>()[i])));
    }
    EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << name;
    checked += name.find("gate.weight") != std::string::npos && scale > 0;
  }
  EXPECT_GT(checked, 0) << "the router's gradient must flow under replay";

  // Without replay the routing differs (the random router picks other experts), so the replay did something.
  Transformer plain(c, ModelWeights::random(c, 5));
  EXPECT_GT(std::fabs(plain.forward(tokens, targets).loss.value().data<float>()[0] - a.loss.value().data<float>()[0]),
            1e-4);

  // The inference model records what it selects (SequenceState::routing, k experts per token of each MoE layer).
  // Replaying the first 10 rows of that record in the training forward is the plain training forward, bit for bit
  // (the same experts, the same arithmetic; the later rows route themselves).
  InferenceModel inference(c, DecodeWeights::from_model(plain.weights()));
  SequenceState st = inference.new_sequence(64, DType::kF32);
  st.record_routing = true;
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  const BatchEntry entry{&st, ids32};
  inference.forward(std::span<const BatchEntry>(&entry, 1));
  std::vector<Tensor> first(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) {
      EXPECT_TRUE(size_t(l) >= st.routing.size() || st.routing[size_t(l)].empty()) << l;
      continue;
    }
    ASSERT_EQ(st.routing[size_t(l)].size(), size_t(T * 2)) << l;
    first[size_t(l)] = Tensor::from_vector(
        std::vector<int32_t>(st.routing[size_t(l)].begin(), st.routing[size_t(l)].begin() + 20), {10, 2});
  }
  ForwardOptions ff;
  ff.routing_replay = &first;
  EXPECT_EQ(plain.forward(tokens, targets, ff).loss.value().data<float>()[0],
            plain.forward(tokens, targets).loss.value().data<float>()[0]);

  // Refused: an expert outside [-1, E), the same expert twice in a row, more rows than tokens, a wrong width.
  auto refused = [&](Tensor bad) {
    std::vector<Tensor> r = replay;
    for (auto& t : r)
      if (t.defined()) t = bad;
    ForwardOptions f;
    f.routing_replay = &r;
    EXPECT_THROW(replayed.forward(tokens, targets, f), Error);
  };
  refused(Tensor::from_vector(std::vector<int32_t>{0, int32_t(E)}, {1, 2}));
  refused(Tensor::from_vector(std::vector<int32_t>{3, 3}, {1, 2}));
  refused(Tensor::from_vector(std::vector<int32_t>(size_t(2 * (T + 1)), 0), {T + 1, 2}));
  refused(Tensor::from_vector(std::vector<int32_t>{0, 1, 2}, {1, 3}));
}

}  // namespace
}  // namespace myriad
