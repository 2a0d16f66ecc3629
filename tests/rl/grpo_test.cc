// GRPO (src/rl): the policy loss's gradients against central finite differences of its own objective (the
// clipped surrogate, with and without the k1/k3 KL term), rollouts through the engine (the engine's sampling
// log-probabilities against the training forward's recomputation, the policy mask, determinism in the seed),
// and the config's errors.
#include "rl/grpo.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "agent/agent_tasks.h"
#include "core/error.h"
#include "infer/decode_weights.h"
#include "model/config.h"
#include "rl/grpo_loss.h"
#include "rl/rollout.h"

namespace myriad {
namespace {

struct RlFixture {
  Tokenizer tok;
  ModelConfig config;
};

const RlFixture& setup() {
  static const RlFixture* s = [] {
    auto* t = new RlFixture;
    std::vector<std::string> texts;
    for (const AgentTask& task : agent_tasks(1, 60, AgentSplit::kTrain))
      texts.push_back(render_chat(demonstration(task), agent_tool_specs(), false));
    t->tok = Tokenizer::train_from_texts(texts, 400);
    t->config = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
    t->config.vocab_size = t->tok.vocab_size();
    return t;
  }();
  return *s;
}

// A trajectory: a task's reference solution, its old log-probabilities the model's own plus `shift(t)`.
Trajectory reference_trajectory(const Transformer& model, uint64_t seed, const std::function<double(size_t)>& shift) {
  const RlFixture& s = setup();
  const AgentTask task = make_agent_task(AgentFamily::kTotal, seed, AgentSplit::kTrain);
  const ChatTokens ct = encode_chat(s.tok, demonstration(task), agent_tool_specs(), false);
  Trajectory t;
  t.tokens = ct.ids;
  t.policy = ct.assistant;
  t.old_logprobs.assign(t.tokens.size(), 0.0f);
  // The model's log-probabilities through the objective itself: with A = 1, agg = 1 and no clipping reachable
  // (clip bounds huge) the objective of a one-token policy mask is exp(logp - old) with old = 0.
  PolicyLossOptions wide;
  wide.clip_low = 0.999999;
  wide.clip_high = 1e9;
  for (size_t i = 1; i < t.tokens.size(); ++i) {
    if (!t.policy[i]) continue;
    Trajectory one = t;
    std::fill(one.policy.begin(), one.policy.end(), 0);
    one.policy[i] = 1;
    const double p = policy_objective(model, one, 1.0, 1.0, wide);
    t.old_logprobs[i] = float(std::log(p) + shift(i));
  }
  return t;
}

// Central differences along a random direction over every weight, against the gradient's dot product.
void check_gradient(const Transformer& model_c, const Trajectory& tr, double A, const PolicyLossOptions& o,
                    const Transformer* reference) {
  Transformer& model = const_cast<Transformer&>(model_c);
  const double agg = 1.0 / double(predicted_policy_tokens(tr));
  model.weights().zero_grad();
  policy_loss_backward(model, tr, A, agg, o, reference, nullptr);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::pair<Tensor, Tensor>> dirs;  // (value, direction)
  double analytic = 0;                          // d(-L)/dh along the direction = -(grad . d)
  for (const auto& [name, v] : model.weights().all()) {
    if (!v.has_grad()) continue;
    // Each tensor moved relative to its own scale (embeddings are ~0.02, norms ~1): a step of 1e-3 of it.
    double ss = 0;
    for (int64_t i = 0; i < v.value().numel(); ++i)
      ss += double(v.value().data<float>()[i]) * v.value().data<float>()[i];
    const float rms = float(std::sqrt(ss / double(std::max<int64_t>(1, v.value().numel())))) + 1e-3f;
    Tensor d = Tensor::empty(v.value().shape());
    for (int64_t i = 0; i < d.numel(); ++i) d.data<float>()[i] = nd(rng) * rms;
    const float* g = v.grad().data<float>();
    for (int64_t i = 0; i < d.numel(); ++i) analytic -= double(g[i]) * double(d.data<float>()[i]);
    dirs.emplace_back(v.value(), d);
  }
  auto move = [&](float h) {
    for (auto& [val, d] : dirs)
      for (int64_t i = 0; i < val.numel(); ++i) val.data<float>()[i] += h * d.data<float>()[i];
  };
  const float h = 1e-3f;
  move(h);
  const double up = policy_objective(model, tr, A, agg, o, reference);
  move(-2 * h);
  const double down = policy_objective(model, tr, A, agg, o, reference);
  move(h);
  const double numeric = (up - down) / (2.0 * double(h));
  // f32 forwards: the objective is an average of O(1) terms known to ~1e-6 relative, the step moves it by
  // ~1e-3 x |numeric|, so central differences are good to a few percent of |numeric| (and the h^2 term is
  // smaller still); a wrong sign, a missing ratio factor or gradient through clipped tokens is off by far more.
  EXPECT_NEAR(analytic, numeric, 0.03 * std::fabs(numeric) + 1e-6) << "analytic " << analytic << " numeric " << numeric;
  EXPECT_GT(std::fabs(numeric), 1e-4) << "the check must see a gradient";
}

TEST(GrpoLoss, GradientMatchesFiniteDifferences) {
  // Dense layers only: top-k expert selection is a discrete choice, and a perturbation that flips one token's
  // experts makes a step in the objective that finite differences read as a slope. (With the MoE layers on, this
  // check is ~5% off through the layers below them and the router's analytic gradient is ~0 against a numeric
  // 3e-3: flips or a router-gradient defect, noted on issue 15 for a closer look.)
  const RlFixture& s = setup();
  ModelConfig dense = s.config;
  dense.first_k_dense_replace = dense.num_hidden_layers;
  Transformer model(dense, ModelWeights::random(dense, 21));
  // Old log-probs a little off (ratios 0.97 .. 1.03, unclipped) ...
  const Trajectory near = reference_trajectory(model, 4, [](size_t i) { return 0.03 * std::sin(double(i)); });
  PolicyLossOptions o;
  check_gradient(model, near, 0.8, o, nullptr);
  check_gradient(model, near, -1.3, o, nullptr);
  // ... and some far off, so that the clipped tokens (no gradient) mix with unclipped ones.
  const Trajectory far = reference_trajectory(model, 4, [](size_t i) { return i % 3 == 0 ? -0.6 : 0.01; });
  check_gradient(model, far, 0.8, o, nullptr);  // A > 0: ratio e^0.6 > 1.28 clipped
  check_gradient(model, reference_trajectory(model, 4, [](size_t i) { return i % 3 == 0 ? 0.6 : -0.01; }), -0.8, o,
                 nullptr);  // A < 0: ratio e^-0.6 < 0.8 clipped
  // The KL term to a reference, both estimators.
  Transformer reference(dense, ModelWeights::random(dense, 22));
  for (const char* est : {"k1", "k3"}) {
    PolicyLossOptions k = o;
    k.kl_coef = 0.5;
    k.kl_estimator = est;
    check_gradient(model, near, 0.8, k, &reference);
  }
}

// The rollouts of a random tiny model, dense (every layer's FFN dense) or with its MoE layers. Dense: every policy
// token's engine log-probability equals the training forward's to 1e-3 (decode with recurrent KDA and the latent
// cache against the chunked training forward, f32). MoE: a token whose router scores nearly tie can take other
// experts in the two forwards (rounding flips the top-k), which moves its log-probability by up to ~0.2 here:
// what routing replay removes: with it (the rollout records each token's experts, the training forward imposes
// them) every token agrees to 1e-3 as in the dense model.
void check_rollouts(bool moe, bool replay = false) {
  const RlFixture& s = setup();
  ModelConfig config = s.config;
  if (!moe) config.first_k_dense_replace = config.num_hidden_layers;
  Transformer model(config, ModelWeights::random(config, 23));
  auto inference = std::make_shared<const InferenceModel>(config, DecodeWeights::from_model(model.weights()), s.tok);
  const std::vector<AgentTask> tasks = agent_tasks(5, 2, AgentSplit::kTrain);
  EpisodeLimits lim;
  lim.max_reply_tokens = 24;
  lim.max_tokens = 60;
  SamplingParams sp;  // temperature 1, no truncation: the engine's logprob is the policy's
  RolloutStats st;
  const std::vector<Trajectory> a = rollout_groups(inference, s.tok, tasks, 3, sp, 9, lim, {}, &st, 0, replay);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_GT(st.generated_tokens, 0);
  const PolicyLossOptions wide{0.999999, 1e9, 0.0, "k3", 64, replay};
  for (const Trajectory& t : a) {
    if (!replay) {
      EXPECT_TRUE(t.routing.empty());
      continue;
    }
    // Every MoE layer: k experts for each token but the last (never fed back); none on the dense layer.
    ASSERT_EQ(t.routing.size(), size_t(config.num_hidden_layers));
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const Tensor& r = t.routing[size_t(l)];
      ASSERT_EQ(r.defined(), config.is_moe_layer(l)) << "layer " << l;
      if (r.defined()) {
        EXPECT_EQ(r.shape(), (std::vector<int64_t>{int64_t(t.tokens.size()) - 1, config.num_experts_per_token}))
            << "layer " << l;
      }
    }
  }
  int agree = 0, total = 0;
  for (const Trajectory& t : a) {
    EXPECT_EQ(t.group, int(&t - a.data()) / 3);
    ASSERT_EQ(t.tokens.size(), t.policy.size());
    ASSERT_EQ(t.tokens.size(), t.old_logprobs.size());
    // The prompt is not the policy's; every policy token has a log-probability (< 0), every other 0.
    const size_t prompt =
        encode_chat(s.tok, agent_task_messages(tasks[size_t(t.group)]), agent_tool_specs()).ids.size();
    for (size_t i = 0; i < prompt; ++i) EXPECT_EQ(t.policy[i], 0);
    for (size_t i = 0; i < t.tokens.size(); ++i) {
      if (!t.policy[i]) {
        EXPECT_EQ(t.old_logprobs[i], 0.0f);
        continue;
      }
      EXPECT_LT(t.old_logprobs[i], 0.0f);
      Trajectory one = t;
      std::fill(one.policy.begin(), one.policy.end(), 0);
      one.policy[i] = 1;
      // exp(logp_train - logp_engine): 1 when both agree. Decode (recurrent KDA, latent cache) against the chunked
      // training forward, in f32: agreement to 1e-3 in log-probability.
      const double ratio = policy_objective(model, one, 1.0, 1.0, wide);
      if (!moe || replay) {
        EXPECT_NEAR(std::log(ratio), 0.0, 1e-3)
            << "token " << i << " of trajectory " << (&t - a.data()) << " id " << t.tokens[i] << " '"
            << s.tok.piece(t.tokens[i]) << "' prev '" << s.tok.piece(t.tokens[i - 1]) << "' len " << t.tokens.size()
            << " lp " << t.old_logprobs[i];
      }
      agree += std::fabs(std::log(ratio)) < 1e-3;
      ++total;
    }
  }
  EXPECT_GT(total, 20);
  EXPECT_GE(agree, 0.9 * total) << agree << " of " << total << " tokens agree to 1e-3";
  std::printf("[ measured ] %s%s: %d of %d policy tokens agree to 1e-3\n", moe ? "MoE" : "dense",
              replay ? " with routing replay" : "", agree, total);
  const std::vector<Trajectory> b = rollout_groups(inference, s.tok, tasks, 3, sp, 9, lim, {}, nullptr);
  const std::vector<Trajectory> c = rollout_groups(inference, s.tok, tasks, 3, sp, 10, lim, {}, nullptr);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "the same seed must give the same rollout";
    differs = differs || a[i].tokens != c[i].tokens;
  }
  EXPECT_TRUE(differs) << "another seed should sample other tokens";
}

TEST(Rollout, EngineLogprobsMatchTheTrainingForwardDense) {
  check_rollouts(false);
}
TEST(Rollout, EngineLogprobsMostlyMatchTheTrainingForwardWithMoe) {
  check_rollouts(true);
}
TEST(Rollout, RoutingReplayMakesEveryTokenMatchWithMoe) {
  check_rollouts(true, true);
}

TEST(GrpoConfig, ErrorsNameTheField) {
  const std::pair<const char*, const char*> bad[] = {{R"({"group_size": 1})", "group_size"},
                                                     {R"({"clip_low": 1.5})", "clip_low"},
                                                     {R"({"loss_aggregation": "mean"})", "loss_aggregation"},
                                                     {R"({"kl_estimator": "k2"})", "kl_estimator"},
                                                     {R"({"stpes": 3})", "stpes"},
                                                     {R"({"rewards": {"speed": 1}})", "rewards.speed"},
                                                     {R"({"lr": 0})", "lr"},
                                                     {R"({"steps": 2.5})", "steps"}};
  for (const auto& [text, field] : bad) {
    try {
      parse_grpo_config(nlohmann::json::parse(text), "grpo.json");
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
  const GrpoConfig c = parse_grpo_config(nlohmann::json::parse(R"({"group_size": 4, "kl_coef": 0.1})"), "x");
  EXPECT_EQ(parse_grpo_config(grpo_config_to_json(c), "again").group_size, 4);
  EXPECT_EQ(parse_grpo_config(grpo_config_to_json(c), "again").kl_coef, 0.1);
}

}  // namespace
}  // namespace myriad
