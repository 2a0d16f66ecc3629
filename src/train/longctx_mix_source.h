// Long-context task samples mixed into training (train.json `longctx_mix`, issue 17's ladder): a BatchSource over
// another one (the corpus) that replaces a fraction of its sequences by task samples of the sequence's length
// (data/datasets/longctx_tasks.h: the built-in prose with a needle at a random depth, the question, then the answer and
// the end-of-text token), so a model climbing the ladder learns to retrieve across its whole window. Which sequences
// are samples, their tasks, depths and numbers all follow from (seed, the sequence's index): resumption is exact.
// A sample is padded to the length with pad tokens; its only targets are the answer's tokens and the end-of-text
// (retrieval; the filler's language is the corpus sequences' job). The fraction may differ by stage of the ladder
// (LongTaskMixConfig::stage_fractions; set_stage).
// Validation batches are the inner source's (the corpus): the long-context grid measures retrieval.
#pragma once

#include <cstdint>
#include <memory>

#include "data/tokenize/tokenizer.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace myriad {

class LongTaskMixSource final : public BatchSource {
 public:
  // `tok` must outlive the source; pad_id fills a short sample (its targets ignored).
  LongTaskMixSource(std::unique_ptr<BatchSource> inner, const Tokenizer& tok, LongTaskMixConfig mix, uint64_t seed,
                    int32_t pad_id);

  TrainBatch next(int64_t seq_len) override;
  void set_stage(int64_t stage) override {
    fraction_ = mix_.fraction_of(stage);
    inner_->set_stage(stage);
  }
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  std::vector<TrainBatch> validation(int64_t seq_len, int64_t max_batches) override {
    return inner_->validation(seq_len, max_batches);
  }
  int64_t target_bytes(const TrainBatch& b) const override { return target_token_bytes(b, tok_); }

  // kConfig naming train.json's longctx_mix when a sequence of seq_len tokens cannot hold a sample of each task in
  // this tokenizer (checked at setup, for the shortest stage that mixes samples in).
  static void check_length(const Tokenizer& tok, const LongTaskMixConfig& mix, int64_t seq_len);

  // Whether sequence `index` is a task sample at the current stage's fraction (for tests and the metrics).
  bool is_task_sample(int64_t index) const;
  int64_t samples_drawn() const { return samples_; }

 private:
  std::unique_ptr<BatchSource> inner_;
  const Tokenizer& tok_;
  LongTaskMixConfig mix_;
  uint64_t seed_;
  int32_t pad_id_;
  double fraction_;      // the current stage's share of samples
  int64_t index_ = 0;    // sequences handed out
  int64_t samples_ = 0;  // of which task samples
};

}  // namespace myriad
