// Generation for the paths that are not the server (the task evaluation during training, tests): one prompt
// through the inference model, prefilled in one forward and then continued token by token on its KDA states
// and MLA latent caches, each token chosen by the serving engine's Sampler. The same model code, states and
// sampler as `myriad serve` (serve/engine.h adds the scheduling of many requests around them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "infer/inference_model.h"
#include "infer/sampling.h"
#include "infer/speculative.h"

namespace myriad {

// Called after each new token with the tokens generated so far (the newest last); true stops generation.
using StopFn = std::function<bool(const std::vector<int32_t>& generated)>;

// Continues `prompt` (non-empty) by at most max_new_tokens tokens and returns the new ones only.
//  - sampling: SamplingParams (temperature 0 = greedy: argmax, ties to the lowest id; otherwise seeded and
//    deterministic for a given seed).
//  - stop_id (ignored when < 0): generation ends when it is produced; it is not included in the result.
//  - stop (optional): generation ends after the token on which it returns true; that token is included.
//  - a prompt longer than the model's max_position_embeddings is cut to its most recent tokens, and generation
//    ends when the context is full (the states hold every token: nothing can be dropped from the front).
//  - prefill_chunk > 0: the prompt is prefilled in forwards of at most that many tokens (a long prompt's
//    activations and MLA scores stay bounded); 0: in one forward.
//  - speculation (infer/speculative.h): with a drafter, each step verifies up to `tokens` drafts in one forward;
//    the output has the same distribution (greedy: the same tokens, to f32 rounding of the logits).
// Throws kValue on an empty prompt, a negative max_new_tokens or bad sampling parameters.
std::vector<int32_t> generate(const InferenceModel& model, std::span<const int32_t> prompt, int max_new_tokens,
                              const SamplingParams& sampling, int32_t stop_id, const StopFn& stop = {},
                              int64_t prefill_chunk = 0, const SpeculativeConfig& speculation = {});

}  // namespace myriad
