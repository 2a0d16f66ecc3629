// Expert parallelism against one process, on every world size the test runs under (1, 2, 4 ranks; ep = the
// world): rank r holds the experts it owns and its own tokens; the reference is the full model with the local
// dispatcher, which every rank can compute for every rank's tokens (they are seeded by rank).
//   - The dispatched rows: each local expert receives exactly the rows the local dispatcher gives that expert
//     over the concatenation of all ranks' tokens (rank-major), bit for bit.
//   - The MoE layer forward and backward: outputs and input gradients equal the full model's on this rank's
//     tokens alone bit for bit (each source rank's copies are multiplied as their own piece: the products a
//     process running those tokens alone computes). The owned experts' weight gradients, summed over every
//     rank's tokens, within 1e-5 of the largest value: the same products, summed over the ranks in another
//     order than the reference's, which moves the last bits.
#include "dist/expert_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autograd/functions.h"
#include "dist_support.h"
#include "model/config.h"
#include "model/routing.h"
#include "model/transformer.h"

namespace myriad {
namespace {

using ag::Var;

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

Tensor random_tensor(Shape shape, uint64_t seed, float scale) {
  Tensor t = Tensor::empty(shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(rng);
  return t;
}

int64_t first_moe_layer(const ModelConfig& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe_layer(l)) return l;
  return -1;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::fabs(t.data<float>()[i])));
  return m;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double tol = 1e-5 * std::max(max_abs(want), 1e-6);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i)
    worst = std::max(worst, double(std::fabs(got.data<float>()[i] - want.data<float>()[i])));
  EXPECT_LE(worst, tol) << what << ": worst difference " << worst << " (largest value " << max_abs(want) << ")";
}

TEST(ExpertParallel, EachExpertReceivesTheRowsOfTheLocalDispatcherOverAllRanksTokens) {
  Communicator& w = test::test_world();
  const int R = w.size(), r = w.rank();
  const int64_t E = 8, k = 2, L = 5;
  if (E % R) GTEST_SKIP() << R << " ranks do not divide " << E << " experts";
  // Rank p's tokens: T_p = 3 + 2p rows, a top-k selection drawn from its seed (some experts get nothing).
  auto rank_data = [&](int p) {
    const int64_t T = 3 + 2 * p;
    std::mt19937_64 rng(uint64_t(100 + p));
    std::vector<int32_t> idx(static_cast<size_t>(T * k));
    for (int64_t t = 0; t < T; ++t) {
      const int32_t a = int32_t(rng() % E);
      idx[size_t(t * k)] = a;
      idx[size_t(t * k + 1)] = int32_t((a + 1 + rng() % (E - 1)) % E);
    }
    return std::pair{random_tensor({T, L}, uint64_t(7 + p), 1.0f), Tensor::from_vector(idx, {T, k})};
  };
  auto [z, idx] = rank_data(r);
  const Var weights(random_tensor({z.size(0), k}, uint64_t(50 + r), 1.0f), false);
  ExpertParallelDispatcher ep(w);
  const ExpertBatch got = ep.dispatch(Var(z, false), group_by_expert(idx, E), weights);

  // The reference: all ranks' tokens concatenated, the local dispatcher.
  std::vector<float> all_z;
  std::vector<int32_t> all_idx;
  for (int p = 0; p < R; ++p) {
    auto [zp, ip] = rank_data(p);
    all_z.insert(all_z.end(), zp.data<float>(), zp.data<float>() + zp.numel());
    all_idx.insert(all_idx.end(), ip.data<int32_t>(), ip.data<int32_t>() + ip.numel());
  }
  const int64_t T_all = int64_t(all_idx.size()) / k;
  const ExpertGroups all_groups = group_by_expert(Tensor::from_vector(all_idx, {T_all, k}), E);
  const ExpertBatch want = local_moe_dispatcher().dispatch(Var(Tensor::from_vector(all_z, {T_all, L}), false),
                                                           all_groups, Var(Tensor::zeros({T_all, k}), false));
  const MoeDispatcher::Range local = ep.local_experts(E);
  ASSERT_EQ(got.offsets.size(), size_t(local.count + 1));
  EXPECT_EQ(got.first_expert, local.first);
  for (int64_t j = 0; j < local.count; ++j) {
    const int64_t e = local.first + j;
    ASSERT_EQ(got.offsets[size_t(j + 1)] - got.offsets[size_t(j)], all_groups.load(e)) << "expert " << e;
    for (int64_t i = 0; i < all_groups.load(e) * L; ++i)
      ASSERT_EQ(got.rows.value().data<float>()[got.offsets[size_t(j)] * L + i],
                want.rows.value().data<float>()[want.offsets[size_t(e)] * L + i])
          << "expert " << e << " element " << i;
  }
}

TEST(ExpertParallel, MoeLayerForwardAndBackwardEqualOneProcess) {
  Communicator& w = test::test_world();
  const int R = w.size(), r = w.rank();
  const ModelConfig c = tiny();
  if (c.num_experts % R) GTEST_SKIP();
  const int64_t l = first_moe_layer(c), D = c.hidden_size;
  ASSERT_GE(l, 0);
  ExpertParallelDispatcher ep(w);
  Transformer sharded(c, ModelWeights::random(c, 11, expert_shard_filter(c, r, R)));
  sharded.set_moe_dispatcher(&ep);
  const Transformer full(c, ModelWeights::random(c, 11));
  auto rank_input = [&](int p) { return random_tensor({9 + 4 * p, D}, uint64_t(300 + p), 1.0f); };
  auto rank_cotangent = [&](int p) { return random_tensor({9 + 4 * p, D}, uint64_t(400 + p), 1.0f); };

  // This rank's tokens through its experts and the other ranks'.
  Var x(rank_input(r), true);
  Var y = sharded.moe_ffn(l, x, nullptr);
  ag::Tape::current().backward({{ag::sum(ag::mul(y, Var(rank_cotangent(r), false))), Tensor::full({}, 1.0f)}});

  // The reference for this rank's outputs and input gradient: the full model on this rank's tokens alone.
  Var xf(rank_input(r), true);
  Var yf = full.moe_ffn(l, xf, nullptr);
  ag::Tape::current().backward({{ag::sum(ag::mul(yf, Var(rank_cotangent(r), false))), Tensor::full({}, 1.0f)}});
  auto expect_equal = [](const Tensor& got, const Tensor& want, const char* what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << what << " element " << i;
  };
  expect_equal(y.value(), yf.value(), "moe output");
  expect_equal(x.grad(), xf.grad(), "input gradient");
  // ... and for the owned experts' gradients: the full model's over every rank's tokens (the rest of its
  // backward on other ranks' tokens accumulates into the same weights).
  for (int p = 0; p < R; ++p) {
    if (p == r) continue;
    Var xp(rank_input(p), true);
    Var yp = full.moe_ffn(l, xp, nullptr);
    ag::Tape::current().backward({{ag::sum(ag::mul(yp, Var(rank_cotangent(p), false))), Tensor::full({}, 1.0f)}});
  }
  const MoeDispatcher::Range local = ep.local_experts(c.num_experts);
  int checked = 0;
  for (const auto& [name, v] : sharded.weights().all()) {
    if (name.find(".experts.") == std::string::npos || !v.has_grad()) continue;
    expect_close(v.grad(), full.p(name).grad(), name);
    ++checked;
  }
  EXPECT_EQ(checked, 3 * local.count) << "every owned expert of the layer has a gradient";
  // The rank holds its experts only.
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const bool owned = e >= local.first && e < local.first + local.count;
    EXPECT_EQ(sharded.weights().contains(str("model.layers.", l, ".block_sparse_moe.experts.", e, ".w1.weight")),
              owned);
  }
}

}  // namespace
}  // namespace myriad
