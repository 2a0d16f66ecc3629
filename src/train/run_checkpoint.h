// Training checkpoints in a run directory (docs/training.md):
//   RUN/checkpoints/step-000123/{config.json, model.safetensors, optimizer.safetensors, trainer_state.json,
//                                tokenizer/...}
//   RUN/checkpoints/latest   the newest complete checkpoint's directory name
// Saving is atomic: everything is written into io's staged directory beside the others, each file fsync'ed,
// the directory put in place (rename, or an atomic exchange with an older save of the same step) and the parent
// fsync'ed, and only then `latest` is replaced (atomically). Reading the layout: io/run_layout.h.
// A process killed at any point leaves the previous checkpoint loadable; stale temp directories are removed
// by the next save. The last `keep` checkpoints are kept.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "io/run_layout.h"
#include "model/weights.h"
#include "train/optimizer.h"

namespace myriad {

struct CheckpointContents {
  std::string config_json;       // the model config file's bytes
  NamedTensors weights;          // every tensor of the model (gathered from the ranks under expert parallelism)
  NamedTensors optimizer_state;  // AdamW::state_tensors() of every trainable tensor, likewise
  int64_t optimizer_step = 0;
  nlohmann::json trainer_state;
  std::string tokenizer_dir;  // copied in when not empty
};

// Returns the checkpoint's directory.
std::string save_run_checkpoint(const std::string& run_dir, int64_t step, const CheckpointContents& c, int64_t keep);

}  // namespace myriad
