// Sampler: every step of sampling.h's order checked against naive references written here (double precision, full
// sorts, per-token loops): penalties on hand-made logits, log-softmax and top alternatives, greedy ties, the
// truncation sets of top_k / top_p / min_p, determinism per seed, empirical frequencies against the renormalised
// softmax, and the validation message of every bad field.
#include "infer/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace myriad {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- naive references ----

// Step 1, token by token: counts found by scanning, the repetition penalty once per distinct token.
std::vector<double> naive_penalised(const std::vector<float>& logits, const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& output, const SamplingParams& p) {
  std::vector<double> x(logits.begin(), logits.end());
  for (size_t t = 0; t < x.size(); ++t) {
    const auto c = std::count(output.begin(), output.end(), int32_t(t));
    const bool in_prompt = std::find(prompt.begin(), prompt.end(), int32_t(t)) != prompt.end();
    if (in_prompt || c > 0) x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
    if (c > 0) x[t] -= double(c) * p.frequency_penalty + p.presence_penalty;
  }
  return x;
}

std::vector<double> naive_log_softmax(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : x) out.push_back(v - m - std::log(s));
  return out;
}

// Ids most likely first: higher value, then lower id (a full stable sort).
std::vector<int32_t> naive_order(const std::vector<double>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
  return ids;
}

int32_t naive_argmax(const std::vector<double>& x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[size_t(best)]) best = int32_t(i);
  return best;
}

// Steps 4-5 written out on a full sort: the survivors and their renormalised probabilities (0 elsewhere).
std::vector<double> naive_truncated_probs(const std::vector<double>& x, const SamplingParams& p) {
  const size_t V = x.size();
  std::vector<double> prob(V);
  const double m = *std::max_element(x.begin(), x.end());
  for (size_t i = 0; i < V; ++i) prob[i] = std::exp((x[i] - m) / p.temperature);
  const std::vector<int32_t> order = naive_order(x);
  size_t n = V;
  if (p.top_k > 0) n = std::min<size_t>(n, size_t(p.top_k));
  double z = 0;
  for (size_t j = 0; j < n; ++j) z += prob[size_t(order[j])];
  if (p.top_p < 1) {
    double acc = 0;
    for (size_t j = 0; j < n; ++j) {
      acc += prob[size_t(order[j])] / z;
      if (acc >= p.top_p) {
        n = j + 1;
        break;
      }
    }
  }
  const double pmax = prob[size_t(order[0])];
  std::vector<double> out(V, 0.0);
  double kept = 0;
  for (size_t j = 0; j < n; ++j) {
    const int32_t t = order[j];
    if (prob[size_t(t)] >= p.min_p * pmax && prob[size_t(t)] > 0) {
      out[size_t(t)] = prob[size_t(t)];
      kept += prob[size_t(t)];
    }
  }
  for (double& v : out) v /= kept;
  return out;
}

std::set<int32_t> support(const std::vector<double>& probs) {
  std::set<int32_t> s;
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] > 0) s.insert(int32_t(i));
  return s;
}

std::vector<float> random_logits(uint64_t seed, size_t V, float scale, bool quantise = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(V);
  for (float& v : x) v = quantise ? std::round(nd(rng)) : nd(rng);
  return x;
}

// One draw with everything fresh (logits are scratch).
SampledToken sample_once(const SamplingParams& p, std::vector<float> logits, const std::vector<int32_t>& prompt = {},
                         const std::vector<int32_t>& output = {}) {
  Sampler s(p);
  for (int32_t t : output) s.observe(t);
  return s.sample(logits, prompt);
}

void expect_value_error(const SamplingParams& p, const std::string& field) {
  try {
    validate(p);
    ADD_FAILURE() << "expected an error naming " << field;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue) << e.what();
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
  EXPECT_THROW(Sampler{p}, Error) << field;
}

// ---- tests ----

TEST(Sampling, ValidationNamesEachBadField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto with = [](auto edit) {
    SamplingParams p;
    edit(p);
    return p;
  };
  expect_value_error(with([&](SamplingParams& p) { p.temperature = nan; }), "temperature");
  expect_value_error(with([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature");
  expect_value_error(with([](SamplingParams& p) { p.temperature = kInf; }), "temperature");
  expect_value_error(with([](SamplingParams& p) { p.top_k = -1; }), "top_k");
  expect_value_error(with([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p");
  expect_value_error(with([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p");
  expect_value_error(with([&](SamplingParams& p) { p.top_p = nan; }), "top_p");
  expect_value_error(with([](SamplingParams& p) { p.min_p = -0.1f; }), "min_p");
  expect_value_error(with([](SamplingParams& p) { p.min_p = 1.01f; }), "min_p");
  expect_value_error(with([&](SamplingParams& p) { p.min_p = nan; }), "min_p");
  expect_value_error(with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty");
  expect_value_error(with([](SamplingParams& p) { p.repetition_penalty = -1.0f; }), "repetition_penalty");
  expect_value_error(with([](SamplingParams& p) { p.repetition_penalty = kInf; }), "repetition_penalty");
  expect_value_error(with([&](SamplingParams& p) { p.repetition_penalty = nan; }), "repetition_penalty");
  expect_value_error(with([](SamplingParams& p) { p.frequency_penalty = 2.5f; }), "frequency_penalty");
  expect_value_error(with([](SamplingParams& p) { p.frequency_penalty = -2.01f; }), "frequency_penalty");
  expect_value_error(with([&](SamplingParams& p) { p.frequency_penalty = nan; }), "frequency_penalty");
  expect_value_error(with([](SamplingParams& p) { p.presence_penalty = -3.0f; }), "presence_penalty");
  expect_value_error(with([&](SamplingParams& p) { p.presence_penalty = nan; }), "presence_penalty");
  expect_value_error(with([](SamplingParams& p) { p.top_logprobs = -1; }), "top_logprobs");
  expect_value_error(with([](SamplingParams& p) { p.top_logprobs = 21; }), "top_logprobs");

  // The edges of every range are accepted.
  SamplingParams edge;
  edge.temperature = 0;
  edge.top_k = 0;
  edge.top_p = 1;
  edge.min_p = 1;
  edge.repetition_penalty = 1e-3f;
  edge.frequency_penalty = -2;
  edge.presence_penalty = 2;
  edge.top_logprobs = 20;
  EXPECT_NO_THROW(validate(edge));
  edge.min_p = 0;
  edge.frequency_penalty = 2;
  edge.presence_penalty = -2;
  edge.top_logprobs = 0;
  EXPECT_NO_THROW(Sampler{edge});
}

TEST(Sampling, BadLogitsAndIdsAreValueErrors) {
  SamplingParams p;
  auto expect_error = [](auto&& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kValue) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { sample_once(p, {}); }, "empty");
  expect_error([&] { sample_once(p, {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f}); }, "token 1");
  expect_error([&] { sample_once(p, {1.0f, 0.0f, kInf}); }, "token 2");
  expect_error([&] { sample_once(p, {-kInf, -kInf}); }, "-inf");
  SamplingParams rep;
  rep.repetition_penalty = 1.2f;
  expect_error([&] { sample_once(rep, {1.0f, 2.0f}, {0, 5}); }, "prompt token id 5");
  expect_error([&] { sample_once(rep, {1.0f, 2.0f}, {-1}); }, "prompt token id -1");
  expect_error([&] { sample_once(rep, {1.0f, 2.0f}, {}, {7}); }, "output token id 7");
  expect_error(
      [&] {
        Sampler s(p);
        s.observe(-3);
      },
      "-3");
  // The sampler survives an error: the same object works afterwards, and its scratch marks were not left set.
  Sampler s(rep);
  std::vector<float> bad = {1.0f, 2.0f};
  const std::vector<int32_t> bad_prompt = {1, 9};
  EXPECT_THROW(s.sample(bad, bad_prompt), Error);
  std::vector<float> good = {1.0f, 2.0f};
  const std::vector<int32_t> prompt = {0};
  SamplingParams greedy = rep;
  greedy.temperature = 0;
  greedy.top_logprobs = 2;
  Sampler g(greedy);
  std::vector<float> bad2 = {1.0f, 2.0f};
  EXPECT_THROW(g.sample(bad2, bad_prompt), Error);
  const SampledToken r = g.sample(good, prompt);
  // Only token 0 (from the prompt) is penalised: 1 / 1.2; token 1 would be 2 / 1.2 had a stale mark remained.
  const std::vector<double> lp = naive_log_softmax({1.0 / 1.2, 2.0});
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_NEAR(r.top[0].logprob, lp[1], 1e-5);
  EXPECT_NEAR(r.top[1].logprob, lp[0], 1e-5);
}

// logit_bias is added to the model's logits before the penalties: +100 all but forces a token, -100 bans one, and
// the reported logprobs are the log-softmax of the biased (then penalised) logits, against the naive reference.
TEST(Sampling, LogitBiasShiftsTheLogitsBeforeEverythingElse) {
  const std::vector<float> logits = random_logits(31, 50, 1.0f);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.top_logprobs = 3;
  const int32_t top = naive_argmax(std::vector<double>(logits.begin(), logits.end()));
  const int32_t other = top == 7 ? 8 : 7;
  SamplingParams force = greedy;
  force.logit_bias = {{other, 100.0f}};
  EXPECT_EQ(sample_once(force, logits).token, other);
  SamplingParams ban = greedy;
  ban.logit_bias = {{top, -100.0f}};
  EXPECT_NE(sample_once(ban, logits).token, top);
  SamplingParams both = greedy;
  both.logit_bias = {{3, 2.5f}, {top, -1.0f}};
  both.repetition_penalty = 1.5f;
  const std::vector<int32_t> prompt = {3, 11};
  std::vector<float> biased = logits;
  biased[3] += 2.5f;
  biased[size_t(top)] -= 1.0f;
  const std::vector<double> want = naive_log_softmax(naive_penalised(biased, prompt, {}, both));
  const SampledToken r = sample_once(both, logits, prompt);
  EXPECT_EQ(r.token, naive_argmax(want));
  ASSERT_EQ(r.top.size(), 3u);
  for (const TokenLogprob& t : r.top) EXPECT_NEAR(t.logprob, want[size_t(t.token)], 1e-5) << t.token;
  // Bad entries: one value error each.
  SamplingParams bad = greedy;
  bad.logit_bias = {{2, 101.0f}};
  expect_value_error(bad, "logit_bias");
  bad.logit_bias = {{-1, 1.0f}};
  expect_value_error(bad, "logit_bias");
  bad.logit_bias = {{2, std::numeric_limits<float>::quiet_NaN()}};
  expect_value_error(bad, "logit_bias");
  SamplingParams outside = greedy;
  outside.logit_bias = {{50, 1.0f}};  // the vocabulary is [0, 50)
  EXPECT_THROW(sample_once(outside, logits), Error);
}

TEST(Sampling, GreedyIsArgmaxWithTiesToTheLowestId) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample_once(p, {0.5f, 2.0f, -1.0f, 2.0f, 2.0f}).token, 1);
  EXPECT_EQ(sample_once(p, {-kInf, -3.0f, -kInf, -3.0f}).token, 1);
  EXPECT_EQ(sample_once(p, {7.0f}).token, 0);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    // Integer logits: many ties at the top.
    const std::vector<float> x = random_logits(seed, 1000, 1.5f, /*quantise=*/true);
    const int32_t want = naive_argmax(std::vector<double>(x.begin(), x.end()));
    p.seed = seed;
    EXPECT_EQ(sample_once(p, x).token, want) << "seed " << seed;
  }
}

TEST(Sampling, RepetitionPenaltyOncePerSeenToken) {
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 20;
  p.repetition_penalty = 2.0f;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  // Token 1 is in the prompt three times and in the output once: penalised once. Token 4 only in the output.
  const SampledToken r = sample_once(p, logits, {0, 1, 1, 1}, {1, 4});
  const std::vector<double> want = {2.0 / 2, -1.0 * 2, 0.5, 3.0, -2.0 * 2, 1.0};  // by hand
  const std::vector<double> lp = naive_log_softmax(want);
  ASSERT_EQ(r.top.size(), 6u);
  for (const TokenLogprob& t : r.top) EXPECT_NEAR(t.logprob, lp[size_t(t.token)], 1e-5) << "token " << t.token;
  EXPECT_EQ(r.token, 3);
  // A penalty < 1 rewards instead: 2 / 0.5 = 4 beats 3.
  p.repetition_penalty = 0.5f;
  EXPECT_EQ(sample_once(p, logits, {0}).token, 0);
}

TEST(Sampling, FrequencyAndPresencePenaltiesCountTheOutputOnly) {
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 20;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  // Prompt tokens 0 and 3 carry no frequency/presence penalty; output: token 2 three times, token 5 once.
  const SampledToken r = sample_once(p, logits, {0, 3, 3}, {2, 2, 5, 2});
  const std::vector<double> want = {2.0, -1.0, 0.5 - 3 * 0.5 - 0.25, 3.0, -2.0, 1.0 - 0.5 - 0.25};
  const std::vector<double> lp = naive_log_softmax(want);
  for (const TokenLogprob& t : r.top) EXPECT_NEAR(t.logprob, lp[size_t(t.token)], 1e-5) << "token " << t.token;

  // With a repetition penalty too, the repetition penalty comes first: token 3 (output once) is
  // 3 / 1.5 - 0.5 - 0.25 = 1.25, not (3 - 0.75) / 1.5 = 1.5. Negative penalties reward.
  p.repetition_penalty = 1.5f;
  const SampledToken r2 = sample_once(p, logits, {0}, {3});
  const std::vector<double> want2 = {2.0 / 1.5, -1.0, 0.5, 3.0 / 1.5 - 0.5 - 0.25, -2.0, 1.0};
  const std::vector<double> lp2 = naive_log_softmax(want2);
  for (const TokenLogprob& t : r2.top) EXPECT_NEAR(t.logprob, lp2[size_t(t.token)], 1e-5) << "token " << t.token;
  EXPECT_EQ(r2.token, 0);  // 2 / 1.5 = 1.33 beats 1.25
}

TEST(Sampling, LogprobsAreTheLogSoftmaxOfThePenalisedLogits) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const size_t V = 50 + rng() % 2000;
    const std::vector<float> logits = random_logits(100 + uint64_t(trial), V, 3.0f);
    std::vector<int32_t> prompt, output;
    for (int i = 0; i < 30; ++i) prompt.push_back(int32_t(rng() % V));
    for (int i = 0; i < 20; ++i) output.push_back(int32_t(rng() % (V / 4)));  // repeats
    SamplingParams p;
    p.seed = uint64_t(trial);
    p.temperature = std::array<float, 4>{0.0f, 0.3f, 1.0f, 2.0f}[size_t(trial) % 4];
    p.top_k = trial % 3 == 0 ? 5 : 0;
    p.top_p = trial % 5 == 0 ? 0.8f : 1.0f;
    p.repetition_penalty = 1.0f + 0.1f * float(trial % 4);
    p.frequency_penalty = 0.2f * float(trial % 3);
    p.presence_penalty = -0.3f * float(trial % 2);
    p.top_logprobs = 1 + trial % 20;
    const SampledToken r = sample_once(p, logits, prompt, output);
    const std::vector<double> lp = naive_log_softmax(naive_penalised(logits, prompt, output, p));
    const std::vector<int32_t> order = naive_order(lp);
    ASSERT_GE(r.token, 0);
    ASSERT_LT(size_t(r.token), V);
    // Tolerance: float logits and float exps against double; |logprob| is at most ~40 here.
    const double tol = 2e-5;
    EXPECT_NEAR(r.logprob, lp[size_t(r.token)], tol) << "trial " << trial;
    ASSERT_EQ(r.top.size(), size_t(p.top_logprobs));
    for (size_t j = 0; j < r.top.size(); ++j) {
      EXPECT_NEAR(r.top[j].logprob, lp[size_t(r.top[j].token)], tol) << "trial " << trial << " rank " << j;
      // Compared by value, so that near-ties reordered by float rounding do not fail the test.
      EXPECT_NEAR(r.top[j].logprob, lp[size_t(order[j])], tol) << "trial " << trial << " rank " << j;
      if (j > 0) {
        EXPECT_GE(r.top[j - 1].logprob, r.top[j].logprob);
      }
    }
    if (p.temperature == 0) {
      EXPECT_EQ(r.token, naive_argmax(lp));
    }
  }
  // Ties among the alternatives are listed by increasing id.
  SamplingParams p;
  p.top_logprobs = 4;
  const SampledToken r = sample_once(p, {1.0f, 3.0f, 1.0f, 3.0f, 2.0f, 3.0f});
  ASSERT_EQ(r.top.size(), 4u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  EXPECT_EQ(r.top[2].token, 5);
  EXPECT_EQ(r.top[3].token, 4);
  // More alternatives asked than the vocabulary has: all of it.
  p.top_logprobs = 20;
  EXPECT_EQ(sample_once(p, {1.0f, 2.0f, 3.0f}).top.size(), 3u);
}

TEST(Sampling, LogprobsDoNotDependOnTemperatureOrTruncation) {
  const std::vector<float> logits = random_logits(3, 500, 2.0f);
  SamplingParams a;
  a.top_logprobs = 10;
  a.temperature = 0.25f;
  SamplingParams b = a;
  b.temperature = 3.0f;
  b.top_k = 3;
  b.top_p = 0.5f;
  b.min_p = 0.2f;
  const SampledToken ra = sample_once(a, logits), rb = sample_once(b, logits);
  ASSERT_EQ(ra.top.size(), rb.top.size());
  for (size_t j = 0; j < ra.top.size(); ++j) {
    EXPECT_EQ(ra.top[j].token, rb.top[j].token);
    EXPECT_EQ(ra.top[j].logprob, rb.top[j].logprob);
  }
}

TEST(Sampling, TopK1IsGreedyAtAnyTemperature) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const std::vector<float> x = random_logits(seed, 3000, 2.0f, /*quantise=*/seed % 2 == 0);
    SamplingParams g;
    g.temperature = 0;
    const int32_t greedy = sample_once(g, x).token;
    for (float t : {1e-4f, 0.5f, 1.0f, 3.0f, 100.0f}) {
      SamplingParams p;
      p.temperature = t;
      p.top_k = 1;
      p.seed = seed;
      p.top_p = seed % 3 == 0 ? 0.5f : 1.0f;
      EXPECT_EQ(sample_once(p, x).token, greedy) << "seed " << seed << " T " << t;
    }
  }
}

// The set of tokens ever drawn (one draw per seed for `seeds`, plus `draws` from one sampler).
std::set<int32_t> drawn_set(const SamplingParams& p, const std::vector<float>& logits, int seeds, int draws) {
  std::set<int32_t> seen;
  for (int s = 0; s < seeds; ++s) {
    SamplingParams q = p;
    q.seed = uint64_t(s) * 7919 + 1;
    seen.insert(sample_once(q, logits).token);
  }
  Sampler sampler(p);
  for (int i = 0; i < draws; ++i) {
    std::vector<float> x = logits;
    seen.insert(sampler.sample(x, {}).token);
  }
  return seen;
}

TEST(Sampling, TruncationSetsOfTopKTopPAndMinP) {
  // Probabilities at T = 1 (by id): 0.05 0.40 0.10 0.30 0.15; order by likelihood: 1, 3, 4, 2, 0.
  const std::vector<double> probs = {0.05, 0.40, 0.10, 0.30, 0.15};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(float(std::log(q) + 1.5));
  struct Case {
    int64_t top_k;
    float top_p, min_p, temperature;
    std::set<int32_t> want;  // by hand
  };
  const std::vector<Case> cases = {
      {0, 1.0f, 0.0f, 1.0f, {0, 1, 2, 3, 4}},
      {2, 1.0f, 0.0f, 1.0f, {1, 3}},
      {4, 1.0f, 0.0f, 1.0f, {1, 2, 3, 4}},
      {0, 0.6f, 0.0f, 1.0f, {1, 3}},           // 0.40 < 0.6 <= 0.70
      {0, 0.8f, 0.0f, 1.0f, {1, 3, 4}},        // 0.70 < 0.8 <= 0.85
      {0, 0.3f, 0.0f, 1.0f, {1}},              // the most likely alone already reaches it
      {0, 1.0f, 0.3f, 1.0f, {1, 3, 4}},        // p >= 0.3 * 0.4 = 0.12
      {0, 1.0f, 0.5f, 1.0f, {1, 3}},           // p >= 0.2
      {0, 1.0f, 1.0f, 1.0f, {1}},              // only the largest
      {3, 0.8f, 0.0f, 1.0f, {1, 3}},           // renormalised over the top 3: 0.40/0.85 + 0.30/0.85 = 0.82 >= 0.8
      {4, 0.9f, 0.3f, 1.0f, {1, 3, 4}},        // top 4 renormalised: 0.895 < 0.9, so top_p keeps 2; min_p drops it
      {0, 0.93f, 0.2f, 1.0f, {1, 2, 3, 4}},    // top_p: 0.85 < 0.93 <= 0.95; min_p (>= 0.08) keeps them
      {0, 0.6f, 0.0f, 0.5f, {1, 3}},           // T = 0.5 sharpens to p^2 / 0.285: 0.561 < 0.6 <= 0.877
      {0, 1.0f, 0.3f, 2.0f, {0, 1, 2, 3, 4}},  // T = 2 flattens to sqrt(p): sqrt(0.05 / 0.40) = 0.35 >= 0.3
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    SamplingParams p;
    p.top_k = cases[c].top_k;
    p.top_p = cases[c].top_p;
    p.min_p = cases[c].min_p;
    p.temperature = cases[c].temperature;
    const std::set<int32_t> naive =
        support(naive_truncated_probs(std::vector<double>(logits.begin(), logits.end()), p));
    const std::set<int32_t> got = drawn_set(p, logits, 300, 3000);
    EXPECT_EQ(got, naive) << "case " << c;
    EXPECT_EQ(naive, cases[c].want) << "case " << c << " (the reference disagrees with the hand-made set)";
  }
}

TEST(Sampling, MaskedTokensAreNeverDrawn) {
  std::vector<float> logits = random_logits(11, 400, 0.1f);  // nearly flat
  for (size_t i = 0; i < logits.size(); i += 3) logits[i] = -kInf;
  for (int64_t k : {0, 300}) {
    SamplingParams p;
    p.top_k = k;
    p.temperature = 5.0f;
    for (int32_t t : drawn_set(p, logits, 100, 3000)) EXPECT_NE(t % 3, 0) << t;
  }
}

TEST(Sampling, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  const std::vector<float> logits = random_logits(5, 5000, 1.0f);
  auto run = [&](uint64_t seed, const SamplingParams& base) {
    SamplingParams p = base;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 100; ++i) {
      std::vector<float> x = logits;
      const SampledToken r = s.sample(x, {});
      s.observe(r.token);
      out.push_back(r.token);
    }
    return out;
  };
  SamplingParams base;
  base.temperature = 1.3f;
  base.top_p = 0.95f;
  base.frequency_penalty = 0.3f;
  EXPECT_EQ(run(42, base), run(42, base));
  EXPECT_NE(run(42, base), run(43, base));
  base.top_k = 40;
  base.min_p = 0.01f;
  EXPECT_EQ(run(9, base), run(9, base));
  EXPECT_NE(run(9, base), run(10, base));
}

// Draws n tokens from one sampler and checks each token's count against n * the naive probability.
// Tolerance: 5 binomial standard deviations + 1 count per token (a false failure for one token has probability
// ~6e-7; the +1 covers tokens whose expected count is below 1).
void expect_frequencies(const SamplingParams& p, const std::vector<float>& logits, int n) {
  const std::vector<double> want = naive_truncated_probs(std::vector<double>(logits.begin(), logits.end()), p);
  std::vector<int> count(logits.size(), 0);
  Sampler s(p);
  for (int i = 0; i < n; ++i) {
    std::vector<float> x = logits;
    ++count[size_t(s.sample(x, {}).token)];
  }
  for (size_t t = 0; t < logits.size(); ++t) {
    const double mean = n * want[t];
    const double sigma = std::sqrt(n * want[t] * (1 - want[t]));
    EXPECT_LE(std::abs(count[t] - mean), 5 * sigma + 1)
        << "token " << t << ": " << count[t] << " draws, expected " << mean << " (T " << p.temperature << ", top_k "
        << p.top_k << ", top_p " << p.top_p << ", min_p " << p.min_p << ")";
  }
}

TEST(Sampling, FrequenciesMatchTheRenormalisedSoftmax) {
  const std::vector<float> small = random_logits(21, 12, 1.5f);
  SamplingParams p;
  p.seed = 1;
  p.temperature = 0.7f;
  expect_frequencies(p, small, 20000);
  p.temperature = 1.0f;  // the path that reuses the log-softmax exps
  expect_frequencies(p, small, 20000);
  p.temperature = 1.3f;
  p.top_k = 6;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  expect_frequencies(p, small, 20000);
  // top_p over a flat vocabulary keeps more than the first sorted chunk (64), so the chunks double.
  const std::vector<float> flat = random_logits(22, 400, 0.3f);
  SamplingParams q;
  q.seed = 2;
  q.temperature = 0.8f;
  q.top_p = 0.6f;
  ASSERT_GT(support(naive_truncated_probs(std::vector<double>(flat.begin(), flat.end()), q)).size(), 128u);
  expect_frequencies(q, flat, 20000);
}

TEST(Sampling, LargeVocabularyTruncation) {
  // A 200K vocabulary: top_k through the heap and through nth_element, and top_p, against the full-sort reference.
  const std::vector<float> logits = random_logits(31, 200000, 2.5f);
  const std::vector<double> xd(logits.begin(), logits.end());
  for (int64_t k : {int64_t(1), int64_t(50), int64_t(5000)}) {
    SamplingParams p;
    p.top_k = k;
    p.temperature = 1.5f;
    const std::set<int32_t> allowed = support(naive_truncated_probs(xd, p));
    ASSERT_EQ(allowed.size(), size_t(k));
    for (int32_t t : drawn_set(p, logits, 5, 40)) EXPECT_TRUE(allowed.count(t)) << "top_k " << k << " drew " << t;
  }
  SamplingParams p;
  p.top_k = 3000;  // nth_element, then top_p over its (sorted) survivors
  p.top_p = 0.2f;
  p.temperature = 3.0f;
  const std::vector<double> want_kp = naive_truncated_probs(xd, p);
  ASSERT_LT(support(want_kp).size(), 2000u);
  for (int32_t t : drawn_set(p, logits, 5, 40)) EXPECT_GT(want_kp[size_t(t)], 0.0) << "top_k + top_p drew " << t;
  p.top_k = 0;
  p.top_p = 0.5f;
  p.temperature = 0.5f;
  const std::vector<double> want = naive_truncated_probs(xd, p);
  for (int32_t t : drawn_set(p, logits, 5, 40)) EXPECT_GT(want[size_t(t)], 0.0) << "top_p drew " << t;
  p.top_p = 1.0f;
  p.min_p = 0.1f;
  const std::vector<double> want2 = naive_truncated_probs(xd, p);
  for (int32_t t : drawn_set(p, logits, 5, 40)) EXPECT_GT(want2[size_t(t)], 0.0) << "min_p drew " << t;
}

}  // namespace
}  // namespace myriad
