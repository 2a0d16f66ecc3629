// Next-token selection (see sampling.h for the order of operations). V is the vocabulary size (logits.size()).
//
// Cost per call, V = vocab: penalties O(prompt + distinct output tokens); a vectorised pass for the max and one of
// exp for the log-softmax normaliser (both always: the chosen token's logprob is always reported); greedy stops
// there (plus a heap scan for top_logprobs). Sampling adds: top_k by a bounded heap (k <= kHeapMaxK, O(V log k)) or
// nth_element, then exps of the k survivors only; without top_k, one more exp pass, and for top_p a histogram of
// the mass (two O(V) passes) so that only one bucket of tokens is sorted. Nothing sorts the whole vocabulary.
//
// NOTE: exps are fast_exp (relative error < 2e-7, vectorisable); glibc's expf is a scalar call that makes
// these passes several times slower at V = 200K. The normaliser is summed in double.
//
// NOTE: candidates are ordered by penalised logit (ties to the lowest id), not by probability: exp((x - m) / T) is
// monotone in x, so the two orders agree, and the logit order has no ties introduced by rounding.
#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "ops/fast_math.h"

namespace myriad {
namespace {

// Largest token id observe() accepts + 1: the tokenizer's vocabulary bound (train/tokenizer.h), which also bounds
// the memory of the per-id counts.
constexpr int64_t kMaxVocab = int64_t(1) << 24;
// Above this k, top_k selects with nth_element (O(V)) instead of a heap (O(V log k)).
constexpr int64_t kHeapMaxK = 1024;

// Strict total order, "more likely first": higher logit, then lower id.
struct MoreLikely {
  const float* x;
  bool operator()(int32_t a, int32_t b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};

// out = the k most likely ids of x[0, V), most likely first (k <= V).
void select_top(const float* x, int64_t V, int64_t k, std::vector<int32_t>& out) {
  const MoreLikely more{x};
  out.clear();
  if (k <= 0) return;
  if (k <= kHeapMaxK) {
    // Heap ordered by `more`: its front is the least likely member. Ids arrive in increasing order, so a newcomer
    // with a logit equal to the front's is never more likely than it.
    out.reserve(size_t(k));
    for (int32_t i = 0; i < int32_t(k); ++i) {
      out.push_back(i);
      std::push_heap(out.begin(), out.end(), more);
    }
    for (int64_t i = k; i < V; ++i) {
      if (x[i] > x[out.front()]) {
        std::pop_heap(out.begin(), out.end(), more);
        out.back() = int32_t(i);
        std::push_heap(out.begin(), out.end(), more);
      }
    }
    std::sort_heap(out.begin(), out.end(), more);
    return;
  }
  out.resize(size_t(V));
  std::iota(out.begin(), out.end(), 0);
  if (k < V) {
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), more);
    out.resize(size_t(k));
  }
  std::sort(out.begin(), out.end(), more);
}

// u in [0, 1) from the top 53 bits of one draw.
double uniform01(std::mt19937_64& rng) {
  return double(rng() >> 11) * 0x1.0p-53;
}

// Sampling weights are exp(-d) with d = (m - x) / T >= 0. NOTE: (m - x) / T, not (m - x) * (1 / T): a denormal T
// makes 1 / T infinite, and 0 * inf is NaN. Beyond d = kMaxD the weight is exactly 0 (fast_exp would saturate
// at ~1e-38 instead), so that a masked (-inf) logit can never be drawn; exp(-87) is negligible next to the max's 1.
constexpr float kMaxD = 87.0f;

// NOTE: a multiplication by the mask, not `d > kMaxD ? 0 : ...`: GCC 12 does not if-convert that select inside
// these loops ("control flow in loop") and leaves them scalar, ~7x slower.
inline float weight(float x, float m, float T) {
  const float d = (m - x) / T;
  return fast_exp(-d) * float(d <= kMaxD);
}

// Sum of exp((x - m) / T) over x[0, V), in double; each term stored in w when w is not null. Vectorised.
double exp_weights(const float* x, int64_t V, float m, float T, float* w) {
  double sum = 0;
  if (w) {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < V; ++i) {
      const float e = weight(x[i], m, T);
      w[i] = e;
      sum += double(e);
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < V; ++i) sum += double(weight(x[i], m, T));
  }
  return sum;
}

// top_p over the whole vocabulary without a full sort: a histogram of the weight mass over buckets of d (1/16 nat
// wide, so monotone in the logit) finds the bucket where the cumulative mass reaches `target`; every token of the
// earlier buckets survives and only that bucket is sorted (most likely first) to find the cut inside it. Cost:
// O(V) plus a sort of one bucket. ids = the survivors: the earlier buckets in id order, then the sorted prefix.
void top_p_by_buckets(const float* x, int64_t V, float m, float T, const float* w, double target,
                      std::vector<int32_t>& ids) {
  constexpr int kPerNat = 16;
  constexpr int kBuckets = int(kMaxD) * kPerNat + 1;  // the last one holds the weights of 0
  const auto bucket_of = [&](int64_t i) {
    const float d = (m - x[i]) / T;  // the same expression as weight(), so that weight 0 <=> the last bucket
    return d > kMaxD ? kBuckets - 1 : std::min(int(d * float(kPerNat)), kBuckets - 2);
  };
  std::vector<double> mass(kBuckets, 0.0);
  std::vector<int64_t> count(kBuckets, 0);
  for (int64_t i = 0; i < V; ++i) {
    const int b = bucket_of(i);
    mass[size_t(b)] += w[i];
    ++count[size_t(b)];
  }
  // The bucket where the mass reaches the target; when rounding never gets there, the last one with weight (bucket
  // 0 always holds the max). before / n_before: the mass and count of the buckets ahead of it.
  double before = 0;
  int64_t n_before = 0;
  int cut_bucket = -1, last = 0;
  for (int b = 0; b < kBuckets - 1; ++b) {
    if (count[size_t(b)] == 0) continue;
    if (before + mass[size_t(b)] >= target) {
      cut_bucket = b;
      break;
    }
    before += mass[size_t(b)];
    n_before += count[size_t(b)];
    last = b;
  }
  if (cut_bucket < 0) {
    cut_bucket = last;
    before -= mass[size_t(last)];
    n_before -= count[size_t(last)];
  }
  // A second pass places the earlier buckets first and the cut bucket after them.
  ids.resize(size_t(n_before + count[size_t(cut_bucket)]));
  size_t head = 0, tail = size_t(n_before);
  for (int64_t i = 0; i < V; ++i) {
    const int b = bucket_of(i);
    if (b < cut_bucket) {
      ids[head++] = int32_t(i);
    } else if (b == cut_bucket) {
      ids[tail++] = int32_t(i);
    }
  }
  const auto first = ids.begin() + ptrdiff_t(n_before);
  std::sort(first, ids.end(), MoreLikely{x});
  double acc = before;
  for (auto it = first; it != ids.end(); ++it) {
    acc += w[*it];
    if (acc >= target) {
      ids.erase(it + 1, ids.end());
      break;
    }
  }
}

}  // namespace

void validate(const SamplingParams& p) {
  MYRIAD_REQUIRE(std::isfinite(p.temperature) && p.temperature >= 0, kValue, "sampling: temperature (", p.temperature,
                 ") must be finite and >= 0 (0 = greedy)");
  MYRIAD_REQUIRE(p.top_k >= 0, kValue, "sampling: top_k (", p.top_k, ") must be >= 0 (0 = off)");
  // Written so that NaN fails every range check.
  MYRIAD_REQUIRE(p.top_p > 0 && p.top_p <= 1, kValue, "sampling: top_p (", p.top_p, ") must be in (0, 1] (1 = off)");
  MYRIAD_REQUIRE(p.min_p >= 0 && p.min_p <= 1, kValue, "sampling: min_p (", p.min_p, ") must be in [0, 1] (0 = off)");
  MYRIAD_REQUIRE(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0, kValue,
                 "sampling: repetition_penalty (", p.repetition_penalty, ") must be finite and > 0 (1 = off)");
  MYRIAD_REQUIRE(p.frequency_penalty >= -2 && p.frequency_penalty <= 2, kValue, "sampling: frequency_penalty (",
                 p.frequency_penalty, ") must be in [-2, 2] (0 = off)");
  MYRIAD_REQUIRE(p.presence_penalty >= -2 && p.presence_penalty <= 2, kValue, "sampling: presence_penalty (",
                 p.presence_penalty, ") must be in [-2, 2] (0 = off)");
  MYRIAD_REQUIRE(p.top_logprobs >= 0 && p.top_logprobs <= 20, kValue, "sampling: top_logprobs (", p.top_logprobs,
                 ") must be in [0, 20]");
  for (const auto& [t, b] : p.logit_bias)
    MYRIAD_REQUIRE(t >= 0 && t < kMaxVocab && b >= -100 && b <= 100, kValue, "sampling: logit_bias entry (", t, ", ", b,
                   ") needs a token id in [0, 2^24) and a bias in [-100, 100]");
  MYRIAD_REQUIRE(p.tool_grammar || p.tool_grammar_start.empty(), kValue,
                 "sampling: tool_grammar_start without a tool_grammar");
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {
  validate(p_);
  if (p_.tool_grammar) {
    grammar_.emplace(p_.tool_grammar);
    for (int32_t t : p_.tool_grammar_start) grammar_->accept(t);
  }
}

void Sampler::observe(int32_t token) {
  MYRIAD_REQUIRE(token >= 0 && token < kMaxVocab, kValue, "sampling: observed token id ", token,
                 " must be in [0, 2^24)");
  if (size_t(token) >= out_count_.size()) out_count_.resize(size_t(token) + 1, 0);
  if (out_count_[size_t(token)]++ == 0) out_tokens_.push_back(token);
  if (grammar_) grammar_->accept(token);
}

double Sampler::uniform() {
  return uniform01(rng_);
}

Sampler Sampler::fork(uint64_t seed) const {
  Sampler s = *this;
  s.rng_.seed(seed);
  return s;
}

SampledToken Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt) {
  SampledToken result;
  const Candidates c = prepare(logits, prompt, result);
  const float* x = logits.data();
  const int64_t V = int64_t(logits.size());
  if (!c.sampling) {  // 3. greedy
    result.token = c.best;
    result.logprob = float(double(x[c.best]) - c.lse);
    return result;
  }
  const std::vector<float>& w = probs_;
  const std::vector<int32_t>& ids = order_;
  // 5. Draw from the renormalised survivors: the first whose cumulative weight exceeds u * total. NOTE: `chosen`
  // keeps the last positive weight seen, in case rounding leaves u * total just above the final cumulative sum.
  const double u = uniform01(rng_);
  int32_t chosen = c.best;
  if (c.listed) {
    double total = 0;
    for (int32_t t : ids) total += w[size_t(t)];
    const double target = u * total;
    double acc = 0;
    for (int32_t t : ids) {
      const float e = w[size_t(t)];
      if (e <= 0) continue;
      acc += e;
      chosen = t;
      if (acc > target) break;
    }
  } else {
    const double target = u * c.z;
    double acc = 0;
    for (int64_t i = 0; i < V; ++i) {
      const float e = w[size_t(i)];
      if (e <= 0) continue;
      acc += e;
      chosen = int32_t(i);
      if (acc > target) break;
    }
  }
  result.token = chosen;
  result.logprob = float(double(x[chosen]) - c.lse);
  return result;
}

TokenDistribution Sampler::distribution(std::span<float> logits, std::span<const int32_t> prompt) {
  SampledToken r;
  const Candidates c = prepare(logits, prompt, r);
  TokenDistribution d;
  const auto V = size_t(logits.size());
  d.p.assign(V, 0.0f);
  d.argmax = c.best;
  d.greedy = !c.sampling;
  d.lse = c.lse;
  d.top = std::move(r.top);
  if (d.greedy) {
    d.p[size_t(c.best)] = 1.0f;
  } else if (c.listed) {
    double total = 0;
    for (int32_t t : order_) total += probs_[size_t(t)];
    for (int32_t t : order_) d.p[size_t(t)] = float(double(probs_[size_t(t)]) / total);
  } else {
    for (size_t i = 0; i < V; ++i) d.p[i] = float(double(probs_[i]) / c.z);
  }
  return d;
}

Sampler::Candidates Sampler::prepare(std::span<float> logits, std::span<const int32_t> prompt, SampledToken& result) {
  const int64_t V = int64_t(logits.size());
  MYRIAD_REQUIRE(V > 0, kValue, "sampling: the logits are empty");
  float* x = logits.data();

  // 0. logit_bias, on the model's logits.
  for (const auto& [t, b] : p_.logit_bias)
    MYRIAD_REQUIRE(t < V, kValue, "sampling: logit_bias token id ", t, " is outside the vocabulary [0, ", V, ")");
  for (const auto& [t, b] : p_.logit_bias) x[t] += b;
  if (grammar_) grammar_->mask(logits);

  // 1. Penalties. Every id is checked before any mark is set, so that an error leaves mark_ all zero.
  const float r = p_.repetition_penalty;
  const float f = p_.frequency_penalty;
  const float pres = p_.presence_penalty;
  const bool rep_on = r != 1.0f;
  const bool count_on = f != 0.0f || pres != 0.0f;
  if (rep_on || count_on) {
    for (int32_t t : out_tokens_) {
      MYRIAD_REQUIRE(t < V, kValue, "sampling: output token id ", t, " is outside the vocabulary [0, ", V, ")");
    }
  }
  if (rep_on) {
    for (int32_t t : prompt) {
      MYRIAD_REQUIRE(t >= 0 && t < V, kValue, "sampling: prompt token id ", t, " is outside the vocabulary [0, ", V,
                     ")");
    }
  }
  const auto repeat = [r](float v) { return v > 0 ? v / r : v * r; };
  if (rep_on || count_on) {
    for (int32_t t : out_tokens_) {
      float& v = x[t];
      if (rep_on) v = repeat(v);
      if (count_on) v -= float(out_count_[size_t(t)]) * f + pres;  // count > 0 for every id in out_tokens_
    }
  }
  if (rep_on) {
    if (mark_.size() < size_t(V)) mark_.resize(size_t(V), 0);
    for (int32_t t : out_tokens_) mark_[size_t(t)] = 1;
    for (int32_t t : prompt) {
      if (!mark_[size_t(t)]) {
        mark_[size_t(t)] = 1;
        x[t] = repeat(x[t]);
      }
    }
    for (int32_t t : out_tokens_) mark_[size_t(t)] = 0;
    for (int32_t t : prompt) mark_[size_t(t)] = 0;
  }

  // The max, the check that the logits can be normalised, then the argmax (ties to the lowest id).
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // NOTE: "some logit is above -inf" is its own reduction, not m > -inf afterwards: OpenMP starts a max reduction's
  // private copies at the type's least representable value, which clang takes as -FLT_MAX (GCC as -inf), so with
  // every logit -inf, m came out -FLT_MAX under clang and the check passed (found by the TSan build).
  float m = -kInf;
  int bad = 0, above_neg_inf = 0;
#pragma omp simd reduction(max : m) reduction(| : bad, above_neg_inf)
  for (int64_t i = 0; i < V; ++i) {
    const float v = x[i];
    bad |= (v != v) | (v == kInf);
    above_neg_inf |= v > -kInf;
    m = v > m ? v : m;
  }
  if (bad) {
    for (int64_t i = 0; i < V; ++i) {
      MYRIAD_REQUIRE(!std::isnan(x[i]) && x[i] != kInf, kValue, "sampling: the logit of token ", i, " is ", x[i],
                     " after penalties (must be finite or -inf)");
    }
  }
  MYRIAD_REQUIRE(above_neg_inf, kValue, "sampling: every logit is -inf");
  const int32_t best = int32_t(std::find(x, x + V, m) - x);

  // 2. log-softmax normaliser. With temperature 1 and no top_k the same exps are the sampling weights.
  const bool top_k_on = p_.top_k > 0 && p_.top_k < V;
  const bool sampling = p_.temperature > 0;
  const bool reuse_exp = sampling && p_.temperature == 1.0f && !top_k_on;
  double sum = 0;
  if (reuse_exp) {
    probs_.resize(size_t(V));
    sum = exp_weights(x, V, m, 1.0f, probs_.data());
  } else {
    sum = exp_weights(x, V, m, 1.0f, nullptr);
  }
  const double lse = double(m) + std::log(sum);

  if (p_.top_logprobs > 0) {
    select_top(x, V, std::min<int64_t>(p_.top_logprobs, V), order_);
    result.top.reserve(order_.size());
    for (int32_t t : order_) result.top.push_back({t, float(double(x[t]) - lse)});
  }

  // 3. Greedy: the draw is sample()'s.
  if (!sampling) return {best, lse, 0, false, false};

  // 4. Weights w = exp((x - m) / T), so that the most likely token has w = 1 and min_p compares w with min_p
  // directly. z: the mass top_p is measured against (all of V, or the top_k set).
  const float T = p_.temperature;
  std::vector<float>& w = probs_;  // indexed by token id
  std::vector<int32_t>& ids = order_;
  bool listed = true;  // candidates in ids; otherwise every id in [0, V)
  double z = 0;
  if (top_k_on) {
    select_top(x, V, p_.top_k, ids);  // most likely first
    if (w.size() < size_t(V)) w.resize(size_t(V));
    for (int32_t t : ids) {
      const float e = weight(x[t], m, T);
      w[size_t(t)] = e;
      z += e;
    }
    if (p_.top_p < 1) {
      // The shortest prefix whose mass reaches top_p * z.
      const double target = double(p_.top_p) * z;
      double acc = 0;
      size_t cut = ids.size();
      for (size_t j = 0; j < ids.size(); ++j) {
        acc += w[size_t(ids[j])];
        if (acc >= target) {
          cut = j + 1;
          break;
        }
      }
      ids.resize(cut);
    }
  } else {
    if (reuse_exp) {
      z = sum;
    } else {
      w.resize(size_t(V));
      z = exp_weights(x, V, m, T, w.data());
    }
    if (p_.top_p < 1) {
      top_p_by_buckets(x, V, m, T, w.data(), double(p_.top_p) * z, ids);
    } else if (p_.min_p > 0) {
      ids.clear();
      for (int64_t i = 0; i < V; ++i) {
        if (w[size_t(i)] >= p_.min_p) ids.push_back(int32_t(i));
      }
    } else {
      listed = false;
    }
  }
  // min_p keeps a prefix of the same order as top_k and top_p, so filtering last gives the documented result; the
  // most likely token (w = 1 >= min_p) stays.
  if (listed && p_.min_p > 0) {
    const float min_p = p_.min_p;
    ids.erase(std::remove_if(ids.begin(), ids.end(), [&](int32_t t) { return w[size_t(t)] < min_p; }), ids.end());
  }

  return {best, lse, z, true, listed};
}

}  // namespace myriad
