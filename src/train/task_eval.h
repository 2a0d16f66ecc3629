// The task evaluation that shows a user the model learning: greedy generation on the held-out prompts of every
// task (data/datasets/tasks.h), scored, accuracy per task in metrics.jsonl.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/datasets/loader.h"
#include "data/datasets/tasks.h"

namespace myriad {

class Transformer;
class InferenceModel;

using EncodeFn = std::function<std::vector<int32_t>(const std::string&)>;
using DecodeFn = std::function<std::string(const std::vector<int32_t>&)>;

struct TaskScore {
  TaskKind kind;
  int correct = 0;
  int total = 0;
  double accuracy() const { return total > 0 ? double(correct) / total : 0.0; }
};

struct TaskSample {
  TaskKind kind;
  std::string prompt, got, want;  // got: the extracted answer; want: the trimmed answer
  bool correct = false;
};

struct TaskScores {
  std::vector<TaskScore> tasks;     // one per kind, in kTaskKinds order
  std::vector<TaskSample> samples;  // the first few examples of each kind
  double accuracy(TaskKind kind) const;
  std::map<std::string, double> by_name() const;  // {"arithmetic": 0.12, ...} for metrics.jsonl
};

// Greedy evaluation on per_task held-out examples of every kind (task_examples(kind, seed, per_task)): each
// prompt is encoded with `encode` (which may prepend a document separator), continued for at most
// max_new_tokens (stopping at a decoded newline, or at stop_id when >= 0), decoded with `decode` and scored
// with answer_matches. Keeps samples_per_task samples of each kind.
// Mean next-token loss (nats) over batches of text (the first validation windows of a shard directory: how
// post-training's runs check that general ability is kept).
double text_loss(const Transformer& model, const std::vector<Batch>& batches, int64_t kda_chunk = 64);
// The first max_batches validation windows of length seq_len of a shard directory (kValue when it has none).
std::vector<Batch> text_validation_batches(const std::string& shard_dir, int64_t seq_len, int64_t max_batches);

TaskScores evaluate_tasks(const Transformer& model, const EncodeFn& encode, const DecodeFn& decode, int per_task,
                          uint64_t seed, int max_new_tokens, int32_t stop_id = -1, int samples_per_task = 2);
// The same on a served model (`myriad eval tasks` shows them beside the agent's success).
TaskScores evaluate_tasks(const InferenceModel& model, const EncodeFn& encode, const DecodeFn& decode, int per_task,
                          uint64_t seed, int max_new_tokens, int32_t stop_id = -1, int samples_per_task = 2);

}  // namespace myriad
