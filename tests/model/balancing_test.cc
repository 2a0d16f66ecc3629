// MoE balancing (docs/design.md §1.6): quantile balancing converges on skewed batches and its margin choice makes a
// balanced bias a fixed point; b's invariances (a constant changes no decision, b never weighs); histogram QB
// equals the exact one within a bin and sums across "ranks"; the sign update moves load toward the mean; the
// auxiliary loss and its gradient against a naive double computation; capacity routing; routing statistics.
// Shape legend: m tokens, n experts, k top-k.
#include "model/balancing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "autograd/functions.h"
#include "core/error.h"
#include "ops/kernels.h"

namespace myriad {
namespace {

// scores [m, n] = sigmoid(mu_j + N(0, sd)): expert j is popular in proportion to mu_j.
std::vector<float> skewed_scores(std::mt19937& rng, int64_t m, const std::vector<float>& mu, float sd = 1.0f) {
  const int64_t n = int64_t(mu.size());
  std::normal_distribution<float> noise(0.0f, sd);
  std::vector<float> s(static_cast<size_t>(m * n));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) s[size_t(t * n + j)] = 1.0f / (1.0f + std::exp(-(mu[size_t(j)] + noise(rng))));
  return s;
}

// Linear skew from -spread/2 to +spread/2 over the experts.
std::vector<float> linear_skew(int64_t n, float spread) {
  std::vector<float> mu(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) mu[size_t(j)] = spread * (float(j) / float(n - 1) - 0.5f);
  return mu;
}

// Selection as moe_ffn does it: top-k of s + b (cpu::topk). idx [m, k].
std::vector<int32_t> select(const std::vector<float>& s, const std::vector<float>& b, int64_t m, int64_t n, int64_t k) {
  std::vector<float> biased(s.size());
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) biased[size_t(t * n + j)] = s[size_t(t * n + j)] + b[size_t(j)];
  std::vector<int32_t> idx(static_cast<size_t>(m * k));
  std::vector<float> val(static_cast<size_t>(m * k));
  ops::topk(Device::kCPU, idx.data(), val.data(), biased.data(), m, n, k);
  return idx;
}

std::vector<int64_t> load_of(const std::vector<int32_t>& idx, int64_t n) {
  std::vector<int64_t> load(static_cast<size_t>(n), 0);
  for (int32_t e : idx)
    if (e >= 0) ++load[size_t(e)];
  return load;
}

double max_violation(const std::vector<int64_t>& load, int64_t m, int64_t k) {
  const double mean = double(m) * double(k) / double(load.size());
  return double(*std::max_element(load.begin(), load.end())) / mean - 1.0;
}

double violation_with(const std::vector<float>& s, const std::vector<float>& b, int64_t m, int64_t n, int64_t k) {
  return max_violation(load_of(select(s, b, m, n, k), n), m, k);
}

// The QB estimate written out the slow way (full sorts), with the margin's bias term as a switch: biased =
// false is docs/design.md §1.6 (s_tj - alpha_t); true is the alternative s_tj + b_j - alpha_t. Raw (not centred).
std::vector<double> naive_qb_raw(const std::vector<float>& s, const std::vector<float>& b, int64_t m, int64_t n,
                                 int64_t k, bool biased_margin) {
  std::vector<float> alpha(static_cast<size_t>(m));
  for (int64_t t = 0; t < m; ++t) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) row[size_t(j)] = s[size_t(t * n + j)] + b[size_t(j)];
    std::sort(row.begin(), row.end(), std::greater<float>());
    alpha[size_t(t)] = row[size_t(k)];
  }
  const int64_t q = m * k / n;
  std::vector<double> raw(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    std::vector<float> col(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t)
      col[size_t(t)] = biased_margin ? s[size_t(t * n + j)] + b[size_t(j)] - alpha[size_t(t)]
                                     : s[size_t(t * n + j)] - alpha[size_t(t)];
    std::sort(col.begin(), col.end(), std::greater<float>());
    raw[size_t(j)] = -double(col[size_t(q)]);
  }
  return raw;
}

std::vector<float> centre(const std::vector<double>& raw) {
  const double mean = std::accumulate(raw.begin(), raw.end(), 0.0) / double(raw.size());
  std::vector<float> b(raw.size());
  for (size_t j = 0; j < raw.size(); ++j) b[j] = float(raw[j] - mean);
  return b;
}

// ---- QB ----

// Each round: route batch r with the current b (the violation printed), then estimate b from batch r; the
// estimate is applied to batch r + 1, a fresh draw from the same skewed distribution.
// Measured (n 16, k 2, m 4096, skew 6, sd 1; mean load 512), max violation per round:
//   exact:                       4.535 (b = 0)  0.713  0.266  0.182  0.164  0.092
//   histogram (256 bins, 1 pass): 4.535          0.861  0.320  0.238  0.113  0.119
// One estimate does not balance in one step: alpha_t moves as b moves (see balancing.h). The floor of a few
// per cent is the sampling noise of a fresh batch (sqrt(512) / 512 ~ 4.4% per expert; max of 16 ~ 2 sigma).
TEST(QuantileBalancing, DrivesSkewedMaxViolationDownOverRounds) {
  const int64_t n = 16, k = 2, m = 4096;
  const std::vector<float> mu = linear_skew(n, 6.0f);
  for (int variant = 0; variant < 2; ++variant) {
    std::mt19937 rng(1234);
    std::vector<float> b(static_cast<size_t>(n), 0.0f);
    std::vector<double> v;
    for (int round = 0; round <= 5; ++round) {
      const std::vector<float> s = skewed_scores(rng, m, mu);
      v.push_back(violation_with(s, b, m, n, k));
      b = variant == 0 ? qb_estimate_bias(s.data(), b.data(), m, n, k)
                       : qb_estimate_bias_histogram(s.data(), b.data(), m, n, k, 256, 1);
    }
    std::printf("QB %s max violation per round:", variant == 0 ? "exact" : "histogram");
    for (double x : v) std::printf(" %.3f", x);
    std::printf("\n");
    EXPECT_GT(v.front(), 3.0) << "the batch is not skewed enough to test anything";
    EXPECT_LT(v.back(), 0.3) << "variant " << variant;
    EXPECT_LT(v[1], v[0] / 3) << "variant " << variant;
    for (size_t r = 3; r < v.size(); ++r) EXPECT_LT(v[r], 0.3) << "round " << r << " variant " << variant;
  }
}

// The estimate equals the slow oracle (unbiased margins), is b + (the biased-margin estimate) (the biased
// margin is an increment), and a converged b is a fixed point: re-estimating on the same batch keeps it
// balanced, while the biased-margin estimate used as a replacement forgets b and routes as with no bias.
TEST(QuantileBalancing, UnbiasedMarginMakesBalancedBiasAFixedPoint) {
  const int64_t n = 12, k = 3, m = 1200;  // q = 300 exactly
  std::mt19937 rng(7);
  const std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 6.0f));
  std::vector<float> b(static_cast<size_t>(n), 0.0f);
  const double v0 = violation_with(s, b, m, n, k);
  std::printf("same batch, QB iterations:");
  for (int i = 0; i < 30; ++i) {
    b = qb_estimate_bias(s.data(), b.data(), m, n, k);  // iterate on one batch
    if (i < 6) std::printf(" %.3f", violation_with(s, b, m, n, k));
  }
  std::printf("\n");
  const double v_conv = violation_with(s, b, m, n, k);
  std::printf("fixed point: violation %.3f at b = 0, %.4f after 30 estimates on the same batch\n", v0, v_conv);
  ASSERT_GT(v0, 2.0);
  ASSERT_LT(v_conv, 0.02);  // 300 +- a few copies per expert

  // Oracle and identity.
  const std::vector<float> ours = qb_estimate_bias(s.data(), b.data(), m, n, k);
  const std::vector<float> oracle = centre(naive_qb_raw(s, b, m, n, k, false));
  std::vector<double> inc = naive_qb_raw(s, b, m, n, k, true);
  for (int64_t j = 0; j < n; ++j) inc[size_t(j)] += b[size_t(j)];  // b + increment
  const std::vector<float> as_increment = centre(inc);
  const std::vector<float> as_replacement = centre(naive_qb_raw(s, b, m, n, k, true));
  double b_range = 0, repl_range = 0;
  for (int64_t j = 0; j < n; ++j) {
    // NOTE: 1e-6: the same float margins and order statistics; only the double->float rounding of the
    // centring (and b + increment, |b| < 4) differs.
    EXPECT_NEAR(ours[size_t(j)], oracle[size_t(j)], 1e-6) << j;
    EXPECT_NEAR(ours[size_t(j)], as_increment[size_t(j)], 1e-6) << j;
    b_range = std::max(b_range, double(std::abs(b[size_t(j)])));
    repl_range = std::max(repl_range, double(std::abs(as_replacement[size_t(j)])));
  }
  // At the fixed point the new estimate stays put (within the gaps between neighbouring margins) ...
  const double v_again = violation_with(s, ours, m, n, k);
  EXPECT_LT(v_again, 0.02);
  // ... while the biased margin, used as the new b, is ~0 and undoes the balancing.
  std::printf("|b| max %.3f; biased-margin estimate |b^| max %.5f; violation with it %.3f\n", b_range, repl_range,
              violation_with(s, as_replacement, m, n, k));
  // Measured: |b| up to 0.49; the biased-margin estimate exactly 0 after centring (at the fixed point the raw
  // biased-margin quantiles are b^_unbiased - b = the same constant in every column).
  EXPECT_GT(b_range, 0.3);
  EXPECT_LT(repl_range, 0.05);
  EXPECT_GT(violation_with(s, as_replacement, m, n, k), 2.0);
}

// Non-divisible m k / n: q = floor; the routing still balances to within about one copy per expert.
TEST(QuantileBalancing, NonDivisibleQuantileRank) {
  EXPECT_EQ(qb_quantile_rank(1000, 16, 2), 125);
  EXPECT_EQ(qb_quantile_rank(1001, 16, 2), 125);  // 2002 / 16 = 125.125
  EXPECT_EQ(qb_quantile_rank(7, 8, 7), 6);        // 49 / 8 = 6.125, < m
  const int64_t n = 7, k = 2, m = 1000;           // m k / n = 285.7
  std::mt19937 rng(3);
  const std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 4.0f));
  std::vector<float> b(static_cast<size_t>(n), 0.0f);
  for (int i = 0; i < 30; ++i) b = qb_estimate_bias(s.data(), b.data(), m, n, k);
  const std::vector<int64_t> load = load_of(select(s, b, m, n, k), n);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_GE(load[size_t(j)], 285 - 2) << j;
    EXPECT_LE(load[size_t(j)], 286 + 2) << j;
  }
}

// Adding a constant to b changes no routing decision (the same top-k sets), nor the QB estimate.
TEST(QuantileBalancing, ConstantShiftOfBiasChangesNothing) {
  const int64_t n = 10, k = 3, m = 500;
  std::mt19937 rng(11);
  const std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 3.0f));
  std::vector<float> b(static_cast<size_t>(n));
  std::normal_distribution<float> d(0.0f, 0.5f);
  for (auto& x : b) x = d(rng);
  const std::vector<int32_t> base = select(s, b, m, n, k);
  const std::vector<float> est = qb_estimate_bias(s.data(), b.data(), m, n, k);
  for (float c : {0.375f, -2.5f, 7.0f}) {
    std::vector<float> bc = b;
    for (auto& x : bc) x += c;
    const std::vector<int32_t> shifted = select(s, bc, m, n, k);
    for (int64_t t = 0; t < m; ++t) {
      const std::set<int32_t> a(base.begin() + t * k, base.begin() + (t + 1) * k);
      const std::set<int32_t> e(shifted.begin() + t * k, shifted.begin() + (t + 1) * k);
      EXPECT_EQ(a, e) << "token " << t << " c " << c;
    }
    const std::vector<float> est_c = qb_estimate_bias(s.data(), bc.data(), m, n, k);
    // NOTE: 1e-5: alpha, margins and b^ all shift by c exactly in reals; in f32 each carries one rounding of
    // a value below ~10 (ulp 1e-6).
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(est_c[size_t(j)], est[size_t(j)], 1e-5) << j << " c " << c;
  }
}

// b selects, never weighs: two biases choosing the same experts (in a different order) give the same
// mixture weights per expert; weighting by s + b instead would not.
TEST(QuantileBalancing, BiasNeverChangesMixtureWeights) {
  const int64_t m = 3, n = 5, k = 2;
  const std::vector<float> s = {0.9f, 0.8f, 0.1f, 0.2f,  0.3f,   //
                                0.2f, 0.7f, 0.6f, 0.1f,  0.05f,  //
                                0.5f, 0.1f, 0.2f, 0.45f, 0.3f};
  const std::vector<float> b1 = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  const std::vector<float> b2 = {-0.05f, 0.2f, 0.15f, 0.1f, -0.2f};  // reorders within the chosen sets
  const std::vector<int32_t> i1 = select(s, b1, m, n, k), i2 = select(s, b2, m, n, k);
  ASSERT_NE(i1, i2) << "the two biases should order the chosen experts differently";
  for (int64_t t = 0; t < m; ++t)
    ASSERT_EQ(std::set<int32_t>(i1.begin() + t * k, i1.begin() + (t + 1) * k),
              std::set<int32_t>(i2.begin() + t * k, i2.begin() + (t + 1) * k))
        << "token " << t << ": the two biases must choose the same experts";
  const ag::Var sv(Tensor::from_vector(s, {m, n}), false);
  auto weights = [&](const std::vector<int32_t>& idx, const ag::Var& scores) {
    const std::vector<float> p =
        ag::route_weights(scores, Tensor::from_vector(idx, {m, k}), 2.5f, true).value().to_vector();
    std::vector<std::map<int32_t, float>> per_token(static_cast<size_t>(m));
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < k; ++j) per_token[size_t(t)][idx[size_t(t * k + j)]] = p[size_t(t * k + j)];
    return per_token;
  };
  const auto w1 = weights(i1, sv), w2 = weights(i2, sv);
  for (int64_t t = 0; t < m; ++t) {
    ASSERT_EQ(w1[size_t(t)].size(), size_t(k));
    EXPECT_EQ(w1[size_t(t)], w2[size_t(t)]) << "token " << t;  // same experts, bit-identical weights
  }
  // Sanity: had the weights used s + b2, they would differ (so the comparison above can fail).
  std::vector<float> biased2(s.size());
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) biased2[size_t(t * n + j)] = s[size_t(t * n + j)] + b2[size_t(j)];
  const auto wb = weights(i2, ag::Var(Tensor::from_vector(biased2, {m, n}), false));
  EXPECT_NE(wb[0], w1[0]);
}

// Histogram QB: within one bin width of the exact estimate (half a bin per raw quantile, doubled by the
// centring), a second pass within one bin of the refined width, and counts summed over "ranks" (token shards)
// equal the counts of the whole batch.
TEST(QuantileBalancing, HistogramMatchesExactWithinABin) {
  const int64_t n = 24, k = 4, m = 3000, bins = 64;
  std::mt19937 rng(5);
  const std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 4.0f));
  std::vector<float> b(static_cast<size_t>(n));
  std::normal_distribution<float> d(0.0f, 0.3f);
  for (auto& x : b) x = d(rng);
  const std::vector<float> exact = qb_estimate_bias(s.data(), b.data(), m, n, k);
  const QbHistogram h0 = qb_histogram_init(b.data(), n, bins);
  const double w = (h0.hi[0] - h0.lo[0]) / double(bins);
  const std::vector<float> one = qb_estimate_bias_histogram(s.data(), b.data(), m, n, k, bins, 1);
  const std::vector<float> two = qb_estimate_bias_histogram(s.data(), b.data(), m, n, k, bins, 2);
  double err1 = 0, err2 = 0;
  for (int64_t j = 0; j < n; ++j) {
    err1 = std::max(err1, double(std::abs(one[size_t(j)] - exact[size_t(j)])));
    err2 = std::max(err2, double(std::abs(two[size_t(j)] - exact[size_t(j)])));
  }
  std::printf("histogram QB: bin width %.4f; max |b - exact| %.5f (1 pass), %.7f (2 passes)\n", w, err1, err2);
  // NOTE: + 1e-6 for the f32 rounding of the returned b.
  EXPECT_LE(err1, w + 1e-6);
  EXPECT_LE(err2, w / double(bins) + 1e-6);
  EXPECT_GT(err1, err2) << "the refinement should sharpen the estimate";

  // Three "ranks" holding 1000 tokens each: the summed counts are the whole batch's, so is the estimate.
  QbHistogram whole = qb_histogram_init(b.data(), n, bins), summed = whole;
  qb_histogram_add(whole, s.data(), b.data(), m, k);
  for (int r = 0; r < 3; ++r) {
    QbHistogram part = qb_histogram_init(b.data(), n, bins);
    qb_histogram_add(part, s.data() + r * 1000 * n, b.data(), 1000, k);
    summed.tokens += part.tokens;
    for (size_t i = 0; i < part.counts.size(); ++i) summed.counts[i] += part.counts[i];
    for (size_t i = 0; i < part.above.size(); ++i) summed.above[i] += part.above[i];
  }
  EXPECT_EQ(summed.tokens, whole.tokens);
  EXPECT_EQ(summed.counts, whole.counts);
  EXPECT_EQ(summed.above, whole.above);
  EXPECT_EQ(qb_bias_from_histogram(summed, k), one);
}

// Radix QB is exact: bit for bit the heap estimate, on one process and on "ranks" that sum their counts, with
// ties (scores quantized to 1/64 so many margins are equal) and with uneven splits including an empty rank.
TEST(QuantileBalancing, RadixSelectIsBitIdenticalToExact) {
  for (const bool ties : {false, true}) {
    const int64_t n = 24, k = 3, m = 2001;
    std::mt19937 rng(ties ? 11 : 12);
    std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 3.0f));
    if (ties)
      for (float& x : s) x = std::round(x * 64.0f) / 64.0f;
    std::vector<float> b(static_cast<size_t>(n));
    std::normal_distribution<float> d(0.0f, 0.2f);
    for (auto& x : b) x = d(rng);
    const std::vector<float> exact = qb_estimate_bias(s.data(), b.data(), m, n, k);
    EXPECT_EQ(qb_estimate_bias_radix(s.data(), b.data(), m, n, k), exact) << "ties " << ties;
    // Four "processes": 0, 700, 1, 1300 tokens.
    const std::vector<int64_t> split = {0, 700, 1, 1300};
    std::vector<QbRadixSelect> parts;
    int64_t off = 0;
    for (int64_t c : split) {
      parts.push_back(qb_radix_init(s.data() + off * n, b.data(), c, n, k));
      off += c;
    }
    ASSERT_EQ(off, m);
    for (int p = 0; p < kQbRadixPasses; ++p) {
      std::vector<int64_t> sum(static_cast<size_t>(n * kQbRadixBins), 0);
      for (const QbRadixSelect& q : parts) {
        const std::vector<int64_t> c = qb_radix_counts(q);
        for (size_t i = 0; i < c.size(); ++i) sum[i] += c[i];
      }
      for (QbRadixSelect& q : parts) qb_radix_advance(q, sum, m);
    }
    for (const QbRadixSelect& q : parts) EXPECT_EQ(qb_radix_bias(q), exact) << "ties " << ties;
  }
  // Counts that do not hold the rank (not summed over the processes the tokens were): one clear error.
  std::mt19937 rng(3);
  const std::vector<float> s = skewed_scores(rng, 100, linear_skew(8, 1.0f));
  const std::vector<float> b(8, 0.0f);
  QbRadixSelect q = qb_radix_init(s.data(), b.data(), 100, 8, 2);
  EXPECT_THROW(qb_radix_advance(q, qb_radix_counts(q), 1000), Error);
}

// Reading a quantile off counts, by hand: n 3, 4 bins over [0, 4) in each column, 4 tokens, k 1 -> q = 1,
// the 2nd largest margin. Column 0: one margin per bin -> bin 2, midpoint 2.5. Column 1: both top margins in
// bin 3 -> 3.5. Column 2: three margins above the range -> clamps to hi = 4.
TEST(QuantileBalancing, HistogramQuantileByHand) {
  QbHistogram h;
  h.n = 3;
  h.bins = 4;
  h.tokens = 4;
  h.lo = {0.0, 0.0, 0.0};
  h.hi = {4.0, 4.0, 4.0};
  h.above = {0, 0, 3};
  h.counts = {1, 1, 1, 1,  //
              2, 0, 0, 2,  //
              1, 0, 0, 0};
  const std::vector<float> b = qb_bias_from_histogram(h, 1);
  const double mean = -(2.5 + 3.5 + 4.0) / 3.0;
  EXPECT_NEAR(b[0], -2.5 - mean, 1e-6);
  EXPECT_NEAR(b[1], -3.5 - mean, 1e-6);
  EXPECT_NEAR(b[2], -4.0 - mean, 1e-6);
  const QbHistogram r = qb_histogram_refine(h, 1);
  EXPECT_EQ(r.lo, (std::vector<double>{2.0, 3.0, 3.0}));  // column 2's rank lies above: the top bin
  EXPECT_EQ(r.hi, (std::vector<double>{3.0, 4.0, 4.0}));
  EXPECT_EQ(r.tokens, 0);
  EXPECT_EQ(r.counts, std::vector<int64_t>(12, 0));
}

TEST(QuantileBalancing, RejectsBadSizesAndValues) {
  const std::vector<float> s = {0.5f, 0.4f, 0.3f, 0.2f};
  const std::vector<float> b = {0.0f, 0.0f};
  EXPECT_THROW(qb_estimate_bias(s.data(), b.data(), 2, 2, 2), Error);  // k = n: no (k+1)-th score
  EXPECT_THROW(qb_estimate_bias(s.data(), b.data(), 0, 2, 1), Error);
  const std::vector<float> bad = {0.5f, NAN, 0.3f, 0.2f};
  EXPECT_THROW(qb_estimate_bias(bad.data(), b.data(), 2, 2, 1), Error);
  EXPECT_THROW(qb_estimate_bias_histogram(s.data(), b.data(), 2, 2, 1, 16, 0), Error);
}

// ---- Baselines ----

TEST(SignUpdate, MovesLoadTowardTheMean) {
  std::vector<float> b = {0.0f, 0.0f, 0.0f, 0.0f};
  sign_update(b, std::vector<int64_t>{10, 2, 6, 6}, 0.01f);  // mean 6
  EXPECT_EQ(b, (std::vector<float>{-0.01f, 0.01f, 0.0f, 0.0f}));
  EXPECT_THROW(sign_update(b, std::vector<int64_t>{1, 2, 3}, 0.01f), Error);

  // On fresh skewed batches: the max violation falls (gamma 0.02, one update per batch).
  const int64_t n = 16, k = 2, m = 2048;
  const std::vector<float> mu = linear_skew(n, 6.0f);
  std::mt19937 rng(99);
  std::vector<float> bias(static_cast<size_t>(n), 0.0f);
  std::vector<double> v;
  for (int step = 0; step < 300; ++step) {
    const std::vector<float> s = skewed_scores(rng, m, mu);
    const std::vector<int64_t> load = load_of(select(s, bias, m, n, k), n);
    v.push_back(max_violation(load, m, k));
    sign_update(bias, load, 0.02f);
  }
  const double tail = std::accumulate(v.end() - 50, v.end(), 0.0) / 50.0;
  std::printf("sign update: max violation %.3f -> %.3f (mean of the last 50 of 300 steps, gamma 0.02)\n", v[0], tail);
  EXPECT_GT(v[0], 3.0);
  EXPECT_LT(tail, 1.0);
}

double naive_aux_loss(const std::vector<double>& s, const std::vector<int32_t>& idx, int64_t T, int64_t E, int64_t k,
                      double coef) {
  std::vector<double> f(static_cast<size_t>(E), 0.0), P(static_cast<size_t>(E), 0.0);
  for (int32_t e : idx)
    if (e >= 0) f[size_t(e)] += 1.0 / double(T * k);
  for (int64_t t = 0; t < T; ++t) {
    double S = 0;
    for (int64_t e = 0; e < E; ++e) S += s[size_t(t * E + e)];
    for (int64_t e = 0; e < E; ++e) P[size_t(e)] += s[size_t(t * E + e)] / S / double(T);
  }
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += f[size_t(e)] * P[size_t(e)];
  return coef * double(E) * sum;
}

// The loss against a naive double computation, and its gradient (through a sigmoid router, as in the model)
// against central differences of that naive loss in double.
TEST(AuxBalanceLoss, ValueAndGradientAgainstNaive) {
  const int64_t T = 6, E = 5, k = 2;
  const float coef = 0.7f;
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(T * E));
  for (auto& x : logits) x = d(rng);
  std::vector<int32_t> idx = {0, 1, 1, 2, 3, 4, 0, 1, 1, -1, 2, 0};  // one dropped copy
  const Tensor idx_t = Tensor::from_vector(idx, {T, k});
  ag::Var lg(Tensor::from_vector(logits, {T, E}), true);
  ag::Var loss = aux_balance_loss(ag::sigmoid(lg), idx_t, coef);
  ag::backward(loss);
  ASSERT_TRUE(lg.has_grad());
  const std::vector<float> g = lg.grad().to_vector();
  auto naive_of_logits = [&](const std::vector<double>& l) {
    std::vector<double> s(l.size());
    for (size_t i = 0; i < l.size(); ++i) s[i] = 1.0 / (1.0 + std::exp(-l[i]));
    return naive_aux_loss(s, idx, T, E, k, coef);
  };
  std::vector<double> l(logits.begin(), logits.end());
  const double ref = naive_of_logits(l);
  // NOTE: forward in f32 scores, accumulated in double: ~1e-7 relative.
  EXPECT_NEAR(loss.value().data<float>()[0], ref, 1e-6 * std::abs(ref) + 1e-7);
  double gmax = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    const double x0 = l[i], h = 1e-5;
    l[i] = x0 + h;
    const double lp = naive_of_logits(l);
    l[i] = x0 - h;
    const double lm = naive_of_logits(l);
    l[i] = x0;
    const double fd = (lp - lm) / (2 * h);
    gmax = std::max(gmax, std::abs(fd));
    // NOTE: double central differences: truncation ~h^2 ~1e-10, rounding ~1e-16 / h ~1e-11; the f32 gradient
    // carries ~1e-7 relative error on values ~1e-2, so 2e-6 absolute passes a correct gradient and fails a
    // missing quotient-rule term (which is O(f_e / S) ~ 1e-2).
    EXPECT_NEAR(g[i], fd, 2e-6) << "element " << i;
  }
  EXPECT_GT(gmax, 1e-3) << "a vanishing gradient would pass trivially";

  // Perfect balance with uniform scores gives coef.
  const std::vector<float> uni(static_cast<size_t>(4 * 4), 0.5f);
  const std::vector<int32_t> bal = {0, 1, 2, 3, 0, 1, 2, 3};
  const ag::Var lu =
      aux_balance_loss(ag::Var(Tensor::from_vector(uni, {4, 4}), false), Tensor::from_vector(bal, {4, 2}), coef);
  EXPECT_NEAR(lu.value().data<float>()[0], coef, 1e-6);
  EXPECT_THROW(aux_balance_loss(ag::Var(Tensor::from_vector(uni, {4, 4}), false),
                                Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 4, 0, 1, 2, 3}, {4, 2}), coef),
               Error);
}

// ---- Capacity ----

TEST(CapacityRouting, CapacityRoundsUpWithoutFloatingPointOvershoot) {
  EXPECT_EQ(expert_capacity(1.0, 8, 4, 2), 4);
  EXPECT_EQ(expert_capacity(1.25, 10, 4, 2), 7);    // 6.25
  EXPECT_EQ(expert_capacity(1.1, 10, 1, 1), 10);    // 11.000000000000002 capped at m
  EXPECT_EQ(expert_capacity(1.1, 100, 10, 1), 11);  // 11.000000000000002, not 12
  EXPECT_EQ(expert_capacity(1e300, 50, 4, 2), 50);
  EXPECT_THROW(expert_capacity(0.0, 8, 4, 2), Error);
}

// The rule written out plainly: each token's whole row sorted (larger first, ties to the lower index); its
// top-k copies in rank order keep their expert when it has room; then each overflowing copy, in slot order,
// takes the best-ranked expert outside the top-k with room that the token does not hold yet, or is dropped.
std::vector<int32_t> naive_capacity_routing(const std::vector<float>& x, int64_t m, int64_t n, int64_t k,
                                            int64_t capacity) {
  std::vector<int32_t> idx(static_cast<size_t>(m * k), -1);
  std::vector<int64_t> load(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < m; ++t) {
    std::vector<int32_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return x[size_t(t * n + a)] > x[size_t(t * n + b)]; });
    std::vector<int64_t> overflow;
    for (int64_t j = 0; j < k; ++j) {
      if (load[size_t(order[size_t(j)])] < capacity) {
        idx[size_t(t * k + j)] = order[size_t(j)];
        ++load[size_t(order[size_t(j)])];
      } else {
        overflow.push_back(j);
      }
    }
    std::set<int32_t> taken;  // experts this token's rerouted copies already hold
    for (int64_t j : overflow)
      for (int64_t r = k; r < n; ++r) {
        const int32_t e = order[size_t(r)];
        if (load[size_t(e)] < capacity && taken.insert(e).second) {
          idx[size_t(t * k + j)] = e;
          ++load[size_t(e)];
          break;
        }
      }
  }
  return idx;
}

TEST(CapacityRouting, NeverExceedsCapacityAndKeepsCopiesDistinct) {
  const int64_t m = 300, n = 8, k = 2;
  std::mt19937 rng(17);
  // Popularity shuffled over the expert indices, so that rank order is not index order.
  std::vector<float> mu = linear_skew(n, 4.0f);
  std::shuffle(mu.begin(), mu.end(), rng);
  const std::vector<float> s = skewed_scores(rng, m, mu);
  for (double cf : {0.5, 1.0, 1.25}) {
    const CapacityRouting r = route_with_capacity(s.data(), m, n, k, cf);
    EXPECT_EQ(r.capacity, expert_capacity(cf, m, n, k));
    const std::vector<int32_t> idx(r.idx.data<int32_t>(), r.idx.data<int32_t>() + m * k);
    EXPECT_EQ(load_of(idx, n), r.load);
    for (int64_t e = 0; e < n; ++e) EXPECT_LE(r.load[size_t(e)], r.capacity) << "expert " << e << " cf " << cf;
    EXPECT_EQ(std::count(idx.begin(), idx.end(), -1), r.dropped);
    EXPECT_EQ(std::accumulate(r.load.begin(), r.load.end(), int64_t(0)) + r.dropped, m * k);
    for (int64_t t = 0; t < m; ++t)
      if (idx[size_t(t * k)] >= 0) {
        EXPECT_NE(idx[size_t(t * k)], idx[size_t(t * k + 1)]) << "token " << t;
      }
    if (cf < 1.0) {
      EXPECT_EQ(r.dropped, m * k - n * r.capacity);  // a copy is dropped only when every expert is full
    }
    if (cf > 1.2) {
      EXPECT_EQ(r.dropped, 0);  // room left always exceeds one expert's capacity: two experts have room
    }
    EXPECT_GT(r.rerouted, 0) << "the skew should overflow the popular experts";
    EXPECT_EQ(idx, naive_capacity_routing(s, m, n, k, r.capacity)) << "cf " << cf;
  }
}

TEST(CapacityRouting, ReroutesToNextBestThenDrops) {
  // n 3, k 1, m 3, cf 1: capacity 1. Everyone prefers expert 0.
  const std::vector<float> s = {0.9f, 0.5f, 0.1f,   // token 0: expert 0
                                0.8f, 0.1f, 0.6f,   // token 1: 0 full -> its next best, 2
                                0.9f, 0.3f, 0.2f};  // token 2: 0 full -> 1 (2 is full too but ranks below)
  CapacityRouting r = route_with_capacity(s.data(), 3, 3, 1, 1.0);
  EXPECT_EQ(r.capacity, 1);
  EXPECT_EQ(r.idx.to_vector(), (std::vector<float>{0, 2, 1}));
  EXPECT_EQ(r.rerouted, 2);
  EXPECT_EQ(r.dropped, 0);
  // Capacity ceil(0.5 * 3 / 2) = 1 with 2 experts: the third token finds no room.
  const std::vector<float> s2 = {0.9f, 0.1f, 0.8f, 0.2f, 0.7f, 0.6f};
  r = route_with_capacity(s2.data(), 3, 2, 1, 0.5);
  EXPECT_EQ(r.idx.to_vector(), (std::vector<float>{0, 1, -1}));
  EXPECT_EQ(r.rerouted, 1);
  EXPECT_EQ(r.dropped, 1);
  // k 2, capacity 1: token 1's second choice (expert 0) is full; it goes to its best remaining expert with room
  // that it has not chosen: not 1 (its own first choice), not 3 (full after token 0), so 2. Slot order is kept.
  const std::vector<float> s3 = {0.9f, 0.1f, 0.2f, 0.8f,   // token 0: {0, 3}
                                 0.8f, 0.9f, 0.1f, 0.3f};  // token 1: {1, 0}, 0 full -> 3
  r = route_with_capacity(s3.data(), 2, 4, 2, 1.0);        // capacity 1
  EXPECT_EQ(r.idx.to_vector(), (std::vector<float>{0, 3, 1, 2}));
  EXPECT_EQ(r.rerouted, 1);
}

TEST(CapacityRouting, HugeCapacityFactorIsPlainTopK) {
  const int64_t m = 200, n = 9, k = 3;
  std::mt19937 rng(8);
  std::vector<float> s = skewed_scores(rng, m, linear_skew(n, 5.0f));
  s[5] = s[6];  // a tie: both paths send it to the lower index
  const CapacityRouting r = route_with_capacity(s.data(), m, n, k, 1e9);
  const std::vector<int32_t> plain = select(s, std::vector<float>(static_cast<size_t>(n), 0.0f), m, n, k);
  EXPECT_EQ(std::vector<int32_t>(r.idx.data<int32_t>(), r.idx.data<int32_t>() + m * k), plain);
  EXPECT_EQ(r.rerouted, 0);
  EXPECT_EQ(r.dropped, 0);
}

// ---- Statistics ----

TEST(RoutingStatistics, HandMadeExample) {
  // m 3, n 4, k 2: token 0 uniform, token 1 one expert only, token 2 two experts equally.
  const std::vector<float> s = {0.5f, 0.5f, 0.5f, 0.5f, 0.9f, 0.0f, 0.0f, 0.0f, 0.3f, 0.3f, 0.0f, 0.0f};
  const std::vector<int64_t> load = {4, 0, 1, 0};  // one copy dropped
  const RoutingStatsSummary r = summarize_routing(load, Tensor::from_vector(s, {3, 4}), 2, 1);
  EXPECT_EQ(r.load, load);
  EXPECT_EQ(r.max_load, 4);
  EXPECT_EQ(r.min_load, 0);
  EXPECT_DOUBLE_EQ(r.mean_load, 1.5);
  EXPECT_NEAR(r.max_violation, 4.0 / 1.5 - 1.0, 1e-12);
  EXPECT_NEAR(r.dropped_fraction, 1.0 / 6.0, 1e-12);
  EXPECT_EQ(r.dead_experts, 2);
  EXPECT_NEAR(r.mean_entropy, (std::log(4.0) + 0.0 + std::log(2.0)) / 3.0, 1e-7);

  // Uniform scores over n experts: entropy log n; balanced load: violation 0, no dead experts.
  const int64_t n = 896;  // m n copies of k 8 spread evenly: 8 per expert
  const RoutingStatsSummary u =
      summarize_routing(std::vector<int64_t>(static_cast<size_t>(n), 8), Tensor::full({n, n}, 0.25f), 8, 0);
  EXPECT_NEAR(u.mean_entropy, std::log(double(n)), 1e-6);
  EXPECT_DOUBLE_EQ(u.max_violation, 0.0);
  EXPECT_EQ(u.dead_experts, 0);
  EXPECT_THROW(summarize_routing(load, Tensor::from_vector(s, {4, 3}), 2, 0), Error);
}

}  // namespace
}  // namespace myriad
