// Setting up a training run from the CLI's inputs: the tokenizer (given, or trained on the data), the token
// shards (given, or prepared from text / the built-in corpus), the model, and the adapter from the shard
// loader to the trainer. Kept out of tools/ so the CLI stays argument parsing only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"
#include "train/training_ranks.h"

namespace myriad {

struct RunRequest {
  std::string model_config_path;
  std::string train_config_path;  // empty: <config>.train.json beside the model config, else the default ladder
  std::vector<std::string> data;  // text / JSONL files or directories, or one prepared shard directory; empty:
                                  // the built-in corpus
  std::string tokenizer_dir;      // empty: train one on the data
  std::string out_dir;
  std::string resume;  // a run or checkpoint directory
  // A run or checkpoint directory whose weights start this run (a new run: fresh optimizer, schedule and data
  // order; its tokenizer/ unless tokenizer_dir is given).
  std::string init;
  bool force = false;
  bool quiet = false;
  bool memory_profile = false;  // the first step's tensor memory split by model part (TrainerOptions)
  int64_t stop_after_step = -1;
  std::optional<uint64_t> seed;
  std::optional<bool> gradient_checkpointing;
  // dp x ep x sp over the ranks of an mpirun job (dist/parallel_dims.h); all 1: one process. Under mpirun the
  // product must be the number of ranks. Rank 0 prepares the run directory (corpus, tokenizer, shards); the
  // others wait for it, then load what it wrote (the run directory must be on a filesystem every rank sees).
  ParallelTraining parallel;
};

TrainSummary run_training(const RunRequest& req);

}  // namespace myriad
