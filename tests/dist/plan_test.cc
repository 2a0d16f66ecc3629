// The planner (dist/plan.h) against independent counts:
//   - the bf16 recipe's state, summed over the ranks, is 18 B per parameter (16 B for the gradient-less
//     buffers' missing 16): the sharding loses or duplicates nothing;
//   - the myriad-cpu recipe's weights, gradients and optimizer bytes on one rank under ep equal the bytes of the
//     tensors a rank actually allocates (ModelWeights filtered by expert_shard_filter, AdamW over them);
//   - the flagship: 64 and 256 H200s cannot hold its training state at 18 B per parameter (the floor computed
//     here from the parameter count), 1024 can, and the chosen layout is a valid one (ep divides the experts,
//     the data ranks divide the sequences, sp divides the sequence) within the usable memory;
//   - the expert all-to-all volume of a forced layout against the formula worked by hand;
//   - bad requests: one kConfig error each.
#include "dist/plan.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "dist/expert_parallel.h"
#include "model/accounting.h"
#include "model/param_spec.h"
#include "model/weights.h"
#include "train/optimizer.h"

namespace myriad {
namespace {

ModelConfig load(const char* name) {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/" + name, nullptr);
}

PlanRequest h200(int gpus, int64_t seq) {
  PlanRequest q;
  q.gpus = gpus;
  q.gpu = gpu_spec("h200");
  q.seq_len = seq;
  return q;
}

TEST(Plan, ShardedStateSumsToEighteenBytesPerParameter) {
  const ModelConfig c = load("kimi-k3.json");
  const ModelAccounting a = account_model(c);
  for (const int n : {64, 1024})
    for (const int ep : {1, 8}) {
      const PlanMemory m = plan_memory(c, h200(n, 8192), ParallelDims{n / ep, ep, 1});
      const double summed = double(n) * (m.weights + m.gradients + m.optimizer);
      const double want = 18.0 * double(a.total_params) - 16.0 * double(a.buffer_params);
      EXPECT_NEAR(summed, want, 1e-12 * want) << n << " ranks, ep " << ep;
    }
}

TEST(Plan, MyriadCpuRecipeMatchesWhatARankAllocates) {
  const ModelConfig c = load("tiny.json");
  for (const int ep : {1, 2, 4}) {
    PlanRequest q = h200(ep, 128);
    q.recipe = PlanRecipe::kMyriadCpu;
    const PlanMemory m = plan_memory(c, q, ParallelDims{1, ep, 1});
    const ModelWeights w = ModelWeights::random(c, 1, ep > 1 ? expert_shard_filter(c, 0, ep) : ParamFilter{});
    const AdamW opt(c, w, AdamWConfig{});
    double weights = 0, trainable = 0, optimizer = 0;
    for (const ParamSpec& s : model_param_specs(c)) {
      if (!w.contains(s.name)) continue;
      weights += 4.0 * double(w.at(s.name).value().numel());
      if (!s.buffer) trainable += 4.0 * double(w.at(s.name).value().numel());
    }
    for (const auto& [name, t] : opt.state_tensors()) optimizer += 4.0 * double(t.numel());
    EXPECT_EQ(m.weights, weights) << "ep " << ep;
    EXPECT_EQ(m.gradients, trainable) << "ep " << ep;
    EXPECT_EQ(m.optimizer, optimizer) << "ep " << ep;
  }
}

TEST(Plan, FlagshipNeedsAboutFourHundredH200sForItsState) {
  const ModelConfig c = load("kimi-k3.json");
  const double floor = 18.0 * double(account_model(c).total_params) / (0.9 * 141e9);
  for (const int n : {64, 256}) {
    const Plan p = make_plan(c, h200(n, 1048576));
    EXPECT_EQ(p.chosen, -1) << n << " H200s cannot hold 18 B x 2.78T";
    EXPECT_NEAR(p.min_gpus_for_state, floor, 1e-9 * floor);
    ASSERT_FALSE(p.layouts.empty());
    for (const PlanLayout& l : p.layouts) EXPECT_FALSE(l.fits);
  }
  const Plan p = make_plan(c, h200(1024, 1048576));
  ASSERT_GE(p.chosen, 0);
  const PlanLayout& l = p.layouts[size_t(p.chosen)];
  EXPECT_EQ(l.dims.world(), 1024);
  EXPECT_EQ(c.num_experts % l.dims.ep, 0);
  EXPECT_EQ((p.tokens_per_step / 1048576) % (int64_t(l.dims.dp) * l.dims.ep), 0);
  EXPECT_EQ(1048576 % l.dims.sp, 0);
  EXPECT_LE(l.memory.total(l.checkpointing), 0.9 * 141e9);
  EXPECT_GT(l.step_s_overlap, 0.0);
  // Fastest fitting first.
  for (const PlanLayout& o : p.layouts)
    if (o.fits) {
      EXPECT_GE(o.step_s_overlap, l.step_s_overlap);
    }
}

TEST(Plan, AllToAllVolumeByHand) {
  const ModelConfig c = load("tiny.json");
  PlanRequest q = h200(2, 128);
  q.recipe = PlanRecipe::kMyriadCpu;
  q.tokens_per_step = 1024;  // 8 sequences, 4 per data rank
  q.forced = ParallelDims{1, 2, 1};
  const Plan p = make_plan(c, q);
  ASSERT_EQ(p.layouts.size(), 1u);
  const PlanLayout& l = p.layouts[0];
  EXPECT_EQ(l.micro_batches, 4);
  // 4 micro-batches x MoE layers x 4 passes x 128 tokens x k copies x L floats x 4 B x half leaving the rank.
  const double want = 4.0 * double(c.num_moe_layers()) * 4.0 * 128.0 * double(c.num_experts_per_token) *
                      double(c.expert_width()) * 4.0 * 0.5;
  EXPECT_EQ(l.comm.all_to_all, want);
  EXPECT_EQ(l.comm.sp_gather, 0.0);
}

TEST(Plan, BadRequestsGiveOneError) {
  const ModelConfig c = load("tiny.json");
  EXPECT_THROW(make_plan(c, h200(2, c.max_position_embeddings + 1)), Error);
  EXPECT_THROW(gpu_spec("a100x"), Error);
  PlanRequest q = h200(2, 128);
  q.gpu = gpu_spec("cpu");  // no figures given
  EXPECT_THROW(make_plan(c, q), Error);
  q = h200(2, 128);
  q.tokens_per_step = 1000;  // not whole sequences
  EXPECT_THROW(make_plan(c, q), Error);
}

}  // namespace
}  // namespace myriad
