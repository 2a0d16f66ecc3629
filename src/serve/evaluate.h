// Quality of a model as served (quantized or not): next-token loss over a token stream through the inference
// model (serve/inference_model.h), and optionally the KL divergence of its next-token distributions from a
// reference model's (e.g. the f32 original of a quantized model) on the same positions. `myriad eval`.
//
// Windows: consecutive windows of `window` + 1 tokens sharing one token (every token but the first is a target
// once), each run from a fresh state as one prefill with the logits of every position.
//   loss       mean over targets of -log p(target)                 (nats; perplexity = e^loss)
//   kl         mean over positions of sum_v p_ref(v) (log p_ref(v) - log p(v))   (nats)
//   top1_agree fraction of positions where both models' most likely token is the same
#pragma once

#include <cstdint>
#include <vector>

#include "serve/inference_model.h"

namespace myriad {

struct ServedEval {
  int64_t tokens = 0;  // targets
  double loss = 0, perplexity = 0;
  double kl = 0, top1_agree = 0;  // with a reference only
};

// Throws kValue for fewer than 2 tokens or a window outside [1, max_position_embeddings], and when the
// reference's vocabulary differs.
ServedEval evaluate_served(const InferenceModel& model, const std::vector<int32_t>& tokens, int64_t window,
                           const InferenceModel* reference = nullptr);

}  // namespace myriad
