// Gradient reduction (dist/gradient_sync.h) on every world size the test runs under, with ep = 2 when the world
// is even (dp = world / 2) and ep = 1 otherwise. Each rank sets every gradient it holds to a closed form of
// (rank, tensor, element), so the expected sums are closed forms too:
//   - dense tensors: the sum over all ranks; routed experts: the sum over the dp group (same e);
//   - a tensor with a gradient on one rank only gets the sum (zeros elsewhere); one with none stays without;
//   - the global norm: sqrt(sum of the dense squares + every expert's squares once), within 1e-12 relative;
//   - buckets smaller than one tensor change nothing (the same sums with a 64-byte bucket).
#include "dist/gradient_sync.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dist/expert_parallel.h"
#include "dist_support.h"
#include "model/param_spec.h"

namespace myriad {
namespace {

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

float grad_value(int rank, size_t tensor, int64_t i) {
  return float(rank + 1) * 0.5f + float(tensor % 7) * 0.25f + float(i % 5) * 0.125f;  // exact in f32 sums
}

void run_case(int64_t bucket_bytes) {
  Communicator& w = test::test_world();
  const int R = w.size();
  const ModelConfig c = tiny();
  const ParallelDims dims{R % 2 == 0 ? R / 2 : R, R % 2 == 0 ? 2 : 1, 1};
  ProcessGroups g = make_process_groups(w, dims);
  ModelWeights weights = ModelWeights::random(c, 3, dims.ep > 1 ? expert_shard_filter(c, g.e, dims.ep) : ParamFilter{});
  // Give every held trainable tensor a gradient, except: the first dense one only on rank 0 (when there are
  // several ranks); the second dense one on no rank.
  const std::vector<ParamSpec> specs = model_param_specs(c);
  std::vector<std::string> dense_names;
  for (const ParamSpec& s : specs)
    if (!s.buffer && s.expert < 0) dense_names.push_back(s.name);
  ASSERT_GE(dense_names.size(), 2u);
  const std::string only_root = dense_names[0], nowhere = dense_names[1];
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const ParamSpec& s = specs[ti];
    if (s.buffer || !weights.contains(s.name) || s.name == nowhere) continue;
    if (s.name == only_root && w.rank() != 0) continue;
    Tensor& gb = weights.at(s.name).grad_buffer();
    for (int64_t i = 0; i < gb.numel(); ++i) gb.data<float>()[i] = grad_value(w.rank(), ti, i);
  }
  GradientSync sync(c, weights, g, bucket_bytes);
  sync.all_reduce();
  double want_ss = 0;
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const ParamSpec& s = specs[ti];
    if (s.buffer) continue;
    // The ranks whose values are summed into this tensor: all (dense), or those with this rank's e (experts).
    std::vector<int> ranks;
    for (int p = 0; p < R; ++p) {
      const int e_p = (p / dims.sp) % dims.ep;
      const int owner = s.expert < 0 ? -1 : int(s.expert / (c.num_experts / dims.ep));
      if (s.expert >= 0 && e_p != owner) continue;
      if (s.name == only_root && p != 0) continue;
      ranks.push_back(p);
    }
    for (int64_t i = 0; i < s.numel(); ++i) {
      double v = 0;
      for (int p : ranks) v += grad_value(p, ti, i);
      if (s.name != nowhere) want_ss += v * v;  // every tensor once (each expert on its owner)
      if (!weights.contains(s.name)) continue;
      const ag::Var& var = weights.at(s.name);
      if (s.name == nowhere) {
        ASSERT_FALSE(var.has_grad()) << s.name << " had no gradient anywhere";
        break;
      }
      ASSERT_TRUE(var.has_grad()) << s.name;
      ASSERT_EQ(double(var.grad().data<float>()[i]), v) << s.name << " element " << i;
    }
  }
  EXPECT_NEAR(sync.grad_norm(), std::sqrt(want_ss), 1e-12 * std::sqrt(want_ss));
}

TEST(GradientSync, SumsDenseOverTheWorldAndExpertsOverDp) {
  run_case(int64_t(32) << 20);
}
TEST(GradientSync, TinyBucketsGiveTheSameSums) {
  run_case(64);
}

}  // namespace
}  // namespace myriad
