// Sequence parallelism (dist/sequence_parallel.h) against one process, on every world size the test runs under
// (1, 2, 4 ranks; sp = the world): one sequence of 96 tokens, rank r running tokens [r T, (r + 1) T) of it with
// the sequence-parallel context (T = 96 / ranks: 48 and 24-token shards end inside a 64-token KDA chunk and leave
// the short conv its halo to fetch), against the whole sequence in one forward, which every rank computes. The
// model has KDA and MLA layers (tiny.json: layer 4 is MLA, so its keys span the earlier shards).
//   - Hidden states of the shard's rows within 1e-4 (f32 rounding of O(1) values through 4 layers, ~1e-6: the
//     composed KDA state is M S + S~ instead of one recurrence; a lost state, halo or latent block moves rows by
//     O(0.1)).
//   - Every parameter's gradient, summed over the ranks, within a relative L2 error of 1e-4 of the whole
//     sequence's (the backward crosses the shards through the gathers' gradients; a missing share is O(1e-2)).
// Both with dense MLA and with block-sparse MLA (blocks of 8, 2 local, top 2: a query late in the sequence chooses 2
// of up to 9 earlier blocks, from the means of latents that other shards computed).
#include "dist/sequence_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "autograd/functions.h"
#include "dist_support.h"
#include "model/transformer.h"

namespace myriad {
namespace {

void expect_shards_equal_the_whole_sequence(const ModelConfig& c) {
  Communicator& w = test::test_world();
  const int R = w.size(), r = w.rank();
  ASSERT_GT(c.num_kda_layers(), 0);
  ASSERT_GT(c.num_mla_layers(), 0);
  const int64_t T_all = 96;
  if (T_all % R) GTEST_SKIP() << "96 tokens do not split over " << R << " ranks";
  const int64_t T = T_all / R;
  Transformer model(c, ModelWeights::random(c, 21));
  std::vector<int64_t> ids(static_cast<size_t>(T_all));
  std::mt19937_64 rng(5);
  for (auto& t : ids) t = int64_t(rng() % uint64_t(c.vocab_size));
  const Tensor tokens = Tensor::from_vector(ids, {T_all});

  model.weights().zero_grad();
  const ForwardResult whole = model.forward(tokens, Tensor());
  ag::backward(ag::sum(whole.hidden));
  std::map<std::string, std::vector<float>> whole_grad;
  for (const auto& [name, v] : model.weights().all())
    if (v.has_grad()) whole_grad[name] = v.grad().to_vector();

  model.weights().zero_grad();
  SequenceParallelContext ctx(w, c, T);
  ForwardOptions opt;
  opt.sequence = &ctx;
  const ForwardResult mine = model.forward(tokens.slice(0, r * T, (r + 1) * T).contiguous(), Tensor(), opt);
  const std::vector<float> full = whole.hidden.value().to_vector(), got = mine.hidden.value().to_vector();
  const int64_t D = c.hidden_size;
  double worst = 0;
  for (int64_t i = 0; i < T * D; ++i)
    worst = std::max(worst, double(std::abs(got[size_t(i)] - full[size_t(r * T * D + i)])));
  EXPECT_LT(worst, 1e-4) << "rank " << r << ": largest hidden-state difference";

  ag::backward(ag::sum(mine.hidden));
  for (const auto& [name, g] : whole_grad) {
    const ag::Var& v = model.weights().at(name);
    std::vector<float> sum = v.has_grad() ? v.grad().to_vector() : std::vector<float>(g.size(), 0.0f);
    w.all_reduce_span(std::span<float>(sum));
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      num += (sum[i] - g[i]) * double(sum[i] - g[i]);
      den += double(g[i]) * g[i];
    }
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-4) << name;
  }
}

TEST(SequenceParallel, ShardsSideBySideEqualTheWholeSequenceForwardAndBackward) {
  expect_shards_equal_the_whole_sequence(
      load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr));
}

TEST(SequenceParallel, BlockSparseMlaShardsEqualTheWholeSequence) {
  ModelConfig c = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
  c.mla_sparse_attention = SparseMlaConfig{8, 2, 16};
  expect_shards_equal_the_whole_sequence(c);
}

}  // namespace
}  // namespace myriad
