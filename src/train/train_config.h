// The training configuration (train.json): the progressive context ladder and the optimisation settings.
// Fields (all optional but `stages`; defaults below):
//   stages            [{"seq_len": T, "steps": N, "lr_scale": 1.0, "freeze": [], "longctx_fraction": f}]  the
//                     ladder, run in order; freeze: modules not updated during the stage, of "text_model",
//                     "vision_tower", "mm_projector" (a vision-language model's stage 1: ["text_model",
//                     "vision_tower"] trains the projector alone); at least one module must train;
//                     longctx_fraction: the stage's share of long-context task samples in [0, 1] (needs
//                     longctx_mix, whose fraction it replaces for the stage)
//   batch_tokens      tokens per optimizer step (sequences per step = max(1, batch_tokens / seq_len); the
//                     sequences of a step are micro-batches whose gradients accumulate)       default 4096
//   lr, min_lr_ratio, warmup_steps                   warmup then cosine to lr * min_lr_ratio over all steps
//   weight_decay, beta1, beta2, eps, clip (global-norm clipping; 0 = off)
//   seed              data order and everything random                                     default 0
//   gradient_checkpointing  recompute each layer in backward                                default false
//   eval_every, eval_batches, task_eval_per_task, task_eval_max_new_tokens
//   checkpoint_every, keep_checkpoints, max_consecutive_skips, log_every
//   kda_chunk         KDA chunk size                                                        default 64
//   image_shift       image-text records: each training image moved by a random offset of up to this many
//                     pixels in x and y each time it is drawn (edges repeated; held-out images never)  default 0
//   longctx_eval      {"task": "passkey", "lengths": [512, 2048], "depths": [0, 25, 50, 75, 100], "samples": 2}:
//                     the long-context grid (train/longctx_eval.h) at the end of every stage of the ladder; each
//                     length at most max_position_embeddings. Absent: not run
//   longctx_mix       {"tasks": ["passkey"], "fraction": 0.5}: that fraction of the training sequences (drawn from
//                     the seed) are long-context task samples (data/datasets/longctx_tasks.h) of the stage's length,
//                     needle at a random depth, answer included, instead of corpus text (train/longctx_mix_source.h);
//                     fraction in [0, 1], some stage's share > 0. Absent: none
//   builtin_corpus    {"bytes": 3145728, "task_share": 0.5, "task_weights": {"arithmetic": 1, "copy": 1,
//                     "reverse": 1, "recall": 1}}: the corpus `myriad train` generates when given no data
//                     (data/datasets/corpus.h): its size, the share of task documents (the rest prose) and the task
//                     kinds' relative weights (absent kinds: 1). Ignored when --data is given
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/datasets/corpus.h"

namespace myriad {

struct ModelConfig;

struct Stage {
  int64_t seq_len = 256;
  int64_t steps = 100;
  double lr_scale = 1.0;
  std::vector<std::string> freeze;  // module names (module_of_tensor) not updated in this stage
};

// The module a tensor belongs to, as stages' "freeze" names them: "vision_tower", "mm_projector" or "text_model".
const char* module_of_tensor(const std::string& name);

// The long-context evaluation run at every stage's end (absent: lengths empty).
struct LongContextEvalConfig {
  std::string task = "passkey";
  std::vector<int64_t> lengths;
  std::vector<int64_t> depths = {0, 25, 50, 75, 100};
  int64_t samples = 2;
  bool enabled() const { return !lengths.empty(); }
};

// Long-context task samples mixed into the training sequences (absent: fraction 0).
struct LongTaskMixConfig {
  std::vector<std::string> tasks = {"passkey"};
  double fraction = 0.0;
  // Per stage of the ladder: its share (stages[i].longctx_fraction, else `fraction`); empty: `fraction` in all.
  std::vector<double> stage_fractions;
  double fraction_of(int64_t stage) const {
    return stage >= 0 && size_t(stage) < stage_fractions.size() ? stage_fractions[size_t(stage)] : fraction;
  }
  bool enabled() const {
    for (double f : stage_fractions)
      if (f > 0.0) return true;
    return fraction > 0.0;
  }
};

struct TrainConfig {
  std::vector<Stage> stages;
  int64_t batch_tokens = 4096;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;
  uint64_t seed = 0;
  bool gradient_checkpointing = false;
  int64_t eval_every = 50;
  int64_t eval_batches = 4;
  int64_t task_eval_per_task = 10;
  int64_t task_eval_max_new_tokens = 6;
  int64_t checkpoint_every = 100;
  int64_t keep_checkpoints = 2;
  int64_t max_consecutive_skips = 5;
  int64_t log_every = 1;
  int64_t kda_chunk = 64;
  int64_t image_shift = 0;
  LongContextEvalConfig longctx_eval;
  LongTaskMixConfig longctx_mix;
  size_t builtin_corpus_bytes = size_t(3) << 20;
  CorpusMix builtin_corpus;

  int64_t total_steps() const;
  int64_t stage_of(int64_t step) const;  // stage index of a 0-based step
  double lr_at(int64_t step) const;      // warmup + cosine, times the stage's lr_scale
  int64_t sequences_per_step(int64_t stage) const;
};

// Parses and validates (against the model: no stage longer than max_position_embeddings). One kConfig error
// naming the field, the value and the rule.
TrainConfig parse_train_config(const nlohmann::json& j, const std::string& source, const ModelConfig& model);
TrainConfig load_train_config(const std::string& path, const ModelConfig& model);
nlohmann::json train_config_to_json(const TrainConfig& c);

}  // namespace myriad
