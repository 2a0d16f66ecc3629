// Routing statistics over the ranks (dist/routing_sync.h), on every world size the test runs under: each rank
// holds an uneven block of one batch's router scores (rank 0 may hold none), and the batch is known to every
// rank (drawn from one seed), so the single-process answer is computed locally as the reference.
//   - QB's bias from the summed radix counts equals qb_estimate_bias on the whole batch bit for bit (the
//     exactness the trainer relies on: every rank, and a one-process run, apply the same b).
//   - Summed loads and counts, and the global summary: loads exact, the mean entropy within 1e-12 relative
//     (double sums in another order).
#include "dist/routing_sync.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "dist_support.h"

namespace myriad {
namespace {

struct Batch {
  int64_t m, n, k;
  std::vector<float> scores, bias;
};

Batch make_batch(int64_t m, int64_t n, int64_t k, uint64_t seed) {
  Batch b{m, n, k, std::vector<float>(static_cast<size_t>(m * n)), std::vector<float>(static_cast<size_t>(n))};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < n; ++j) b.scores[size_t(t * n + j)] = 1.0f / (1.0f + std::exp(-(0.1f * float(j) + d(rng))));
  for (float& x : b.bias) x = 0.3f * d(rng);
  return b;
}

// Rank p's rows: [start(p), start(p + 1)); rank 0 holds none when there are several ranks.
int64_t block_start(int p, int R, int64_t m) {
  if (R == 1) return p == 0 ? 0 : m;
  if (p == 0) return 0;
  return (m * (p - 1)) / (R - 1);
}

TEST(RoutingSync, QuantileBiasAcrossRanksIsBitIdenticalToOneProcess) {
  Communicator& w = test::test_world();
  const int R = w.size(), r = w.rank();
  for (const uint64_t seed : {1u, 2u}) {
    const Batch b = make_batch(997, 16, 2, seed);
    const int64_t t0 = block_start(r, R, b.m), t1 = block_start(r + 1, R, b.m);
    Tensor mine = Tensor::empty({t1 - t0, b.n});
    std::copy(b.scores.begin() + t0 * b.n, b.scores.begin() + t1 * b.n, mine.data<float>());
    const std::vector<float> got = qb_estimate_bias_across(w, mine, b.bias.data(), b.k, b.m);
    const std::vector<float> want = qb_estimate_bias(b.scores.data(), b.bias.data(), b.m, b.n, b.k);
    EXPECT_EQ(got, want) << "seed " << seed << " on " << R << " ranks";
  }
}

TEST(RoutingSync, LoadsAndSummaryAreTheWholeBatchs) {
  Communicator& w = test::test_world();
  const int R = w.size(), r = w.rank();
  const Batch b = make_batch(301, 8, 2, 5);
  const int64_t t0 = block_start(r, R, b.m), t1 = block_start(r + 1, R, b.m);
  // A load pattern per rank that depends on its rows: expert (t mod n) gets two copies of token t.
  auto load_of = [&](int64_t a, int64_t z) {
    std::vector<int64_t> load(static_cast<size_t>(b.n), 0);
    for (int64_t t = a; t < z; ++t) load[size_t(t % b.n)] += 2;
    return load;
  };
  RoutingStats rs;
  rs.layer = 1;
  rs.load = load_of(t0, t1);
  rs.scores = Tensor::empty({t1 - t0, b.n});
  std::copy(b.scores.begin() + t0 * b.n, b.scores.begin() + t1 * b.n, rs.scores.data<float>());
  rs.copies = (t1 - t0) * b.k;
  rs.dropped = r;  // rank r dropped r copies
  const int64_t total = all_reduce_routing(w, rs);
  EXPECT_EQ(total, b.m);
  EXPECT_EQ(rs.load, load_of(0, b.m));
  EXPECT_EQ(rs.copies, b.m * b.k);
  EXPECT_EQ(rs.dropped, int64_t(R) * (R - 1) / 2);
  const RoutingStatsSummary got = summarize_routing_across(w, rs, b.k, total);
  Tensor all = Tensor::from_vector(b.scores, {b.m, b.n});
  const RoutingStatsSummary want = summarize_routing(load_of(0, b.m), all, b.k, rs.dropped);
  EXPECT_EQ(got.max_load, want.max_load);
  EXPECT_EQ(got.dead_experts, want.dead_experts);
  EXPECT_DOUBLE_EQ(got.max_violation, want.max_violation);
  EXPECT_DOUBLE_EQ(got.dropped_fraction, want.dropped_fraction);
  EXPECT_NEAR(got.mean_entropy, want.mean_entropy, 1e-12 * want.mean_entropy);
}

}  // namespace
}  // namespace myriad
