// MoE routing, once for every path that routes tokens (training's moe_ffn, the inference model, expert
// pruning): which experts each token's copies go to, and the copies grouped by expert.
// docs/design.md §1.5/§1.6: the selection is the top-k of s + b, where s are the router scores and b the correction
// bias (topk_method "noaux_tc"; "greedy" has no bias): b selects, it never weighs. Under a capacity limit, overflow
// goes to the next-best expert with room, else the copy is dropped (-1).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace myriad {

struct ExpertSelection {
  Tensor idx;            // [T, k] I32: the expert of each copy, -1 for a dropped copy
  int64_t dropped = 0;   // copies with no expert under the capacity limit
  int64_t rerouted = 0;  // copies moved to a next-best expert with room
};

// scores [T, E] f32 (s, after the router's activation); bias [E] (b; read only for topk_method "noaux_tc",
// may be null otherwise); capacity_factor: nullopt for plain top-k.
ExpertSelection select_experts(const ModelConfig& c, const Tensor& scores, const float* bias,
                               std::optional<double> capacity_factor);

// Routing replay (model/ffn_module.h RoutingTap): rows t < R of sel.idx [T, k] replaced by replay [R, k] I32
// (R <= T; entries in [-1, num_experts), no expert twice in a row); kShape / kValue otherwise.
void replay_experts(ExpertSelection& sel, const Tensor& replay, int64_t num_experts);

// Whether the mixture weights are renormalised over the chosen experts' scores: moe_renormalize with more than one
// expert per token, as upstream (with one, the weight would be routed_scaling_factor whatever the score).
inline bool renormalizes_weights(const ModelConfig& c) {
  return c.moe_renormalize && c.num_experts_per_token > 1;
}

// The copies grouped by expert: counting sort, stable in token order, dropped copies (-1) left out. The copies
// of expert e are positions [start[e], start[e + 1]); copy_token is the token of each, copy_slot its index in
// idx (t * k + j).
struct ExpertGroups {
  std::vector<int64_t> start;  // [E + 1]
  std::vector<int32_t> copy_token, copy_slot;
  int64_t served() const { return start.back(); }
  int64_t load(int64_t e) const { return start[size_t(e + 1)] - start[size_t(e)]; }
};
ExpertGroups group_by_expert(const Tensor& idx, int64_t num_experts);

}  // namespace myriad
