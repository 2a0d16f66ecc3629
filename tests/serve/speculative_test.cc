// Speculative decoding (infer/speculative.h): the acceptance rule leaves the target's distribution (a chi-square
// test that a wrong residual fails), greedy output with speculation equals output without it with rejections forced
// at every draft position, a rewound sequence equals one that never saw the rejected drafts, the engine speculates
// with n-gram and model drafts and counts what it accepted, and a draft with another tokenizer is refused.
#include "infer/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "core/error.h"
#include "infer/generate.h"
#include "model/transformer.h"
#include "serve/engine.h"

namespace myriad {
namespace {

Tokenizer tiny_tokenizer(const char* const* words, int n_words, uint32_t seed) {
  std::vector<std::string> texts;
  std::mt19937 rng(seed);
  for (int i = 0; i < 300; ++i) {
    std::string line;
    for (int j = 0; j < 9; ++j) line += std::string(j ? " " : "") + words[rng() % uint32_t(n_words)];
    texts.push_back(line);
  }
  return Tokenizer::train_from_texts(texts, 300);
}

const char* const kWords[] = {"alpha", "beta", "gamma", "delta", "river", "stone", "light", "north"};

struct Models {
  ModelConfig config;
  std::shared_ptr<InferenceModel> target, draft;
};

// The tiny config (KDA and MLA layers, MoE, AttnRes): a target and a draft of different random weights, one tokenizer.
const Models& models() {
  static Models* m = [] {
    auto* t = new Models;
    Tokenizer tok = tiny_tokenizer(kWords, 8, 5);
    t->config = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
    t->config.vocab_size = tok.vocab_size();
    // Larger weights than the initializer's: logits far enough apart that greedy choices do not hinge on f32
    // rounding (a verify chunk and a decode step sum in different orders).
    ModelWeights wt = ModelWeights::random(t->config, 31), wd = ModelWeights::random(t->config, 77);
    for (ModelWeights* w : {&wt, &wd})
      for (const auto& [name, v] : w->all())
        if (name.find("embed_tokens") != std::string::npos || name.find("lm_head") != std::string::npos) {
          Tensor x = v.value();
          for (float& f : std::span<float>(x.data<float>(), size_t(x.numel()))) f *= 40.0f;
        }
    t->target = std::make_shared<InferenceModel>(t->config, DecodeWeights::from_model(wt), tok);
    t->draft = std::make_shared<InferenceModel>(t->config, DecodeWeights::from_model(wd), tok);
    return t;
  }();
  return *m;
}

std::vector<int32_t> random_tokens(int64_t n, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(3 + rng() % uint64_t(vocab - 3));
  return t;
}

// ---- the rule ----

// Pearson's chi-square of `counts` against probabilities p (bins with p = 0 must be empty: a count there fails).
double chi_square(const std::vector<int64_t>& counts, const std::vector<float>& p, int64_t n, bool* impossible) {
  double chi = 0;
  *impossible = false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      *impossible = *impossible || counts[i] > 0;
      continue;
    }
    const double e = double(n) * double(p[i]);
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
  }
  return chi;
}

TokenDistribution dist(std::vector<float> p) {
  TokenDistribution d;
  d.p = std::move(p);
  d.argmax = int32_t(std::max_element(d.p.begin(), d.p.end()) - d.p.begin());
  return d;
}

// The first token's distribution over many trials: draft d ~ q, the rule, the residual on rejection. With the rule
// as specified it is p; `wrong_residual` draws from p itself after a rejection (a classic mistake), which the same
// statistic must catch, so that the test can fail.
std::vector<int64_t> first_tokens(const TokenDistribution& p, const TokenDistribution* q, int64_t n, uint64_t seed,
                                  bool wrong_residual) {
  std::mt19937_64 draft_rng(seed), verify_rng(seed * 7 + 1);
  auto u01 = [](std::mt19937_64& r) { return double(r() >> 11) * 0x1.0p-53; };
  std::vector<int64_t> counts(p.p.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t d = q ? draw_token(*q, u01(draft_rng)) : 2;  // a point mass on token 2 (an n-gram draft)
    int32_t r = -1;
    const double ua = u01(verify_rng), ur = u01(verify_rng);
    int32_t t = accept_draft(p, q, d, ua, ur, &r) ? d : r;
    if (wrong_residual && t != d) t = draw_token(p, ur);
    ++counts[size_t(t)];
  }
  return counts;
}

TEST(SpeculativeRule, KeepsTheTargetsDistributionAndAWrongResidualFails) {
  // 6 tokens; p puts no mass on token 5 (truncated away), q on token 0 (the draft never proposes it).
  const TokenDistribution p = dist({0.05f, 0.30f, 0.10f, 0.35f, 0.20f, 0.0f});
  const TokenDistribution q = dist({0.0f, 0.10f, 0.40f, 0.15f, 0.20f, 0.15f});
  const int64_t n = 200000;
  // Chi-square with 4 degrees of freedom (5 bins with mass): P(chi > 23.5) = 1e-4.
  const double limit = 23.5;
  bool impossible = false;
  for (const TokenDistribution* qq : {&q, static_cast<const TokenDistribution*>(nullptr)}) {
    const double good = chi_square(first_tokens(p, qq, n, 11, false), p.p, n, &impossible);
    EXPECT_FALSE(impossible);
    EXPECT_LT(good, limit) << (qq ? "sampled draft" : "point-mass draft");
    const double bad = chi_square(first_tokens(p, qq, n, 11, true), p.p, n, &impossible);
    EXPECT_GT(bad, 10 * limit) << "the wrong residual should be caught (" << (qq ? "sampled" : "point mass") << ")";
  }
  // Greedy (one-hot p): accepted exactly when the draft is the argmax, else replaced by it.
  TokenDistribution g = dist({0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f});
  g.greedy = true;
  int32_t r = -1;
  EXPECT_TRUE(accept_draft(g, nullptr, 3, 0.0, 0.0, &r));
  EXPECT_FALSE(accept_draft(g, nullptr, 2, 0.0, 0.0, &r));
  EXPECT_EQ(r, 3);
  EXPECT_THROW(accept_draft(g, nullptr, 6, 0.0, 0.0, &r), Error);
}

// ---- greedy equality with forced rejections ----

// Proposes k tokens of which the first `right` (cycling 0..k) are the known greedy continuation and the rest wrong,
// so that every round rejects at a different position (or accepts all).
class ScriptedDrafter final : public Drafter {
 public:
  ScriptedDrafter(std::vector<int32_t> truth, int64_t vocab) : truth_(std::move(truth)), vocab_(vocab) {}
  std::vector<int32_t> draft(std::span<const int32_t>, std::span<const int32_t> output, int64_t k, const Sampler&,
                             std::vector<TokenDistribution>&) override {
    const int64_t right = round_++ % (k + 1);
    expected_accepted += right;
    std::vector<int32_t> d;
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = output.size() + size_t(i);
      const int32_t t = at < truth_.size() ? truth_[at] : 3;
      d.push_back(i < right ? t : int32_t(3 + (t - 2) % (vocab_ - 3)));  // any other token when wrong
    }
    return d;
  }
  std::string name() const override { return "scripted"; }
  int64_t expected_accepted = 0;

 private:
  std::vector<int32_t> truth_;
  int64_t vocab_, round_ = 0;
};

TEST(Speculation, GreedyEqualsPlainDecodingWithRejectionsAtEveryPosition) {
  const InferenceModel& m = *models().target;
  const std::vector<int32_t> prompt = random_tokens(40, 3, m.vocab_size());
  SamplingParams greedy;
  greedy.temperature = 0;
  const int n = 60;
  const std::vector<int32_t> plain = generate(m, prompt, n, greedy, -1);
  ASSERT_EQ(int(plain.size()), n);
  for (int64_t k : {1, 3, 5}) {
    ScriptedDrafter scripted(plain, m.vocab_size());
    SpeculationStats stats;
    const std::vector<int32_t> spec = generate(m, prompt, n, greedy, -1, {}, 0, {&scripted, k, &stats});
    EXPECT_EQ(spec, plain) << "k " << k;
    // Every forced rejection happened where it was forced (the last round may be cut by max_new_tokens).
    EXPECT_GT(stats.verifies, 0);
    EXPECT_LE(stats.accepted, scripted.expected_accepted);
    EXPECT_GE(stats.accepted, scripted.expected_accepted - k);
    EXPECT_EQ(stats.emitted, n - 1);  // the first token comes from the prefill
  }
  // Real drafters: n-grams of the context and a draft model of other weights.
  NgramDrafter ngram;
  ModelDrafter draft(models().draft, m);
  for (Drafter* d : {static_cast<Drafter*>(&ngram), static_cast<Drafter*>(&draft)}) {
    SpeculationStats stats;
    EXPECT_EQ(generate(m, prompt, n, greedy, -1, {}, 0, {d, 4, &stats}), plain) << d->name();
    EXPECT_GT(stats.verifies, 0) << d->name();
  }
  // The draft model drafting for itself is always right: every draft accepted.
  ModelDrafter self(models().target, m);
  SpeculationStats stats;
  EXPECT_EQ(generate(m, prompt, n, greedy, -1, {}, 0, {&self, 4, &stats}), plain);
  EXPECT_EQ(stats.accepted, stats.drafted);
  EXPECT_GT(stats.tokens_per_verify(), 4.0);
}

// ---- rollback ----

TEST(Speculation, RewoundSequenceEqualsOneThatNeverSawTheDrafts) {
  const InferenceModel& m = *models().target;
  const std::vector<int32_t> prompt = random_tokens(70, 4, m.vocab_size());
  const std::vector<int32_t> more = random_tokens(6, 5, m.vocab_size());  // [t, x1 .. x5]
  // Page size 8: the rewind frees pages and cuts one in the middle (70 + 2 tokens kept of 76).
  SequenceState a = m.new_sequence(8), b = m.new_sequence(8);
  for (SequenceState* s : {&a, &b}) {
    s->record_routing = true;
    const BatchEntry e{s, prompt};
    m.forward(std::span<const BatchEntry>(&e, 1));
  }
  a.begin_speculation();
  BatchEntry ea{&a, more};
  ea.logit_rows = 6;
  m.forward(std::span<const BatchEntry>(&ea, 1));
  // A second forward inside the same speculation (a draft model's token-by-token drafting does this).
  const int32_t extra = 9;
  const BatchEntry ea2{&a, std::span<const int32_t>(&extra, 1)};
  m.forward(std::span<const BatchEntry>(&ea2, 1));
  a.rewind(72);
  a.end_speculation();
  const BatchEntry eb{&b, std::span<const int32_t>(more.data(), 2)};
  m.forward(std::span<const BatchEntry>(&eb, 1));
  ASSERT_EQ(a.tokens, 72);
  ASSERT_EQ(b.tokens, 72);
  auto close = [](const Tensor& x, const Tensor& y, const char* what, size_t l) {
    const auto u = x.contiguous().to_vector(), v = y.contiguous().to_vector();
    ASSERT_EQ(u.size(), v.size()) << what << " layer " << l;
    double d = 0, s = 0;
    for (size_t i = 0; i < u.size(); ++i)
      d = std::max(d, double(std::abs(u[i] - v[i]))), s = std::max(s, double(std::abs(v[i])));
    // The same recurrence from the same inputs: the verify chunk ran it row by row as decode does; the projections'
    // products had other shapes (f32 rounding).
    EXPECT_LE(d, 1e-5 * std::max(s, 1.0)) << what << " layer " << l;
  };
  for (size_t l = 0; l < a.kda.size(); ++l) {
    if (a.kda[l].S.defined()) {
      close(a.kda[l].S, b.kda[l].S, "S", l);
      close(a.kda[l].conv_q, b.kda[l].conv_q, "conv_q", l);
      close(a.kda[l].conv_k, b.kda[l].conv_k, "conv_k", l);
      close(a.kda[l].conv_v, b.kda[l].conv_v, "conv_v", l);
      EXPECT_EQ(a.kda[l].tokens, b.kda[l].tokens);
    } else {
      ASSERT_EQ(a.mla[l].size(), b.mla[l].size());
      EXPECT_EQ(a.mla[l].num_pages(), b.mla[l].num_pages()) << "pages past the kept tokens are freed";
      std::vector<float> ra(size_t(a.mla[l].row_width())), rb(ra.size());
      double d = 0;
      for (int64_t t = 0; t < a.mla[l].size(); ++t) {
        a.mla[l].row_f32(t, ra.data());
        b.mla[l].row_f32(t, rb.data());
        for (size_t i = 0; i < ra.size(); ++i) d = std::max(d, double(std::abs(ra[i] - rb[i])));
      }
      EXPECT_LE(d, 1e-5) << "MLA rows, layer " << l;
    }
    EXPECT_EQ(a.routing[l], b.routing[l]) << "routing record, layer " << l;
  }
  // And they continue alike.
  const std::vector<int32_t> next = random_tokens(3, 6, m.vocab_size());
  const BatchEntry na{&a, next}, nb{&b, next};
  const Tensor la = m.forward(std::span<const BatchEntry>(&na, 1)), lb = m.forward(std::span<const BatchEntry>(&nb, 1));
  close(la, lb, "next logits", 0);
  // Out of range: before the speculation began, or without one.
  SequenceState c = m.new_sequence(8);
  EXPECT_THROW(c.rewind(0), Error);
}

// ---- sampled output keeps the target's distribution, end to end ----

TEST(Speculation, SampledFirstTokenHasTheTargetsDistribution) {
  const InferenceModel& m = *models().target;
  const std::vector<int32_t> prompt = random_tokens(30, 8, m.vocab_size());
  SamplingParams sp;
  sp.temperature = 1.5f;
  sp.top_k = 6;                  // 6 bins for the statistic
  sp.repetition_penalty = 1.3f;  // applied to p and q alike
  // The target's distribution of the token after prompt + [c] (c: the last chosen token).
  const int32_t c = prompt.back();
  const std::span<const int32_t> context(prompt.data(), prompt.size() - 1);
  SequenceState base = m.new_sequence();
  {
    const BatchEntry e{&base, context};
    m.forward(std::span<const BatchEntry>(&e, 1));
  }
  std::vector<float> p;
  {
    SequenceState s = m.new_sequence();
    const BatchEntry e{&s, prompt};
    Tensor logits = m.forward(std::span<const BatchEntry>(&e, 1));
    Sampler probe(sp);
    probe.observe(c);
    p = probe.distribution(std::span<float>(logits.data<float>(), size_t(logits.numel())), context).p;
  }
  const int64_t n = 3000;
  ModelDrafter draft(models().draft, m);
  std::vector<int64_t> counts(p.size(), 0);
  const std::vector<int32_t> output{c};
  int64_t rejected_first = 0;
  for (int64_t i = 0; i < n; ++i) {
    SequenceState s = m.new_sequence();
    {
      const BatchEntry e{&s, context};
      m.forward(std::span<const BatchEntry>(&e, 1));
    }
    SamplingParams seeded = sp;
    seeded.seed = uint64_t(i) + 1;
    Sampler sampler(seeded);
    sampler.observe(c);
    SpeculationStats stats;
    const std::vector<SampledToken> got = speculative_round(m, s, sampler, draft, context, output, 3, 8, &stats);
    ++counts[size_t(got.front().token)];
    rejected_first += stats.accepted == 0 ? 1 : 0;
  }
  bool impossible = false;
  const double chi = chi_square(counts, p, n, &impossible);
  EXPECT_FALSE(impossible) << "a token outside the target's top-k was produced";
  // 6 bins, 5 degrees of freedom: P(chi > 25.7) = 1e-4.
  EXPECT_LT(chi, 25.7);
  // The draft (other weights) disagrees often enough that the residual is exercised.
  EXPECT_GT(rejected_first, n / 10);
}

// ---- the engine ----

GenerationRequest request(std::vector<int32_t> prompt, int64_t max_tokens, float temperature, uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.stop_at_eos = false;
  return r;
}

std::vector<std::vector<int32_t>> run(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  std::map<uint64_t, size_t> slot;
  for (size_t i = 0; i < reqs.size(); ++i)
    slot[e.submit(reqs[i], [&out, &slot](const TokenEvent& ev) {
      if (ev.token >= 0) out[slot.at(ev.request)].push_back(ev.token);
    })] = i;
  e.run_until_idle();
  return out;
}

TEST(Speculation, EngineGreedyOutputEqualsPlainWithEveryDrafter) {
  const auto& m = models().target;
  // A prompt that repeats itself (n-gram drafts find matches) and two random ones, batched.
  std::vector<int32_t> rep = random_tokens(12, 9, m->vocab_size());
  for (int i = 0; i < 3; ++i) rep.insert(rep.end(), rep.begin(), rep.begin() + 12);
  const std::vector<GenerationRequest> reqs = {request(rep, 40, 0, 0),
                                               request(random_tokens(20, 10, m->vocab_size()), 33, 0, 0),
                                               request(random_tokens(9, 11, m->vocab_size()), 25, 0, 0)};
  Engine plain(m);
  const auto want = run(plain, reqs);
  for (const char* draft : {"ngram", "model"}) {
    EngineOptions o;
    o.draft = draft;
    if (std::string(draft) == "model") o.draft_model = models().draft;
    o.spec_tokens = 4;
    Engine spec(m, o);
    EXPECT_EQ(run(spec, reqs), want) << draft;
    const EngineMetrics mt = spec.metrics();
    EXPECT_GT(mt.spec_verifies, 0u) << draft;
    EXPECT_GT(mt.spec_drafted, 0u) << draft;
    EXPECT_EQ(mt.generated_tokens, plain.metrics().generated_tokens) << draft;
    // Off above spec_max_batch: three sequences decoding side by side to the same length (prefilled in one step)
    // with a limit of two never speculate; one fewer than the limit, they do.
    std::vector<GenerationRequest> same = reqs;
    for (GenerationRequest& r : same) r.max_tokens = 20;
    Engine plain_same(m);
    const auto want_same = run(plain_same, same);
    o.spec_max_batch = 2;
    Engine off(m, o);
    EXPECT_EQ(run(off, same), want_same);
    EXPECT_EQ(off.metrics().spec_verifies, 0u);
    o.spec_max_batch = 3;
    Engine on(m, o);
    EXPECT_EQ(run(on, same), want_same);
    EXPECT_GT(on.metrics().spec_verifies, 0u);
  }
  // Sampled requests with speculation run to their length with tokens of the vocabulary (their distribution is
  // the rule's, tested above).
  EngineOptions o;
  o.draft = "model";
  o.draft_model = models().draft;
  Engine sampled(m, o);
  const auto got = run(sampled, {request(rep, 30, 1.0f, 5), request(rep, 30, 0.7f, 6)});
  for (const auto& g : got) {
    EXPECT_EQ(g.size(), 30u);
    for (int32_t t : g) EXPECT_TRUE(t >= 0 && t < m->vocab_size());
  }
}

TEST(Speculation, DraftWithAnotherTokenizerIsRefused) {
  const char* const other[] = {"un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit"};
  Tokenizer tok = tiny_tokenizer(other, 8, 6);
  ModelConfig c = models().config;
  c.vocab_size = tok.vocab_size();
  auto other_model = std::make_shared<InferenceModel>(c, DecodeWeights::from_model(ModelWeights::random(c, 3)), tok);
  try {
    ModelDrafter d(other_model, *models().target);
    FAIL() << "a draft with another tokenizer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
  }
  EngineOptions o;
  o.draft = "model";
  o.draft_model = other_model;
  EXPECT_THROW(Engine(models().target, o), Error);
  o.draft = "ngrams";  // a misspelt drafter
  o.draft_model = nullptr;
  EXPECT_THROW(Engine(models().target, o), Error);
}

}  // namespace
}  // namespace myriad
