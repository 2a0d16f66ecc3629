// `myriad grpo` (issue 15): Group Relative Policy Optimization of a (fine-tuned) model on the built-in tool tasks,
// with multi-dimensional rewards (agent/episode.h).
//
// One step: prompts_per_step training tasks (drawn from mix_seed(seed, step)), group_size rollouts each through
// the serving engine (rl/rollout.h) at the given temperature; rewards combined with the configured weights;
// advantages A = (r - mean) / std within each group; groups whose rewards are all equal carry no signal and are
// dropped (counted: DAPO's dynamic sampling, without resampling). Then ppo_epochs updates, each one optimizer step
// over all kept trajectories, minimizing
//   L = - sum_t a_t min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A) + kl_coef sum_t a_t k(t)
// over the policy's tokens (tool results, prompts and template tokens are not in the loss), rho_t = pi(t) /
// pi_old(t) with pi_old the engine's sampling log-probabilities, a_t = 1 / (policy tokens of the step) for
// "token" aggregation (DAPO's default) or 1 / (trajectories x its length) for "sequence"; k is the k1
// (log pi - log pi_ref) or k3 (pi_ref/pi - log(pi_ref/pi) - 1) estimator of KL to the frozen starting model
// (kl_coef 0, the default, skips the reference entirely). The gradient is exact: each token's coefficient
// d L / d(-log pi(t)) is set from the forward's own log-probabilities (ForwardOptions::target_weights).
// The first update also measures how far the trainer's recomputed log-probabilities are from the engine's
// (logprob_mismatch_mean / _max in metrics.jsonl).
//
// Config (grpo.json, all optional; unknown fields are errors): steps 40, prompts_per_step 8, group_size 8,
// temperature 1.0, lr 5e-5, warmup_steps 0, weight_decay 0, beta1 0.9, beta2 0.95, eps 1e-8, clip (global norm) 1,
// clip_low 0.2, clip_high 0.28, loss_aggregation "token"|"sequence", kl_coef 0, kl_estimator "k3"|"k1",
// ppo_epochs 1, reward weights {completion, efficiency, safety, length} (1 each), per_extra_call 0.1,
// length_tau 3, max_turns 6, max_tokens 384, max_reply_tokens 128, eval_every 10, eval_per_family 4,
// checkpoint_every 10, keep_checkpoints 2, seed 0, kda_chunk 64, routing_replay false (MoE: the training forward
// sends each token to the experts the rollout chose, so near-tied router scores cannot make the ratio compare two
// different networks; rl/grpo_loss.h).
//
// Metrics per step: the rewards (mean of each and of the total), success rate, mean calls, violations, tool
// errors, dropped groups, clip fraction, the KL estimate, the mismatch, rollout and training tokens/s; every
// eval_every steps the held-out agent evaluation ("agent") and, with --pretrain-data, the validation loss on
// pretraining text. Checkpoints hold the weights, AdamW and the step; the rollouts are functions of (weights,
// seed, step), so a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/episode.h"
#include "dist/parallel_dims.h"

namespace myriad {

struct GrpoConfig {
  int64_t steps = 40;
  int prompts_per_step = 8;
  int group_size = 8;
  double temperature = 1.0;
  double lr = 5e-5;
  int64_t warmup_steps = 0;
  double weight_decay = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;
  double clip_low = 0.2, clip_high = 0.28;
  std::string loss_aggregation = "token";
  double kl_coef = 0.0;
  std::string kl_estimator = "k3";
  int ppo_epochs = 1;
  RewardWeights rewards;
  EpisodeLimits limits;
  int64_t eval_every = 10;
  int eval_per_family = 4;
  int64_t checkpoint_every = 10;
  int64_t keep_checkpoints = 2;
  uint64_t seed = 0;
  int64_t kda_chunk = 64;
  bool routing_replay = false;
  // Dynamic sampling (DAPO): rounds of new prompts rolled out in place of the groups dropped for equal rewards,
  // until prompts_per_step groups have a signal or the rounds run out (0: off; at most 16).
  int refill_rounds = 0;
};

GrpoConfig parse_grpo_config(const nlohmann::json& j, const std::string& source);
nlohmann::json grpo_config_to_json(const GrpoConfig& c);

struct GrpoRequest {
  std::string model_dir;  // an SFT or training run, or a checkpoint
  std::string tokenizer;  // --tokenizer: another tokenizer directory or file (a new run; saved with its checkpoints)
  std::string out_dir;
  std::string config_path;    // grpo.json; empty: the defaults
  std::string resume;         // a GRPO run to continue
  std::string pretrain_data;  // a prepared shard directory: validation loss on pretraining text at each eval
  bool force = false, quiet = false;
  int64_t stop_after_step = -1;
  std::optional<int64_t> steps;
  std::optional<uint64_t> seed;
  // Under mpirun, --dp D x --ep E x --sp S: data-parallel index d rolls out block d of the step's groups
  // (prompts_per_step / D of them), its E expert-parallel ranks together in lockstep (each holds 1/E of the routed
  // experts; each of the S sequence-parallel rows of them alike), and they split the block's sequences for the
  // update, each sp rank running its shard of every such sequence; gradients are summed as the trainer sums them,
  // statistics once per block. Rank 0 (with its ep group under --ep) evaluates, rank 0 logs; the checkpoint is
  // sharded under --ep as the trainer's. The same sampling streams as one process.
  ParallelDims parallel;
};

struct GrpoSummary {
  int64_t steps = 0;
  double last_success = 0;   // held-out, at the last evaluation
  double first_success = 0;  // held-out, before the first step
  std::string last_checkpoint;
  bool root = true;  // this process reports (rank 0, or the only one)
};

GrpoSummary run_grpo(const GrpoRequest& req);

}  // namespace myriad
