// The one routing of every path (training, inference, pruning) against naive loops: the selection is the top-k
// of s + b (the bias only for noaux_tc), and the grouping lists each expert's copies in token order.
#include "model/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "model/balancing.h"

namespace myriad {
namespace {

ModelConfig routed(int64_t E, int64_t k, const char* method) {  // "noaux_tc" | "greedy"
  ModelConfig c;
  c.num_experts = E;
  c.num_experts_per_token = k;
  c.topk_method = std::string(method) == "greedy" ? TopkMethod::kGreedy : TopkMethod::kNoauxTc;
  return c;
}

TEST(Routing, SelectionIsTopKOfScoresPlusBias) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int64_t T = 37, E = 12, k = 3;
  std::vector<float> s(static_cast<size_t>(T * E)), b(static_cast<size_t>(E));
  for (float& v : s) v = u(rng);
  for (float& v : b) v = 0.5f * u(rng) - 0.25f;
  const Tensor scores = Tensor::from_vector(s, {T, E});
  for (const char* method : {"noaux_tc", "greedy"}) {
    const bool biased = std::string(method) == "noaux_tc";
    const ExpertSelection sel = select_experts(routed(E, k, method), scores, biased ? b.data() : nullptr, std::nullopt);
    ASSERT_EQ(sel.idx.shape(), (Shape{T, k}));
    EXPECT_EQ(sel.dropped, 0);
    for (int64_t t = 0; t < T; ++t) {
      // Naive: sort the experts by s + b (or s), highest first; the chosen set must be the first k.
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      auto key = [&](int32_t e) { return s[size_t(t * E + e)] + (biased ? b[size_t(e)] : 0.0f); };
      std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return key(x) > key(y); });
      std::vector<int32_t> want(order.begin(), order.begin() + k), got(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) got[size_t(j)] = sel.idx.data<int32_t>()[t * k + j];
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << method << " token " << t;
    }
  }
  // noaux_tc without its bias is refused; a capacity limit routes as route_with_capacity on s + b.
  EXPECT_THROW(select_experts(routed(E, k, "noaux_tc"), scores, nullptr, std::nullopt), Error);
  std::vector<float> sb(s);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) sb[size_t(t * E + e)] += b[size_t(e)];
  const CapacityRouting cr = route_with_capacity(sb.data(), T, E, k, 1.0);
  const ExpertSelection sel = select_experts(routed(E, k, "noaux_tc"), scores, b.data(), 1.0);
  EXPECT_EQ(sel.idx.to_vector(), cr.idx.to_vector());
  EXPECT_EQ(sel.dropped, cr.dropped);
  EXPECT_EQ(sel.rerouted, cr.rerouted);
}

TEST(Routing, GroupsListEachExpertsCopiesInTokenOrder) {
  const int64_t E = 4;
  // 5 tokens x 2 copies; -1 is a dropped copy.
  const std::vector<int32_t> id = {2, 0, 1, 2, -1, 0, 3, 2, 0, -1};
  const ExpertGroups g = group_by_expert(Tensor::from_vector(id, {5, 2}), E);
  EXPECT_EQ(g.served(), 8);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int32_t> tokens, slots;
    for (int32_t i = 0; i < int32_t(id.size()); ++i)
      if (id[size_t(i)] == e) {
        tokens.push_back(i / 2);
        slots.push_back(i);
      }
    EXPECT_EQ(g.load(e), int64_t(tokens.size())) << "expert " << e;
    EXPECT_EQ(
        std::vector<int32_t>(g.copy_token.begin() + g.start[size_t(e)], g.copy_token.begin() + g.start[size_t(e + 1)]),
        tokens);
    EXPECT_EQ(
        std::vector<int32_t>(g.copy_slot.begin() + g.start[size_t(e)], g.copy_slot.begin() + g.start[size_t(e + 1)]),
        slots);
  }
  EXPECT_THROW(group_by_expert(Tensor::from_vector(std::vector<int32_t>{0, 4}, {1, 2}), E), Error);
}

}  // namespace
}  // namespace myriad
