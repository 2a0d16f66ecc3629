// Text generation from a Transformer: greedy (temperature 0) or sampled, for the task evaluation (tasks.h)
// and `myriad generate`.
//
// NOTE: every step recomputes the full forward over the whole context (no KV or recurrent-state cache). That
// is quadratic in the length, and fine for the tiny models trained here; the serving issue adds the caches.
// Left out: top-k / top-p, batching, repetition penalties.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace myriad {

class Transformer;

// Called after each new token with the tokens generated so far (the newest last); true stops generation.
using StopFn = std::function<bool(const std::vector<int32_t>& generated)>;

// Continues prompt_ids (non-empty) by at most max_new_tokens tokens and returns the new ones only.
//  - temperature 0: greedy (argmax; ties go to the lowest id); > 0: sampling from softmax(logits / temperature)
//    with a generator seeded from `seed` (deterministic for a given seed).
//  - stop_id (ignored when < 0): generation ends when it is produced; it is not included in the result.
//  - stop (optional): generation ends after the token on which it returns true; that token is included.
//  - a context longer than the model's max_position_embeddings is cut to its most recent tokens.
// Runs under NoGradGuard. Throws kValue on an empty prompt, a negative max_new_tokens or a bad temperature.
std::vector<int32_t> generate(const Transformer& model, const std::vector<int32_t>& prompt_ids, int max_new_tokens,
                              float temperature, uint64_t seed, int32_t stop_id, const StopFn& stop = {});

}  // namespace myriad
