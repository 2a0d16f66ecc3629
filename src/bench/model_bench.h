// `myriad bench model --config F`: the whole model and its expensive pieces on the CPU, each figure beside the
// f32 FMA peak measured in the same run (ops/machine_limits.h). Random init (ModelWeights::random, seed 0),
// one sequence of T tokens (default min(1024, max_position_embeddings)). Four sections:
//   1. model: forward (no tape) and forward + backward (tape, ag::backward of the loss) of Transformer::forward,
//      time per token and GFLOP/s against the FMA peak. FLOPs per token: 2 x activated non-embedding parameters
//      (model/accounting.h: the lm_head counts, the input lookup does not) for forward, 6 x for forward +
//      backward, plus the attention terms of training_flops_per_token (MLA causal scores and values, KDA
//      chunkwise state products), which are forward + backward figures; forward takes a third of them.
//      Target: forward + backward >= kModelTarget of the FMA peak.
//   2. KDA training, chunkwise vs recurrent, the op alone (cpu:: kernels on raw buffers) at the config's KDA
//      heads and head dim, B = 1, chunk 64. Chunkwise training = kda_chunk_forward + kda_backward; recurrent
//      training = kda_recurrent_forward + kda_recurrent_backward (per token, states
//      recomputed from chunk-start checkpoints). Also printed for information: the lower bound 3 x
//      kda_recurrent_forward and the naive ref:: oracle (scalar loops, threaded over heads here).
//      Target: the form ag::kda and prefill run (ops::kda_sequence_form) within kKdaFormSlack of the faster.
//   3. MoE scaling: Transformer::moe_ffn of the first MoE layer on a [T, D] input, forward + backward, with the
//      config's routed experts set to 8 and to 896 (the JSON copied with num_experts changed; top-k and widths
//      unchanged). To keep 896 experts in memory, both configs are cut after that first MoE layer
//      (num_hidden_layers and the layer lists shortened), which moe_ffn does not read. Target: time ratio
//      896 / 8 <= kMoeScalingTarget.
//   4. where the time goes: each module of section 1 alone (the public Transformer module methods on a random
//      [T, D] input, first layer of each kind), forward + backward, times its layer count, as a share of the
//      model's forward + backward; "other" is the rest (embedding, layer norms, AttnRes reads, residual adds).
// A benchmark, not a test: figures below target print "below"; the exit status stays 0.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/machine_limits.h"

namespace myriad::bench {

constexpr double kModelTarget = 0.50;      // model forward + backward, fraction of the FMA peak
constexpr double kKdaFormSlack = 0.95;     // KDA training: the chosen form's speed, fraction of the faster form
constexpr double kMoeScalingTarget = 1.5;  // MoE layer forward + backward: 896 / 8 experts time, at most
constexpr int64_t kMoeExpertsSmall = 8;    // the two expert counts compared
constexpr int64_t kMoeExpertsLarge = 896;

struct ModelBenchOptions {
  std::string config_path;  // config.json or a directory holding one
  int64_t seq = 0;          // T; 0: min(1024, max_position_embeddings)
  double budget_s = 40.0;   // seconds of timed repeats, all sections together (setup and warm-ups extra)
};

struct ModelBenchResult {
  nlohmann::ordered_json json;  // every figure (the --json payload, without the ceilings)
  int targeted = 0;             // targets checked
  int passed = 0;               // of which met
};

// Runs the four sections, printing each table to out as it completes (out may be null).
ModelBenchResult run_model_bench(const ModelBenchOptions& opt, const MachineLimits& limits, std::FILE* out);

}  // namespace myriad::bench
