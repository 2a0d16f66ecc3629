// Bringing the experts to the root for a checkpoint (dist/expert_gather.h), on every world size the test runs
// under with ep = the world when it divides the experts: the root gets exactly the tensors, names and values of
// the one-process model (ModelWeights::random gives each tensor the same values whatever the shard), sorted by
// name; the other ranks get nothing. With prefixes, as for AdamW's state ("m.", "v."), and a set that lacks
// the buffers (the optimizer has none): the gathered set lacks them too.
#include "dist/expert_gather.h"

#include <gtest/gtest.h>

#include "dist/expert_parallel.h"
#include "dist_support.h"
#include "model/param_spec.h"
#include "model/weights.h"

namespace myriad {
namespace {

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

void expect_same(const NamedTensors& got, const NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    ASSERT_EQ(got[i].second.shape(), want[i].second.shape()) << got[i].first;
    const Tensor a = got[i].second.contiguous(), b = want[i].second.contiguous();
    ASSERT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * sizeof(float))) << got[i].first;
  }
}

TEST(ExpertGather, RootGetsTheOneProcessTensors) {
  Communicator& w = test::test_world();
  const ModelConfig c = tiny();
  if (c.num_experts % w.size()) GTEST_SKIP();
  ProcessGroups g = make_process_groups(w, ParallelDims{1, w.size(), 1});
  const ModelWeights mine = ModelWeights::random(c, 9, expert_shard_filter(c, g.e, w.size()));
  const ModelWeights full = ModelWeights::random(c, 9);
  NamedTensors local, want;
  for (const auto& [n, v] : mine.all()) local.emplace_back(n, v.value());
  for (const auto& [n, v] : full.all()) want.emplace_back(n, v.value());
  const NamedTensors got = gather_experts_to_root(c, local, {""}, g);
  if (!g.is_root()) {
    EXPECT_TRUE(got.empty());
    return;
  }
  expect_same(got, want);
}

TEST(ExpertGather, PrefixedStateWithoutBuffers) {
  Communicator& w = test::test_world();
  const ModelConfig c = tiny();
  if (c.num_experts % w.size()) GTEST_SKIP();
  ProcessGroups g = make_process_groups(w, ParallelDims{1, w.size(), 1});
  const ModelWeights mine = ModelWeights::random(c, 4, expert_shard_filter(c, g.e, w.size()));
  const ModelWeights full = ModelWeights::random(c, 4);
  std::vector<ParamSpec> specs = model_param_specs(c);
  auto state = [&](const ModelWeights& mw) {
    NamedTensors t;
    for (const char* prefix : {"m.", "v."})
      for (const ParamSpec& s : specs)
        if (!s.buffer && mw.contains(s.name)) t.emplace_back(prefix + s.name, mw.at(s.name).value());
    std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return t;
  };
  const NamedTensors got = gather_experts_to_root(c, state(mine), {"m.", "v."}, g);
  if (g.is_root()) expect_same(got, state(full));
}

}  // namespace
}  // namespace myriad
