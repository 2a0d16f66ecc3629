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

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "data/tokenize/tokenizer.h"
#include "io/atomic_file.h"
#include "io/run_layout.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/optimizer.h"

namespace myriad {

// A sharded checkpoint (expert parallelism: each rank of one ep group writes its experts; ZeRO-1: each rank its
// share of the optimizer state) holds instead
//   model-0000i-of-0000n.safetensors + model.safetensors.index.json, and the same for optimizer.*,
// the Hugging Face sharded layout (`myriad convert --in step-N --out model.safetensors` consolidates it). Every
// reader loads by name through the index, so a run resumes on any number of ranks.
struct CheckpointContents {
  std::string config_json;       // the model config file's bytes
  NamedTensors weights;          // every tensor of the model (unless sharded)
  NamedTensors optimizer_state;  // AdamW::state_tensors() of every trainable tensor (unless sharded)
  int64_t optimizer_step = 0;
  nlohmann::json trainer_state;
  std::string tokenizer_dir;  // copied in when not empty
  bool sharded = false;       // the shards and indexes are already in the staging directory: weights and
                              // optimizer_state are not written
};

// One checkpoint being written: the staged directory (made by rank 0), into which shard writers put their files,
// then commit() writes the rest, puts the directory in place and updates `latest`.
class RunCheckpointWriter {
 public:
  RunCheckpointWriter(const std::string& run_dir, int64_t step);
  ~RunCheckpointWriter();
  const std::string& staging() const;
  std::string commit(const CheckpointContents& c, int64_t keep);  // the checkpoint's directory

 private:
  std::string root_, name_;
  std::unique_ptr<StagedDirectory> staged_;
};

// The single-file checkpoint of one process (or of rank 0 when every rank holds everything): the checkpoint's
// directory.
std::string save_run_checkpoint(const std::string& run_dir, int64_t step, const CheckpointContents& c, int64_t keep);

// Shard `shard` of `shards` of a sharded checkpoint's weights (model-...) or optimizer state (optimizer-...), into
// the staging directory.
void write_weights_shard(const std::string& staging, int64_t shard, int64_t shards, const NamedTensors& weights,
                         int64_t step);
void write_optimizer_shard(const std::string& staging, int64_t shard, int64_t shards, const NamedTensors& state,
                           int64_t optimizer_step, int64_t step);

// What post-training starts from: a checkpoint's config (its bytes and parsed), and its tokenizer, checked to fit
// the model's vocabulary (kConfig otherwise). The weights are loaded by the caller (ModelWeights::from_checkpoint).
struct CheckpointModel {
  std::string dir;          // the checkpoint directory
  std::string config_json;  // config.json's bytes (copied into the new run's checkpoints)
  ModelConfig config;
  Tokenizer tokenizer;
};
// tokenizer: a tokenizer directory or file to use instead of the checkpoint's own (--tokenizer); empty: found
// by find_model_tokenizer.
CheckpointModel open_checkpoint_model(const std::string& checkpoint_dir, const std::string& tokenizer = "");

// A checkpoint's trainer_state.json (from a crash, another version or a hostile copy): a JSON object, else kFormat
// naming the file. parse_trainer_state reads the text of one (source names it in messages).
nlohmann::json read_trainer_state(const std::string& checkpoint_dir);
nlohmann::json parse_trainer_state(std::string_view text, const std::string& source);
// A counter of a trainer state: a non-negative integer. Absent: `fallback` when given, else kFormat; any other
// value: kFormat "<source>: \"key\" must be a non-negative integer, got ...".
int64_t trainer_state_counter(const nlohmann::json& state, const char* key, const std::string& source,
                              std::optional<int64_t> fallback = std::nullopt);

}  // namespace myriad
