#include "model/balancing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "core/parallel.h"

namespace myriad {

namespace {

void check_qb_sizes(const char* op, int64_t m, int64_t n, int64_t k) {
  MYRIAD_REQUIRE(m >= 1 && n >= 2 && k >= 1 && k < n, kValue, op, ": need m >= 1 tokens and 1 <= k < n, got m = ", m,
                 ", n = ", n, ", k = ", k, " (alpha is the (k+1)-th largest biased score of a row)");
}

void check_finite(const char* op, const float* x, int64_t count, const char* what) {
  for (int64_t i = 0; i < count; ++i)
    MYRIAD_REQUIRE(std::isfinite(x[i]), kValue, op, ": ", what, "[", i, "] = ", x[i], " is not finite");
}

// alpha [m]: the (k+1)-th largest biased score s_tj + b_j of each token.
std::vector<float> qb_alpha(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k) {
  std::vector<float> alpha(static_cast<size_t>(m));
  parallel_for(m, std::max<int64_t>(1, 8192 / n), [&](int64_t t0, int64_t t1) {
    std::vector<float> row(static_cast<size_t>(n));
    std::vector<float> top(static_cast<size_t>(k + 1));
    for (int64_t t = t0; t < t1; ++t) {
      const float* st = scores + t * n;
      if (k + 1 <= 32) {
        // The k + 1 largest kept sorted (descending) while scanning the row once: for top-k routing k is
        // small and a value rarely beats the current (k+1)-th, so this is about one compare per score.
        int64_t filled = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float v = st[j] + bias[j];
          if (filled == k + 1 && !(v > top[size_t(k)])) continue;
          int64_t p = filled < k + 1 ? filled++ : k;
          for (; p > 0 && top[size_t(p - 1)] < v; --p) top[size_t(p)] = top[size_t(p - 1)];
          top[size_t(p)] = v;
        }
        alpha[size_t(t)] = top[size_t(k)];
      } else {
        for (int64_t j = 0; j < n; ++j) row[size_t(j)] = st[j] + bias[j];
        std::nth_element(row.begin(), row.begin() + k, row.end(), std::greater<float>());
        alpha[size_t(t)] = row[size_t(k)];
      }
    }
  });
  return alpha;
}

// The margin of (t, j): the unbiased score against the biased threshold (see the NOTE in balancing.h).
inline float qb_margin(const float* scores, const std::vector<float>& alpha, int64_t n, int64_t t, int64_t j) {
  return scores[t * n + j] - alpha[size_t(t)];
}

std::vector<float> centred(const std::vector<double>& raw) {
  const double mean = std::accumulate(raw.begin(), raw.end(), 0.0) / double(raw.size());
  std::vector<float> b(raw.size());
  for (size_t j = 0; j < raw.size(); ++j) b[j] = float(raw[j] - mean);
  return b;
}

// Bin of margin v in a column with range [lo, hi] and inv_w = bins / (hi - lo); -1 when above the range.
// Below the range counts in bin 0. Monotone in v, so the k-th largest margin lands in the bin that the counts
// point to.
inline int64_t qb_bin(double lo, double hi, double inv_w, int64_t bins, double v) {
  if (v > hi) return -1;
  const double x = std::floor((v - lo) * inv_w);
  return x < 0 ? 0 : std::min(int64_t(x), bins - 1);
}

// Bin of column j holding the (rank)-th largest margin (1-based), or -1 when the rank lies above the range
// (within `above`), or h.bins when it lies below everything counted.
int64_t qb_rank_bin(const QbHistogram& h, int64_t j, int64_t rank) {
  int64_t seen = h.above[size_t(j)];
  if (seen >= rank) return -1;
  for (int64_t i = h.bins - 1; i >= 0; --i) {
    seen += h.counts[size_t(j * h.bins + i)];
    if (seen >= rank) return i;
  }
  return h.bins;
}

}  // namespace

int64_t qb_quantile_rank(int64_t m, int64_t n, int64_t k) {
  check_qb_sizes("qb_quantile_rank", m, n, k);
  return m * k / n;  // floor; < m because k < n
}

std::vector<float> qb_estimate_bias(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k) {
  check_qb_sizes("qb_estimate_bias", m, n, k);
  check_finite("qb_estimate_bias", scores, m * n, "scores");
  check_finite("qb_estimate_bias", bias, n, "bias");
  const std::vector<float> alpha = qb_alpha(scores, bias, m, n, k);
  const int64_t q = qb_quantile_rank(m, n, k);
  // Per column, a min-heap of the q + 1 largest margins seen, filled row by row (contiguous reads of the
  // scores; after the first q + 1 tokens a margin that does not beat the column's heap top costs one compare).
  // Its top at the end is the (q + 1)-th largest margin. Each thread owns a range of columns.
  std::vector<double> raw(static_cast<size_t>(n));
  const int64_t h = q + 1;
  parallel_for(n, 1, [&](int64_t j0, int64_t j1) {
    std::vector<float> heaps(static_cast<size_t>((j1 - j0) * h));  // [j1 - j0, q + 1]
    for (int64_t t = 0; t < m; ++t) {
      const float a = alpha[size_t(t)];
      const float* st = scores + t * n;
      for (int64_t j = j0; j < j1; ++j) {
        float* hp = heaps.data() + (j - j0) * h;
        const float v = st[j] - a;  // the margin (qb_margin)
        if (t < h) {
          hp[t] = v;
          std::push_heap(hp, hp + t + 1, std::greater<float>());
        } else if (v > hp[0]) {
          std::pop_heap(hp, hp + h, std::greater<float>());
          hp[h - 1] = v;
          std::push_heap(hp, hp + h, std::greater<float>());
        }
      }
    }
    for (int64_t j = j0; j < j1; ++j) raw[size_t(j)] = -double(heaps[size_t((j - j0) * h)]);  // b^_j
  });
  return centred(raw);
}

QbHistogram qb_histogram_init(const float* bias, int64_t n, int64_t bins) {
  MYRIAD_REQUIRE(n >= 2 && bins >= 1, kValue, "qb_histogram_init: need n >= 2 experts and bins >= 1, got n = ", n,
                 ", bins = ", bins);
  check_finite("qb_histogram_init", bias, n, "bias");
  const double bmax = *std::max_element(bias, bias + n), bmin = *std::min_element(bias, bias + n);
  QbHistogram h;
  h.n = n;
  h.bins = bins;
  h.lo.assign(static_cast<size_t>(n), -1.0 - bmax);
  h.hi.assign(static_cast<size_t>(n), 1.0 - bmin);
  h.above.assign(static_cast<size_t>(n), 0);
  h.counts.assign(static_cast<size_t>(n * bins), 0);
  return h;
}

void qb_histogram_add(QbHistogram& h, const float* scores, const float* bias, int64_t m, int64_t k) {
  const int64_t n = h.n;
  check_qb_sizes("qb_histogram_add", m, n, k);
  check_finite("qb_histogram_add", scores, m * n, "scores");
  check_finite("qb_histogram_add", bias, n, "bias");
  const std::vector<float> alpha = qb_alpha(scores, bias, m, n, k);
  // Columns are independent: each thread owns a range of columns (no shared counters).
  std::vector<double> inv_w(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) inv_w[size_t(j)] = double(h.bins) / (h.hi[size_t(j)] - h.lo[size_t(j)]);
  parallel_for(n, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t t = 0; t < m; ++t)  // row segments are contiguous reads
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t i = qb_bin(h.lo[size_t(j)], h.hi[size_t(j)], inv_w[size_t(j)], h.bins,
                                 double(qb_margin(scores, alpha, n, t, j)));
        if (i < 0)
          ++h.above[size_t(j)];
        else
          ++h.counts[size_t(j * h.bins + i)];
      }
  });
  h.tokens += m;
}

std::vector<float> qb_bias_from_histogram(const QbHistogram& h, int64_t k) {
  const int64_t q = qb_quantile_rank(h.tokens, h.n, k);
  std::vector<double> raw(static_cast<size_t>(h.n));
  for (int64_t j = 0; j < h.n; ++j) {
    const double lo = h.lo[size_t(j)], hi = h.hi[size_t(j)], w = (hi - lo) / double(h.bins);
    const int64_t i = qb_rank_bin(h, j, q + 1);
    const double v = i < 0 ? hi : i >= h.bins ? lo : lo + (double(i) + 0.5) * w;
    raw[size_t(j)] = -v;
  }
  return centred(raw);
}

QbHistogram qb_histogram_refine(const QbHistogram& h, int64_t k) {
  const int64_t q = qb_quantile_rank(h.tokens, h.n, k);
  QbHistogram r;
  r.n = h.n;
  r.bins = h.bins;
  r.lo.resize(static_cast<size_t>(h.n));
  r.hi.resize(static_cast<size_t>(h.n));
  r.above.assign(static_cast<size_t>(h.n), 0);
  r.counts.assign(static_cast<size_t>(h.n * h.bins), 0);
  for (int64_t j = 0; j < h.n; ++j) {
    const double lo = h.lo[size_t(j)], hi = h.hi[size_t(j)], w = (hi - lo) / double(h.bins);
    // Above the range: the top bin; below everything counted: bin 0.
    const int64_t found = qb_rank_bin(h, j, q + 1);
    const int64_t i = found < 0 ? h.bins - 1 : found >= h.bins ? 0 : found;
    r.lo[size_t(j)] = lo + double(i) * w;
    r.hi[size_t(j)] = i == h.bins - 1 ? hi : lo + double(i + 1) * w;
  }
  return r;
}

std::vector<float> qb_estimate_bias_histogram(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k,
                                              int64_t bins, int passes) {
  MYRIAD_REQUIRE(passes >= 1, kValue, "qb_estimate_bias_histogram: passes = ", passes, " must be >= 1");
  QbHistogram h = qb_histogram_init(bias, n, bins);
  qb_histogram_add(h, scores, bias, m, k);
  for (int p = 1; p < passes; ++p) {
    h = qb_histogram_refine(h, k);
    qb_histogram_add(h, scores, bias, m, k);
  }
  return qb_bias_from_histogram(h, k);
}

namespace {

// Order-preserving key of a float (larger float, larger key; NaN excluded by the callers' finiteness checks).
inline uint32_t qb_key(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline float qb_key_value(uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}
inline int qb_radix_shift(int pass) {
  return 24 - 8 * pass;
}

}  // namespace

QbRadixSelect qb_radix_init(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k) {
  MYRIAD_REQUIRE(m >= 0 && n >= 2 && k >= 1 && k < n, kValue,
                 "qb_radix_init: need m >= 0 tokens and 1 <= k < n, got m = ", m, ", n = ", n, ", k = ", k);
  check_finite("qb_radix_init", scores, m * n, "scores");
  check_finite("qb_radix_init", bias, n, "bias");
  QbRadixSelect s;
  s.n = n;
  s.k = k;
  s.tokens = m;
  s.scores = scores;
  if (m > 0) s.alpha = qb_alpha(scores, bias, m, n, k);
  s.prefix.assign(static_cast<size_t>(n), 0);
  s.rank.assign(static_cast<size_t>(n), 0);
  s.candidates.resize(static_cast<size_t>(n));
  return s;
}

std::vector<int64_t> qb_radix_counts(const QbRadixSelect& s) {
  MYRIAD_REQUIRE(s.pass < kQbRadixPasses, kValue, "qb_radix_counts: all ", kQbRadixPasses, " passes are done");
  const int64_t n = s.n, m = s.tokens;
  std::vector<int64_t> counts(static_cast<size_t>(n * kQbRadixBins), 0);
  const int shift = qb_radix_shift(s.pass);
  parallel_for(n, 1, [&](int64_t j0, int64_t j1) {
    if (s.pass == 0) {
      for (int64_t t = 0; t < m; ++t)  // row segments: contiguous reads
        for (int64_t j = j0; j < j1; ++j)
          ++counts[size_t(j * kQbRadixBins + (qb_key(qb_margin(s.scores, s.alpha, n, t, j)) >> shift))];
    } else {
      for (int64_t j = j0; j < j1; ++j)
        for (uint32_t key : s.candidates[size_t(j)]) ++counts[size_t(j * kQbRadixBins + ((key >> shift) & 0xffu))];
    }
  });
  return counts;
}

void qb_radix_advance(QbRadixSelect& s, std::span<const int64_t> counts, int64_t total_tokens) {
  const int64_t n = s.n;
  MYRIAD_REQUIRE(s.pass < kQbRadixPasses && int64_t(counts.size()) == n * kQbRadixBins, kShape,
                 "qb_radix_advance: pass ", s.pass, " of ", kQbRadixPasses, " with ", counts.size(),
                 " counts, expected ", n * kQbRadixBins);
  if (s.pass == 0) {
    const int64_t q = qb_quantile_rank(total_tokens, n, s.k);
    s.rank.assign(static_cast<size_t>(n), q + 1);
  }
  const int shift = qb_radix_shift(s.pass);
  for (int64_t j = 0; j < n; ++j) {
    // From the largest byte down: the bin where the running count reaches the rank holds the wanted key.
    int64_t seen = 0, bin = -1;
    for (int64_t i = kQbRadixBins - 1; i >= 0; --i) {
      const int64_t c = counts[size_t(j * kQbRadixBins + i)];
      if (seen + c >= s.rank[size_t(j)]) {
        bin = i;
        break;
      }
      seen += c;
    }
    MYRIAD_REQUIRE(bin >= 0, kValue, "qb_radix_advance: column ", j, " has ", seen, " margins with its prefix, fewer ",
                   "than the rank ", s.rank[size_t(j)], " (counts not summed over the same processes as tokens?)");
    s.rank[size_t(j)] -= seen;
    s.prefix[size_t(j)] |= uint32_t(bin) << shift;
  }
  // Keep only the candidates that still match (pass 1 collects them from the scores).
  const uint32_t mask = ~uint32_t(0) << shift;
  parallel_for(n, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      std::vector<uint32_t>& c = s.candidates[size_t(j)];
      const uint32_t want = s.prefix[size_t(j)];
      if (s.pass == 0) {
        for (int64_t t = 0; t < s.tokens; ++t) {
          const uint32_t key = qb_key(qb_margin(s.scores, s.alpha, n, t, j));
          if ((key & mask) == want) c.push_back(key);
        }
      } else {
        c.erase(std::remove_if(c.begin(), c.end(), [&](uint32_t key) { return (key & mask) != want; }), c.end());
      }
    }
  });
  ++s.pass;
}

std::vector<float> qb_radix_bias(const QbRadixSelect& s) {
  MYRIAD_REQUIRE(s.pass == kQbRadixPasses, kValue, "qb_radix_bias: ", s.pass, " of ", kQbRadixPasses, " passes done");
  std::vector<double> raw(static_cast<size_t>(s.n));
  for (int64_t j = 0; j < s.n; ++j) raw[size_t(j)] = -double(qb_key_value(s.prefix[size_t(j)]));  // b^_j
  return centred(raw);
}

std::vector<float> qb_estimate_bias_radix(const float* scores, const float* bias, int64_t m, int64_t n, int64_t k) {
  check_qb_sizes("qb_estimate_bias_radix", m, n, k);
  QbRadixSelect s = qb_radix_init(scores, bias, m, n, k);
  for (int p = 0; p < kQbRadixPasses; ++p) qb_radix_advance(s, qb_radix_counts(s), m);
  return qb_radix_bias(s);
}

void sign_update(std::span<float> bias, std::span<const int64_t> load, float gamma) {
  MYRIAD_REQUIRE(bias.size() == load.size() && !bias.empty(), kShape, "sign_update: bias has ", bias.size(),
                 " entries and load ", load.size(), "; they must agree (one per expert)");
  const double mean = double(std::accumulate(load.begin(), load.end(), int64_t(0))) / double(load.size());
  for (size_t j = 0; j < bias.size(); ++j) {
    const double d = double(load[j]) - mean;
    bias[j] -= gamma * float((d > 0) - (d < 0));
  }
}

ag::Var aux_balance_loss(const ag::Var& scores, const Tensor& idx, float coef) {
  const Tensor& sv = scores.value();
  MYRIAD_REQUIRE(sv.device() == Device::kCPU && idx.device() == Device::kCPU, kUnsupported,
                 "aux_balance_loss: cpu tensors only");
  MYRIAD_REQUIRE(sv.ndim() == 2 && sv.dtype() == DType::kF32 && idx.ndim() == 2 && idx.dtype() == DType::kI32 &&
                     idx.shape()[0] == sv.shape()[0],
                 kShape, "aux_balance_loss: scores ", shape_str(sv.shape()), " (F32 [T, E]) and indices ",
                 shape_str(idx.shape()), " (I32 [T, k]) do not agree");
  const int64_t T = sv.shape()[0], E = sv.shape()[1], k = idx.shape()[1];
  MYRIAD_REQUIRE(T >= 1 && E >= 1 && k >= 1, kShape, "aux_balance_loss: empty scores ", shape_str(sv.shape()),
                 " or indices ", shape_str(idx.shape()));
  const Tensor sc = sv.contiguous(), ic = idx.contiguous();
  const float* s = sc.data<float>();
  const int32_t* id = ic.data<int32_t>();
  // f_e: fraction of the T k copies routed to e (constant; -1 = dropped copy).
  std::vector<double> f(static_cast<size_t>(E), 0.0);
  for (int64_t i = 0; i < T * k; ++i) {
    MYRIAD_REQUIRE(id[i] >= -1 && id[i] < E, kValue, "aux_balance_loss: expert ", id[i], " outside [-1, ", E, ")");
    if (id[i] >= 0) f[size_t(id[i])] += 1.0 / double(T * k);
  }
  // P_e = mean_t s_te / S_t. loss = coef E sum_e f_e P_e = coef E / T sum_t (sum_e f_e s_te) / S_t.
  std::vector<double> rowsum(static_cast<size_t>(T)), fdot(static_cast<size_t>(T));  // S_t, sum_e f_e s_te
  double acc = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    double S = 0.0, F = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      S += s[t * E + e];
      F += f[size_t(e)] * s[t * E + e];
    }
    MYRIAD_REQUIRE(S > 0.0, kValue, "aux_balance_loss: scores of token ", t, " sum to ", S, "; they must be > 0");
    rowsum[size_t(t)] = S;
    fdot[size_t(t)] = F;
    acc += F / S;
  }
  const double c = double(coef) * double(E) / double(T);
  Tensor y = Tensor::empty({});
  y.data<float>()[0] = float(c * acc);
  const bool needs = ag::needs_grad({&scores});
  ag::Var out(y, needs);
  if (needs) {
    auto oi = out.impl();
    // d loss / d s_te = c (f_e - F_t / S_t) / S_t  (quotient rule on F_t / S_t).
    ag::Tape::current().record("aux_balance_loss", {oi}, [scores, oi, f, rowsum, fdot, c, T, E]() {
      const double d = double(oi->grad.data<float>()[0]) * c;
      float* ds = scores.grad_buffer().data<float>();
      for (int64_t t = 0; t < T; ++t) {
        const double S = rowsum[size_t(t)], r = fdot[size_t(t)] / S;
        for (int64_t e = 0; e < E; ++e) ds[t * E + e] += float(d * (f[size_t(e)] - r) / S);
      }
    });
  }
  return out;
}

int64_t expert_capacity(double cf, int64_t m, int64_t n, int64_t k) {
  MYRIAD_REQUIRE(cf > 0 && std::isfinite(cf) && m >= 0 && n >= 1 && k >= 1, kValue,
                 "expert_capacity: need a finite capacity factor > 0, m >= 0, n >= 1, k >= 1; got cf = ", cf,
                 ", m = ", m, ", n = ", n, ", k = ", k);
  const double x = cf * double(m) * double(k) / double(n);
  if (x >= double(m)) return m;  // an expert holds at most one copy per token
  const double r = std::round(x);
  if (std::abs(x - r) <= 1e-9 * std::max(1.0, x)) return int64_t(r);
  return int64_t(std::ceil(x));
}

CapacityRouting route_with_capacity(const float* biased, int64_t m, int64_t n, int64_t k, double cf) {
  MYRIAD_REQUIRE(m >= 0 && n >= 1 && k >= 1 && k <= n, kValue, "route_with_capacity: need 1 <= k <= n, got n = ", n,
                 ", k = ", k, " (m = ", m, ")");
  check_finite("route_with_capacity", biased, m * n, "biased");
  CapacityRouting r;
  r.capacity = expert_capacity(cf, m, n, k);
  r.idx = Tensor::empty({m, k}, DType::kI32);
  r.load.assign(static_cast<size_t>(n), 0);
  int32_t* idx = r.idx.data<int32_t>();
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::vector<int64_t> overflow;  // slots of this token whose expert was full
  for (int64_t t = 0; t < m; ++t) {
    const float* x = biased + t * n;
    auto better = [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
    overflow.clear();
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      if (r.load[size_t(e)] < r.capacity) {
        idx[t * k + j] = e;
        ++r.load[size_t(e)];
      } else {
        overflow.push_back(j);
      }
    }
    if (overflow.empty()) continue;
    // The rest of the row in order, best first; experts of ranks >= k are never among the token's choices.
    std::sort(order.begin() + k, order.end(), better);
    int64_t next = k;
    for (int64_t j : overflow) {
      while (next < n && r.load[size_t(order[size_t(next)])] >= r.capacity) ++next;
      if (next < n) {
        const int32_t e = order[size_t(next++)];
        idx[t * k + j] = e;
        ++r.load[size_t(e)];
        ++r.rerouted;
      } else {
        idx[t * k + j] = -1;
        ++r.dropped;
      }
    }
  }
  return r;
}

RoutingStatsSummary summarize_routing(std::span<const int64_t> load, const Tensor& scores, int64_t k, int64_t dropped) {
  MYRIAD_REQUIRE(scores.device() == Device::kCPU && scores.dtype() == DType::kF32 && scores.ndim() == 2 &&
                     scores.shape()[1] == int64_t(load.size()) && !load.empty(),
                 kShape, "summarize_routing: scores ", shape_str(scores.shape()), " ", dtype_name(scores.dtype()),
                 " must be cpu F32 [m, n] with n = ", load.size(), " (the load's size)");
  MYRIAD_REQUIRE(k >= 1 && dropped >= 0, kValue, "summarize_routing: need k >= 1 and dropped >= 0, got k = ", k,
                 ", dropped = ", dropped);
  const int64_t m = scores.shape()[0], n = scores.shape()[1];
  RoutingStatsSummary r;
  r.load.assign(load.begin(), load.end());
  r.max_load = *std::max_element(load.begin(), load.end());
  r.min_load = *std::min_element(load.begin(), load.end());
  r.dead_experts = std::count(load.begin(), load.end(), int64_t(0));
  r.mean_load = double(m) * double(k) / double(n);
  r.max_violation = m > 0 ? double(r.max_load) / r.mean_load - 1.0 : 0.0;
  r.dropped_fraction = m > 0 ? double(dropped) / (double(m) * double(k)) : 0.0;
  const Tensor sc = scores.contiguous();
  const float* s = sc.data<float>();
  double total = 0.0;
  for (int64_t t = 0; t < m; ++t) {
    double S = 0.0;
    for (int64_t j = 0; j < n; ++j) S += s[t * n + j];
    MYRIAD_REQUIRE(S > 0.0, kValue, "summarize_routing: scores of token ", t, " sum to ", S, "; they must be > 0");
    double h = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double p = s[t * n + j] / S;
      if (p > 0) h -= p * std::log(p);
    }
    total += h;
  }
  r.mean_entropy = m > 0 ? total / double(m) : 0.0;
  return r;
}

}  // namespace myriad
