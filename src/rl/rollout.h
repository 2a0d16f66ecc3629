// Rollouts for RL (issue 15): groups of tool-use episodes sampled through the serving engine (continuous batching:
// every live episode of the batch decodes together; prefix reuse when prompts are long enough to snapshot),
// multi-turn: each turn submits every unfinished episode's trajectory as its prompt, the engine stops at
// <|endoftext|> (or at another turn's marker, a forged turn), the environment answers, and the next turn follows
// until every episode has an answer or hit a limit.
//
// Each trajectory keeps the engine's log-probability of every sampled token (the old policy's, as sampled: at
// temperature 1 with no truncation or penalties that is log pi_old(token) of the raw model), aligned with the
// trajectory's tokens (0 where the environment wrote them).
#pragma once

#include <cstdint>
#include <vector>

#include "agent/episode.h"
#include "infer/inference_model.h"
#include "infer/sampling.h"

namespace myriad {

struct Trajectory {
  int group = 0;  // index of its prompt in the batch
  std::vector<int32_t> tokens;
  std::vector<uint8_t> policy;      // 1: sampled by the policy
  std::vector<float> old_logprobs;  // per token, 0 where policy is 0
  EpisodeOutcome outcome;
  std::string text;  // the decoded trajectory (for samples in the metrics)
  // With record_routing (routing replay): per layer, the experts the engine sent the tokens' copies to, as
  // ForwardOptions::routing_replay takes them ([tokens - 1, k] I32: the last token, never fed back, has none;
  // undefined on layers without MoE). Built once here; every PPO epoch's forward reads it.
  std::vector<Tensor> routing;
};

struct RolloutStats {
  double seconds = 0;
  int64_t generated_tokens = 0;  // policy tokens sampled (ends included)
  int64_t prompt_tokens = 0;     // tokens prefilled over all turns
  int64_t prefix_tokens_reused = 0;
  int64_t turns = 0;  // engine rounds
};

// group_size episodes of each task; episode e of task g samples with seed
// mix_seed(seed, (first_group + g) * group_size + e) advanced per turn. Deterministic for a given model, tasks and
// seed. first_group: where `tasks` start in the step's list (a data-parallel rank's share), so each episode samples
// the stream it would in one process. record_routing: keep each trajectory's routing (Trajectory::routing).
std::vector<Trajectory> rollout_groups(std::shared_ptr<const InferenceModel> model, const Tokenizer& tok,
                                       const std::vector<AgentTask>& tasks, int group_size,
                                       const SamplingParams& sampling, uint64_t seed, const EpisodeLimits& limits,
                                       const RewardWeights& weights, RolloutStats* stats, int64_t first_group = 0,
                                       bool record_routing = false);

}  // namespace myriad
