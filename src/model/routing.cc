#include "model/routing.h"

#include "core/error.h"
#include "model/balancing.h"
#include "ops/kernels.h"

namespace myriad {

ExpertSelection select_experts(const ModelConfig& c, const Tensor& scores, const float* bias,
                               std::optional<double> capacity_factor) {
  const int64_t E = c.num_experts, k = c.num_experts_per_token;
  MYRIAD_REQUIRE(scores.dtype() == DType::kF32 && scores.ndim() == 2 && scores.size(1) == E, kShape,
                 "select_experts: scores ", shape_str(scores.shape()), " must be F32 [T, ", E, "]");
  const int64_t T = scores.size(0);
  // s + b in a copy only when there is a bias; greedy selects on the scores themselves.
  Tensor biased = scores.contiguous();
  if (c.topk_method == TopkMethod::kNoauxTc) {
    MYRIAD_REQUIRE(bias != nullptr, kValue, "select_experts: topk_method \"noaux_tc\" needs the correction bias");
    if (biased.data<float>() == scores.data<float>()) biased = biased.clone();
    float* bs = biased.data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) bs[t * E + e] += bias[e];
  }
  ExpertSelection sel;
  if (capacity_factor) {
    CapacityRouting cr = route_with_capacity(biased.data<float>(), T, E, k, *capacity_factor);
    sel.idx = cr.idx;
    sel.dropped = cr.dropped;
    sel.rerouted = cr.rerouted;
  } else {
    sel.idx = Tensor::empty({T, k}, DType::kI32);
    Tensor top = Tensor::empty({T, k});
    ops::topk(biased.device(), sel.idx.data<int32_t>(), top.data<float>(), biased.data<float>(), T, E, k);
  }
  return sel;
}

void replay_experts(ExpertSelection& sel, const Tensor& replay, int64_t E) {
  const int64_t T = sel.idx.size(0), k = sel.idx.size(1);
  MYRIAD_REQUIRE(replay.dtype() == DType::kI32 && replay.ndim() == 2 && replay.size(1) == k && replay.size(0) <= T,
                 kShape, "routing replay: ", shape_str(replay.shape()), " must be I32 [R <= ", T, ", ", k, "]");
  const Tensor r = replay.contiguous();
  const int32_t* src = r.data<int32_t>();
  int32_t* dst = sel.idx.data<int32_t>();
  for (int64_t t = 0; t < r.size(0); ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = src[t * k + j];
      MYRIAD_REQUIRE(e >= -1 && e < E, kValue, "routing replay: row ", t, " names expert ", e, " of ", E);
      for (int64_t i = 0; i < j; ++i)
        MYRIAD_REQUIRE(e < 0 || src[t * k + i] != e, kValue, "routing replay: row ", t, " names expert ", e, " twice");
      dst[t * k + j] = e;
    }
  // The dropped copies as they now are (the replayed rows carry the rollout's).
  sel.dropped = 0;
  for (int64_t i = 0; i < T * k; ++i) sel.dropped += dst[i] < 0;
}

ExpertGroups group_by_expert(const Tensor& idx, int64_t E) {
  MYRIAD_REQUIRE(idx.dtype() == DType::kI32 && idx.ndim() == 2, kShape, "group_by_expert: idx ", shape_str(idx.shape()),
                 " must be I32 [T, k]");
  const Tensor ic = idx.contiguous();
  const int32_t* id = ic.data<int32_t>();
  const int64_t n = ic.numel(), k = ic.size(1);
  ExpertGroups g;
  g.start.assign(size_t(E + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    MYRIAD_REQUIRE(id[i] >= -1 && id[i] < E, kValue, "group_by_expert: expert ", id[i], " outside [-1, ", E, ")");
    if (id[i] >= 0) ++g.start[size_t(id[i]) + 1];
  }
  for (int64_t e = 0; e < E; ++e) g.start[size_t(e + 1)] += g.start[size_t(e)];
  g.copy_token.resize(size_t(g.served()));
  g.copy_slot.resize(size_t(g.served()));
  std::vector<int64_t> fill(g.start.begin(), g.start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0) continue;
    const int64_t pos = fill[size_t(id[i])]++;
    g.copy_token[size_t(pos)] = int32_t(i / k);
    g.copy_slot[size_t(pos)] = int32_t(i);
  }
  return g;
}

}  // namespace myriad
