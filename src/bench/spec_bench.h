// `myriad bench spec`: speculative decoding (infer/speculative.h) through the serving engine, each row timed
// against the same engine without speculation, interleaved (plain, speculative, plain, ...; best of rounds), greedy:
//   1. draft model (--draft-model): batch-1 decode of a continuation of a text from the target's own data,
//   2. n-gram drafts on a copy-heavy task: a document followed by the start of an edited copy of it (a handful of
//      words changed), the model asked to go on writing the copy,
//   3. batch 16: sixteen requests at once with speculation as configured (spec_max_batch: off at this size) and
//      forced on, against none.
// Each row prints tokens/s of both, their ratio, the acceptance rate and tokens per verify, and the plain decode's
// weight stream (active weight bytes per token x tokens/s) against the triad measured in the same run: the
// ceiling plain decoding cannot pass and speculation exists to get around; and the bound the weight stream puts on
// the speed-up at the acceptance measured (a verify of 1 + d tokens of an MoE model reaches more routed experts
// than one token does). The greedy texts of both sides must be equal (checked: a mismatch is reported, not hidden).
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/machine_limits.h"

namespace myriad::bench {

inline constexpr double kSpecDraftTarget = 1.8;   // batch-1 greedy with a distilled draft, over none
inline constexpr double kSpecNgramTarget = 1.5;   // n-gram drafts on the copy task, over none
inline constexpr double kSpecBatchTarget = 0.95;  // batch 16 (speculation as configured), over none: no loss

struct SpecBenchOptions {
  std::string model_dir;        // the target: a model directory or run
  std::string draft_model_dir;  // optional: row 1
  int64_t spec_tokens = 6;
  int64_t tokens = 192;       // generated per request
  int64_t rounds = 3;         // interleaved repeats per row
  int64_t doc_tokens = 1024;  // the copy task's document
};

nlohmann::ordered_json run_spec_bench(const SpecBenchOptions& opt, const MachineLimits& limits, FILE* out);

}  // namespace myriad::bench
