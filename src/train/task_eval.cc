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

TaskScores evaluate_tasks(const Transformer& model, const EncodeFn& encode, const DecodeFn& decode, int per_task,
                          uint64_t seed, int max_new_tokens, int32_t stop_id, int samples_per_task) {
  MYRIAD_REQUIRE(per_task >= 0, kValue, "evaluate_tasks: per_task (", per_task, ") must be >= 0");
  MYRIAD_REQUIRE(encode && decode, kValue, "evaluate_tasks: encode and decode callbacks are required");
  // Stop once the continuation has reached the end of its line.
  const StopFn at_newline = [&decode](const std::vector<int32_t>& ids) {
    return decode(ids).find('\n') != std::string::npos;
  };
  // The inference model over the training weights as they are now (views, no copy; built again on every call
  // because the decoders keep derived copies of some weights): the serving path's states and sampler.
  const InferenceModel inference(model.config(), DecodeWeights::from_model(model.weights()));
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
