// The training loop (docs/design.md §2, issue 5): the progressive context ladder, gradient accumulation over the
// sequences of a step, warmup + cosine, global-norm clipping, AdamW, MoE balancing between steps, NaN/inf
// steps skipped (and the run stopped after too many in a row, the last good checkpoint intact), periodic
// evaluation, atomic checkpoints, exact resumption, metrics as JSONL and a live progress line.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"
#include "dist/gradient_sync.h"
#include "dist/optimizer_sharding.h"
#include "dist/parallel_dims.h"
#include "model/transformer.h"
#include "model/vision_tower.h"
#include "train/fault_injection.h"
#include "train/optimizer.h"
#include "train/train_config.h"

namespace myriad {

struct TrainBatch {
  Tensor tokens;   // [T] i64
  Tensor targets;  // [T] i64 (-100 = ignore)
  // Images of the sequence, for a model with a vision tower: patches f32 [L, 3 p p] of the grids' images in
  // order (model/vision_tower.h); their tokens take the media placeholders of `tokens`. Undefined: text only.
  Tensor patches;
  std::vector<PatchGrid> grids;
  // A shard of a sequence (sequence parallelism) keeps the whole sequence's images; its placeholders take their
  // token rows from image_row_offset on (the placeholders before the shard).
  bool sequence_shard = false;
  int64_t image_row_offset = 0;
  // Distillation (train/distill.h): a teacher's next-token probabilities f32 [T, vocab]; the loss is then the
  // cross entropy against them (Transformer::distillation_loss) over the counted targets. Undefined: the targets'.
  Tensor teacher_probs = {};
};

// UTF-8 bytes the counted targets of a batch decode to in `tok` (BatchSource::target_bytes of text sources).
int64_t target_token_bytes(const TrainBatch& b, const Tokenizer& tok);

// Where batches come from (the shard loader; tests use their own). Must be resumable exactly.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual TrainBatch next(int64_t seq_len) = 0;
  // The ladder's stage the next batches are for (called before every step's batches; a source whose mix changes
  // with the stage keys on it).
  virtual void set_stage(int64_t /*stage*/) {}
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  // Up to max_batches validation batches of seq_len, always the same ones.
  virtual std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) = 0;
  // UTF-8 bytes the target tokens of a batch stand for (for bits per byte); 0 if unknown.
  virtual int64_t target_bytes(const TrainBatch& b) const = 0;
};

struct TrainerOptions {
  std::string run_dir;
  std::string model_config_json;  // the config file's bytes, copied into checkpoints
  std::string tokenizer_dir;      // copied into checkpoints when set
  int64_t stop_after_step = -1;   // end early (after this many steps in total) — tests, quick checks
  bool quiet = false;             // no progress line
  // Profile the first step's tensor memory (core/memory_profile.h): a "memory_profile" record with the split by
  // model part and phase at the step's peak, and a table on stderr.
  bool memory_profile = false;
  // Task evaluation (returns {"tasks": {...}, "samples": [...]}); optional. Run on the root only.
  std::function<nlohmann::json(const Transformer&)> evaluate_tasks;
  // The long-context grid (LongContextReport::to_json()) at the end of every stage of the ladder, logged as a
  // "longctx" record; optional. Run on the root only.
  std::function<nlohmann::json(const Transformer&)> evaluate_long_context;
  // The parallel layout (dist/parallel_dims.h); null: this process alone. Under data parallelism every data
  // rank reads the whole step's sequences in order and trains on its block of them (so the data position,
  // saved in checkpoints, is global); gradients, losses, the skip decision and the routing statistics are
  // reduced over the ranks; the root alone logs, prints and writes checkpoints (gathering the experts under
  // expert parallelism). The model must hold this rank's shard and its MoE dispatcher (train/run.cc).
  ProcessGroups* groups = nullptr;
  // ZeRO-1 (dist/optimizer_sharding.h): each rank keeps the optimizer state of its share of the replicated
  // tensors and updates those, then the owners broadcast the new values. The same weights, less memory.
  bool zero1 = false;
  // The gradient all-reduce of the step's last backward pass overlapped with it, layer by layer
  // (dist/gradient_sync.h), or after it: the same sums. Unset: overlapped where the communicator's buffers live on
  // a GPU (its own engines move the bytes while the cores compute; no such communicator yet), after it on CPU
  // ranks, where MPI's copies and sums take the same cores as the backward and the overlap measured ~6% slower per
  // step (docs/distributed.md).
  std::optional<bool> overlap_grad_sync;
};

struct TrainSummary {
  int64_t steps = 0;
  int64_t skipped = 0;
  double last_loss = 0;
  double last_val_loss = 0;
  double last_val_bpb = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double peak_gflops = 0;  // the MFU denominator (f32 FMA peak, all ranks)
  std::string last_checkpoint;
  bool root = true;                   // this process writes and reports (rank 0, or the only one)
  double grad_sync_s = 0;             // time the steps waited for the gradient reductions (0 in one process)
  double grad_sync_overlapped_s = 0;  // time spent on them inside the backward (overlap: packing, starting)
  double expert_exchange_s = 0;       // time in the expert-parallel all-to-alls (0 without --ep)
  double train_time_s = 0;            // time in training steps (the denominator of the share above)
};

// Every stage's sequences per step must split evenly over the data ranks (dp x ep): one kConfig error naming
// the stage and the numbers.
void validate_data_parallel_split(const TrainConfig& config, const ParallelDims& dims);

class Trainer {
 public:
  Trainer(Transformer& model, TrainConfig config, BatchSource& data, TrainerOptions options);
  // Continues from a checkpoint directory (a run dir or a checkpoint): weights, optimizer, data position, step.
  void resume(const std::string& dir);
  // Starts from the weights of a checkpoint directory (a run dir or a checkpoint) of the same config; the
  // optimizer, step and data position stay new.
  void init_from(const std::string& dir);
  TrainSummary run();

 private:
  nlohmann::json evaluate(int64_t seq_len);
  // model_.forward of a batch, its images (if any) encoded by the vision tower on the same tape.
  ForwardResult forward(const TrainBatch& b, ForwardOptions fo);
  void long_context_eval(int64_t stage);  // the options' long-context grid, logged (root only)
  void balance(const std::vector<RoutingStats>& routing, const std::vector<int64_t>& total_tokens);
  void log(const nlohmann::json& record);
  void log_memory_profile(double resident_peak_bytes);  // ends the first step's profile: record + table
  std::string save(int64_t step);

  Transformer& model_;
  TrainConfig cfg_;
  BatchSource& data_;
  TrainerOptions opt_;
  std::unique_ptr<AdamW> adamw_;  // over the tensors whose optimizer state this rank keeps (all, or its ZeRO-1 share)
  int64_t step_ = 0;              // steps done
  int64_t skipped_total_ = 0;
  int64_t consecutive_skips_ = 0;
  NanFault fault_ = nan_fault_from_env();  // tests only (fault_injection.h)
  int64_t tokens_seen_ = 0;
  double peak_gflops_ = 0;  // the f32 FMA peak of every rank, summed: the MFU denominator
  std::string last_checkpoint_;
  SingleCommunicator single_;
  ProcessGroups own_groups_;  // the one-process layout when options.groups is null
  ProcessGroups* groups_ = nullptr;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<OptimizerSharding> sharding_;  // ZeRO-1 (options.zero1), else null
  bool root() const { return groups_->is_root(); }
};

}  // namespace myriad
