// ParallelDims validation (one error naming the flag and the values) and the rank layout of the groups.
#include "dist/parallel_dims.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "dist_support.h"
#include "model/config.h"

namespace myriad {
namespace {

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

std::string error_of(const ParallelDims& d, int world, const ModelConfig& c) {
  try {
    validate_parallel_dims(d, world, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelDims, ValidationNamesTheFlagAndTheValues) {
  const ModelConfig c = tiny();
  ASSERT_EQ(c.num_experts % 2, 0);
  EXPECT_EQ(error_of({2, 1, 1}, 2, c), "");
  EXPECT_EQ(error_of({1, 2, 1}, 2, c), "");
  EXPECT_EQ(error_of({2, 2, 1}, 4, c), "");
  EXPECT_NE(error_of({2, 1, 1}, 4, c).find("--dp 2 x --ep 1 x --sp 1 = 2 ranks, but this job has 4"),
            std::string::npos);
  EXPECT_NE(error_of({0, 1, 1}, 1, c).find("--dp 0: must be at least 1"), std::string::npos);
  const std::string ep3 = error_of({1, 3, 1}, 3, c);
  EXPECT_NE(ep3.find("--ep 3 does not divide num_experts " + std::to_string(c.num_experts)), std::string::npos) << ep3;
  EXPECT_EQ(error_of({1, 1, 2}, 2, c), "");  // sequence parallelism: the trainer checks the stages' lengths
}

// dp x ep x sp on 4 ranks when the world has 4 (dp 1 x ep 2 x sp 2, dp 2 x ep 1 x sp 2): the sp group holds the
// consecutive ranks of one sequence in token order, the expert replicas every rank with the same e.
TEST(ParallelDims, SequenceAndExpertReplicaGroups) {
  Communicator& w = test::test_world();
  if (w.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const ParallelDims dims : {ParallelDims{1, 2, 2}, ParallelDims{2, 1, 2}}) {
    ProcessGroups g = make_process_groups(w, dims);
    EXPECT_EQ(g.s, w.rank() % 2);
    EXPECT_EQ(g.sp_group->size(), 2);
    EXPECT_EQ(g.sp_group->rank(), g.s);
    // The sp group of rank r is {r - s, r - s + 1}: the sum of its world ranks is 2 (r - s) + 1.
    EXPECT_EQ(g.sp_group->all_reduce_value(int64_t(w.rank())), 2 * int64_t(w.rank() - g.s) + 1);
    EXPECT_EQ(g.expert_replicas->size(), dims.dp * dims.sp);
    EXPECT_EQ(g.expert_replicas->rank(), g.d * dims.sp + g.s);
    // Every member of the expert replica group has this rank's e.
    EXPECT_EQ(g.expert_replicas->all_reduce_value(int64_t(g.e), ReduceOp::kMax), g.e);
    EXPECT_EQ(g.expert_replicas->all_reduce_value(int64_t(g.e), ReduceOp::kMin), g.e);
  }
}

TEST(ParallelDims, RanksMapToDataExpertAndGroupIndices) {
  Communicator& w = test::test_world();
  // Any world: dp = world, and ep 2 x dp world/2 when it divides.
  for (int ep : {1, 2}) {
    if (w.size() % ep) continue;
    const ParallelDims dims{w.size() / ep, ep, 1};
    ProcessGroups g = make_process_groups(w, dims);
    EXPECT_EQ(g.e, w.rank() % ep);
    EXPECT_EQ(g.d, w.rank() / ep);
    EXPECT_EQ(g.data_rank, w.rank());
    EXPECT_EQ(g.ep_group->size(), ep);
    EXPECT_EQ(g.ep_group->rank(), g.e);
    EXPECT_EQ(g.dp_group->size(), w.size() / ep);
    EXPECT_EQ(g.dp_group->rank(), g.d);
    EXPECT_EQ(g.data_group->size(), w.size());
    // The ep group of rank r holds the ranks with the same d: their sum is ep * d * ep + 0 + 1 + ... + ep-1.
    const int64_t ep_sum = g.ep_group->all_reduce_value(int64_t(w.rank()));
    EXPECT_EQ(ep_sum, int64_t(ep) * g.d * ep + int64_t(ep) * (ep - 1) / 2);
  }
}

TEST(ParallelDims, DifferentTextOnOneRankIsRefused) {
  Communicator& w = test::test_world();
  EXPECT_NO_THROW(require_same_on_all_ranks(w, "config", "same everywhere"));
  if (w.size() == 1) return;  // one rank cannot disagree with itself
  const std::string text = w.rank() == w.size() - 1 ? "other" : "same";
  try {
    require_same_on_all_ranks(w, "config", text);
    FAIL() << "a differing config was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(w.size() - 1) + " has a different config"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace myriad
