// Gradient reduction (dist/gradient_sync.h) on every world size the test runs under, with ep = 2 when the world
// is even (dp = world / 2) and ep = 1 otherwise. Each rank sets every gradient it holds to a closed form of
// (rank, tensor, element), so the expected sums are closed forms too:
//   - dense tensors: the sum over all ranks; routed experts: the sum over the dp group (same e);
//   - a tensor with a gradient on one rank only gets the sum (zeros elsewhere); one with none stays without;
//   - the global norm: sqrt(sum of the dense squares + every expert's squares once), within 1e-12 relative;
//   - buckets smaller than one tensor change nothing (the same sums with a 64-byte bucket);
//   - overlapped (begin_overlap, the layers reported top-down as a backward reports them, progress between):
//     the same sums; and on a real backward of the tiny model (rank-dependent tokens, the model's own markers)
//     the same reduced gradients as the blocking path (bit for bit on 2 ranks, where a + b rounds one way;
//     rel 1e-6 on more, where MPI may reduce messages of other sizes in another order).
#include "dist/gradient_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "dist/expert_parallel.h"
#include "dist_support.h"
#include "model/param_spec.h"
#include "model/transformer.h"

namespace myriad {
namespace {

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

float grad_value(int rank, size_t tensor, int64_t i) {
  return float(rank + 1) * 0.5f + float(tensor % 7) * 0.25f + float(i % 5) * 0.125f;  // exact in f32 sums
}

void run_case(int64_t bucket_bytes, bool overlapped = false) {
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
  if (overlapped) {
    sync.begin_overlap();
    for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
      sync.layer_ready(l);
      sync.progress();
    }
  }
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
TEST(GradientSync, OverlappedGivesTheSameSums) {
  run_case(int64_t(32) << 20, true);
  run_case(256, true);
}

TEST(GradientSync, OverlappedWithARealBackwardEqualsTheBlockingReduction) {
  Communicator& w = test::test_world();
  const int R = w.size();
  const ModelConfig c = tiny();
  const ParallelDims dims{R % 2 == 0 ? R / 2 : R, R % 2 == 0 ? 2 : 1, 1};
  ProcessGroups g = make_process_groups(w, dims);
  const ParamFilter keep = dims.ep > 1 ? expert_shard_filter(c, g.e, dims.ep) : ParamFilter{};
  const int64_t T = 64;
  std::vector<int64_t> ids(T + 1);
  for (int64_t t = 0; t <= T; ++t) ids[size_t(t)] = (t * 31 + 11 * w.rank() + 5) % c.vocab_size;
  const Tensor tokens = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end() - 1), {T});
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>(ids.begin() + 1, ids.end()), {T});
  std::map<std::string, std::vector<float>> reduced[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    Transformer model(c, ModelWeights::random(c, 7, keep));
    ExpertParallelDispatcher dispatcher(*g.ep_group);
    if (dims.ep > 1) model.set_moe_dispatcher(&dispatcher);
    GradientSync sync(c, model.weights(), g, 4096);  // small buckets: several per layer
    ForwardOptions fo;
    if (overlap) {
      sync.begin_overlap();
      fo.gradient_ready = &sync;
    }
    const ForwardResult r = model.forward(tokens, targets, fo);
    {
      const ag::BackwardProgressScope progress([&sync] { sync.progress(); });
      ag::backward(r.loss);
    }
    if (overlap && R > 1) {
      EXPECT_GT(sync.overlapped_seconds(), 0.0) << "no layer was started inside the backward";
    }
    sync.all_reduce();
    for (const auto& [name, v] : model.weights().all())
      if (v.has_grad()) reduced[overlap][name] = v.grad().to_vector();
  }
  ASSERT_EQ(reduced[0].size(), reduced[1].size());
  for (const auto& [name, want] : reduced[0]) {
    ASSERT_TRUE(reduced[1].count(name)) << name;
    const std::vector<float>& got = reduced[1][name];
    if (R <= 2) {
      EXPECT_EQ(got, want) << name;
      continue;
    }
    // Four f32 addends in another order: a few ulps of the largest partial sum, which cancellation can make far
    // larger than the element itself, hence relative to the tensor's largest element.
    float scale = 0;
    for (float x : want) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-6 * double(scale)) << name << " element " << i;
  }
}

}  // namespace
}  // namespace myriad
