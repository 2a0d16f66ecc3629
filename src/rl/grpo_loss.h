// The GRPO policy loss of one trajectory (rl/grpo.h has the formula): forward on the trajectory, each policy token's
// coefficient d L / d(-log pi(t)) set from the forward's own log-probabilities, backward (gradients accumulate in
// the model's weights). Returns the trajectory's share of the surrogate objective (without the KL term).
#pragma once

#include <cstdint>
#include <string>

#include "dist/communicator.h"
#include "model/transformer.h"
#include "rl/rollout.h"

namespace myriad {

struct PolicyLossOptions {
  double clip_low = 0.2, clip_high = 0.28;
  double kl_coef = 0.0;
  std::string kl_estimator = "k3";  // "k1" or "k3"
  int64_t kda_chunk = 64;
  // Routing replay: the policy's forwards send each token's copies to the experts the rollout chose
  // (Trajectory::routing; model/ffn_module.h RoutingTap). The reference model routes itself.
  bool routing_replay = false;
  // Sequence parallelism: the ranks of this group (in token order) each run a contiguous shard of every trajectory
  // (ceil(L / ranks) tokens, the last padded with masked tokens), the model's sequence-context seam joining them
  // (dist/sequence_parallel.h); every rank holds the whole trajectory and takes its shard's policy tokens. Null:
  // the whole trajectory here.
  Communicator* sequence_group = nullptr;
};

struct PolicyLossStats {
  double tokens = 0, clipped = 0;             // policy tokens seen, and those whose ratio was clipped
  double mismatch_sum = 0, mismatch_max = 0;  // |log pi - log pi_old| (the engine's against this forward)
  double kl_sum = 0;                          // the KL estimator summed over tokens (with a reference)
  double input_tokens = 0;  // the input positions the forwards ran (under sequence parallelism this shard's)
};

// advantage: the trajectory's A; agg: each token's aggregation weight (1 / tokens of the step, or 1 / (trajectories
// x this one's tokens)); reference: the frozen model for the KL term (null: none). A trajectory without predicted
// policy tokens returns 0 without a forward (on every rank of a sequence group alike); under sequence parallelism
// the return value, the statistics and the gradients are this shard's share (their sums over the group are the
// whole trajectory's).
double policy_loss_backward(const Transformer& model, const Trajectory& trajectory, double advantage, double agg,
                            const PolicyLossOptions& options, const Transformer* reference, PolicyLossStats* stats);

// -L without gradients: the surrogate objective minus kl_coef x the KL term when a reference is given (what
// policy_loss_backward's gradients descend; tests check them against finite differences of this).
double policy_objective(const Transformer& model, const Trajectory& trajectory, double advantage, double agg,
                        const PolicyLossOptions& options, const Transformer* reference = nullptr);

// Policy tokens of a trajectory that are predicted (every one but a first token).
int64_t predicted_policy_tokens(const Trajectory& trajectory);

}  // namespace myriad
