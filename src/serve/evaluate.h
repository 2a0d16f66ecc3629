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

#include "infer/inference_model.h"

namespace myriad {

struct ServedEval {
  int64_t tokens = 0;  // targets
  double loss = 0, perplexity = 0;
  double kl = 0, top1_agree = 0;  // with a reference only
};

// How the model under evaluation runs (the reference always runs the f32 cache the same way):
//   cache_dtype  its MLA latent cache (kF32, kBF16, kQ8_0: MlaCache)
//   decode       every window token by token (the recurrent KDA and absorbed MLA decode path: what serving runs
//                after the prompt) instead of one prefill per window
struct ServedEvalOptions {
  DType cache_dtype = DType::kF32;
  bool decode = false;
};

// Throws kValue for fewer than 2 tokens or a window outside [1, max_position_embeddings], and when the
// reference's vocabulary differs.
ServedEval evaluate_served(const InferenceModel& model, const std::vector<int32_t>& tokens, int64_t window,
                           const InferenceModel* reference = nullptr, const ServedEvalOptions& options = {});

}  // namespace myriad
