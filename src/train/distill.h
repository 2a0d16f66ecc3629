// `myriad distill`: a small draft model for speculative decoding (infer/speculative.h) trained on what a target
// (teacher) model predicts. Every training sequence is a window of the data with the teacher's next-token
// distribution at each position (one prefill of the teacher), and the loss is the cross entropy against those
// distributions (Transformer::distillation_loss: KL(teacher || draft) up to the teacher's entropy), so the draft
// learns the teacher's whole distribution rather than one sampled token. A share of the sequences are the teacher's
// own generations: the window's first half continued by the teacher (sampled at `temperature`), which puts the
// draft on the text it will be asked to predict while serving (Kim & Rush 2016's sequence-level distillation
// beside the word-level one).
//
// The run is a training run (train.json, config.json, metrics.jsonl, checkpoints/, tokenizer/: the teacher's) with
// distill.json (teacher, data, share, temperature), resumable exactly; the draft's config is the one given with
// the teacher's vocab_size. One process (no mpirun layouts).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/datasets/loader.h"
#include "infer/inference_model.h"
#include "train/trainer.h"

namespace myriad {

struct DistillRequest {
  std::string teacher;       // a model directory or training run (its latest checkpoint)
  std::string draft_config;  // the draft's config.json (its vocab_size is replaced by the teacher's)
  std::string data;          // prepared shards; empty: the teacher run's own (<run>/data)
  std::string out_dir;
  std::string train_config_path;  // empty: one stage of min(256, context) tokens, 300 steps (below)
  std::string resume;             // a distill run to continue
  double generated_share = 0.125;
  float temperature = 1.0f;  // of the teacher's distributions and generations
  bool force = false;
  bool quiet = false;
  int64_t stop_after_step = -1;
  std::optional<int64_t> steps;
  std::optional<uint64_t> seed;
};

TrainSummary run_distill(const DistillRequest& req);

// The training sequences of a distillation (see the top): data windows, a share of them continued by the
// teacher, each with the teacher's probabilities. Resumable exactly (the loader's position and the count).
class DistillSource final : public BatchSource {
 public:
  DistillSource(std::shared_ptr<const InferenceModel> teacher, const std::string& data_dir, uint64_t seed,
                double generated_share, float temperature);
  TrainBatch next(int64_t seq_len) override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override;
  int64_t target_bytes(const TrainBatch& b) const override;
  int64_t generated() const { return generated_; }

 private:
  // tokens + targets from T + 1 ids, with the teacher's probabilities.
  TrainBatch labelled(const std::vector<int64_t>& ids) const;

  std::shared_ptr<const InferenceModel> teacher_;
  Loader loader_;
  uint64_t seed_;
  double share_;
  float temperature_;
  int64_t count_ = 0, generated_ = 0;
};

}  // namespace myriad
