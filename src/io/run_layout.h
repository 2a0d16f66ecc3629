// The layout of a training run's directory, as the trainer writes it (train/run_checkpoint.h) and the engine,
// pruning and resumption read it:
//   RUN/checkpoints/step-000123/   one complete checkpoint (config.json, model.safetensors, trainer_state.json, ...)
//   RUN/checkpoints/latest         the newest complete checkpoint's directory name
#pragma once

#include <string>

namespace myriad {

// The directory of the newest complete checkpoint of a run (or of a checkpoint directory given directly).
// Throws kIo when there is none, kFormat when `latest` names a missing or incomplete one.
std::string latest_checkpoint(const std::string& run_or_checkpoint_dir);

// What every command that reads a model takes: DIR itself when it holds a model (model.safetensors or its shard
// index), else the latest checkpoint of the run DIR. kIo naming DIR when it is neither (latest_checkpoint's
// kFormat for a run whose `latest` names a missing or incomplete checkpoint).
std::string model_or_latest_checkpoint(const std::string& dir);

// A new run directory: created; an existing non-empty one is refused (kIo, suggesting --resume or --force) unless
// `force`, which empties it first.
void start_run_directory(const std::string& dir, bool force);

}  // namespace myriad
