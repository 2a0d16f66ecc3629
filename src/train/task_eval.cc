#include "train/task_eval.h"

#include "core/error.h"
#include "infer/decode_weights.h"
#include "infer/generate.h"
#include "infer/inference_model.h"
#include "model/transformer.h"

namespace myriad {

double TaskScores::accuracy(TaskKind kind) const {
  for (const TaskScore& t : tasks)
    if (t.kind == kind) return t.accuracy();
  return 0.0;
}

std::map<std::string, double> TaskScores::by_name() const {
  std::map<std::string, double> m;
  for (const TaskScore& t : tasks) m[task_kind_name(t.kind)] = t.accuracy();
  return m;
}

double text_loss(const Transformer& model, const std::vector<Batch>& batches, int64_t kda_chunk) {
  ag::NoGradGuard no_grad;
  double nats = 0, n = 0;
  ForwardOptions fo;
  fo.kda_chunk = kda_chunk;
  for (const Batch& b : batches) {
    const Tensor tk = Tensor::from_vector(b.tokens, {int64_t(b.tokens.size())});
    const Tensor tg = Tensor::from_vector(b.targets, {int64_t(b.targets.size())});
    const ForwardResult r = model.forward(tk, tg, fo);
    nats += double(r.loss.value().data<float>()[0]) * double(b.targets.size());
    n += double(b.targets.size());
  }
  return n > 0 ? nats / n : 0.0;
}

std::vector<Batch> text_validation_batches(const std::string& shard_dir, int64_t seq_len, int64_t max_batches) {
  const Loader loader(shard_dir);
  const ValBatches vb = loader.val_batches(seq_len, 1);
  MYRIAD_REQUIRE(vb.size() > 0, kValue, shard_dir, " has no validation split to measure the text loss on");
  std::vector<Batch> out;
  for (int64_t i = 0; i < std::min<int64_t>(vb.size(), max_batches); ++i) out.push_back(vb[i]);
  return out;
}

TaskScores evaluate_tasks(const Transformer& model, const EncodeFn& encode, const DecodeFn& decode, int per_task,
                          uint64_t seed, int max_new_tokens, int32_t stop_id, int samples_per_task) {
  // The inference model over the training weights as they are now (views, no copy; built again on every call
  // because the decoders keep derived copies of some weights): the serving path's states and sampler.
  const InferenceModel inference(model.config(), DecodeWeights::from_model(model.weights()));
  return evaluate_tasks(inference, encode, decode, per_task, seed, max_new_tokens, stop_id, samples_per_task);
}

TaskScores evaluate_tasks(const InferenceModel& inference, const EncodeFn& encode, const DecodeFn& decode, int per_task,
                          uint64_t seed, int max_new_tokens, int32_t stop_id, int samples_per_task) {
  MYRIAD_REQUIRE(per_task >= 0, kValue, "evaluate_tasks: per_task (", per_task, ") must be >= 0");
  MYRIAD_REQUIRE(encode && decode, kValue, "evaluate_tasks: encode and decode callbacks are required");
  // Stop once the continuation has reached the end of its line.
  const StopFn at_newline = [&decode](const std::vector<int32_t>& ids) {
    return decode(ids).find('\n') != std::string::npos;
  };
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  TaskScores scores;
  for (TaskKind kind : kTaskKinds) {
    TaskScore score{kind};
    int kept = 0;
    for (const TaskExample& ex : task_examples(kind, seed, per_task)) {
      const std::vector<int32_t> ids =
          generate(inference, encode(ex.prompt), max_new_tokens, greedy, stop_id, at_newline);
      const std::string continuation = decode(ids);
      const bool ok = answer_matches(continuation, ex.answer);
      score.correct += ok;
      ++score.total;
      if (kept < samples_per_task) {
        scores.samples.push_back({kind, ex.prompt, extract_answer(continuation), trimmed(ex.answer), ok});
        ++kept;
      }
    }
    scores.tasks.push_back(score);
  }
  return scores;
}

}  // namespace myriad
