// `myriad sft` (issue 15): supervised fine-tuning of a trained model on conversations (OpenAI's format, tool calls
// included), the loss on the assistant's tokens only (train/sft_data.h), with the pretraining trainer's features:
// warmup + cosine, clipping, NaN/inf steps skipped, checkpoints, exact resumption, metrics.jsonl and the report.
// Every eval_every steps: validation loss on held-out conversations, and the agent evaluation on held-out tool
// tasks (train/agent_eval.h) in the eval record's "agent".
//
// The run directory is a training run's (train.json, config.json, metrics.jsonl, checkpoints/, tokenizer/), plus
// sft.json: the source model, the data file and its hash, the counts. The conversations: --data FILE.jsonl;
// validation: --val FILE.jsonl, else every 20th conversation of --data (when it has at least 20).
//
// The training config: --train-config, else (resuming) the run's train.json, else the SFT default: one stage of
// min(512, max_position_embeddings) tokens, batch_tokens 4096, lr 1e-3, warmup 10, 300 steps, eval every 100.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/episode.h"
#include "train/trainer.h"
#include "train/training_ranks.h"

namespace myriad {

struct SftRequest {
  std::string model_dir;  // a run directory or a checkpoint (its config.json and tokenizer/)
  std::string tokenizer;  // --tokenizer: another tokenizer directory or file (a new run; saved with its checkpoints)
  std::string data_path;
  std::string val_path;  // optional
  std::string out_dir;
  std::string train_config_path;
  std::string resume;  // an SFT run (or one of its checkpoints) to continue
  bool force = false;
  bool quiet = false;
  int64_t stop_after_step = -1;
  std::optional<uint64_t> seed;
  std::optional<int64_t> steps;   // overrides the (single-stage) config's steps
  int agent_eval_per_family = 4;  // 0: no agent evaluation
  // A prepared shard directory of pretraining text and the fraction of rows taken from it (train/sft_data.h), so
  // fine-tuning keeps general ability; its validation split is also evaluated ("pretrain_val_loss").
  std::string pretrain_data;
  double pretrain_mix = 0.0;
  // dp x ep x sp over the ranks of an mpirun job, as for `myriad train` (train/run.h); all 1: one process.
  ParallelTraining parallel;
};

TrainSummary run_sft(const SftRequest& req);

// The SFT default training config for a model (see the top).
nlohmann::json default_sft_train_config(int64_t max_position_embeddings);

}  // namespace myriad
