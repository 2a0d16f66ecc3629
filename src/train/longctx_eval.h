// The long-context evaluation (`myriad eval longctx`): accuracy by GENERATED answer on the long-context tasks
// (data/datasets/longctx_tasks.h) over a grid of prompt lengths x needle depths, `samples` prompts per cell, greedy.
// Prompts are prefilled in chunks (prefill_chunk tokens per forward) on the model's states and caches, then the
// answer is decoded token by token, as `myriad serve` would.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/datasets/longctx_tasks.h"

namespace myriad {

class InferenceModel;
class Tokenizer;

struct LongContextOptions {
  LongTask task = LongTask::kPasskey;
  std::vector<int64_t> lengths;  // prompt tokens per row of the grid
  std::vector<int> depths;       // needle depth (percent) per column
  int samples = 4;               // prompts per cell
  uint64_t seed = 1234;
  int64_t prefill_chunk = 2048;
  int max_new_tokens = 12;  // the answer is 5 digits; generation also stops at a newline
};

struct LongContextCell {
  int64_t length = 0;
  int depth = 0;
  int correct = 0, samples = 0;
  double prompt_tokens = 0;  // mean
  double seconds = 0;
  std::string answer, got;  // the first sample's, for the report
  double accuracy() const { return samples > 0 ? double(correct) / samples : 0.0; }
};

struct LongContextReport {
  LongTask task = LongTask::kPasskey;
  std::vector<int64_t> lengths;
  std::vector<int> depths;
  std::vector<LongContextCell> cells;  // row-major: lengths x depths
  double seconds = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  nlohmann::json to_json() const;
};

// Parses "1K,4K,16384,1M" (K = 1024, M = 1048576) into token counts; kValue naming the item.
std::vector<int64_t> parse_token_lengths(const std::string& list);

// Checks everything before any work: kValue for no lengths or depths, a length < 1 or above max_context (naming
// both numbers), a depth outside 0..100, samples < 1.
void check_long_context_options(const LongContextOptions& o, int64_t max_context);

// The grid with any generator: `generate` returns the generated text for a sample (tests give oracles). on_cell
// (optional) is called as each cell completes.
using LongGenerateFn = std::function<std::string(const LongSample& sample, int64_t* generated_tokens)>;
LongContextReport evaluate_long_context(const LongContextOptions& o, const Tokenizer& tok, int64_t max_context,
                                        const LongGenerateFn& generate,
                                        const std::function<void(const LongContextCell&)>& on_cell = {});

// With a model: greedy generation through infer/generate.h.
LongContextReport evaluate_long_context(const InferenceModel& model, const Tokenizer& tok, const LongContextOptions& o,
                                        const std::function<void(const LongContextCell&)>& on_cell = {});

}  // namespace myriad
