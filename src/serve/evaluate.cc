#include "serve/evaluate.h"

#include <algorithm>
#include <cmath>

#include "ops/kernels.h"

namespace myriad {

ServedEval evaluate_served(const InferenceModel& model, const std::vector<int32_t>& tokens, int64_t window,
                           const InferenceModel* reference, const ServedEvalOptions& options) {
  const ModelConfig& c = model.config();
  MYRIAD_REQUIRE(window >= 1 && window <= c.max_position_embeddings, kValue, "evaluation window ", window,
                 ": must lie in [1, max_position_embeddings = ", c.max_position_embeddings, "]");
  MYRIAD_REQUIRE(tokens.size() >= 2, kValue, "evaluation needs at least 2 tokens, got ", tokens.size());
  MYRIAD_REQUIRE(!reference || reference->vocab_size() == model.vocab_size(), kValue,
                 "evaluation: the reference's vocabulary (", reference ? reference->vocab_size() : 0,
                 ") differs from the model's (", model.vocab_size(), ")");
  const int64_t n = int64_t(tokens.size()), V = model.vocab_size();
  double loss = 0, kl = 0;
  int64_t count = 0, agree = 0;
  auto log_probs = [&](const InferenceModel& m, std::span<const int32_t> ids, DType cache_dtype) {
    SequenceState s = m.new_sequence(MlaCache::kDefaultPageTokens, cache_dtype);
    Tensor logits;
    if (options.decode) {
      logits = Tensor::empty({int64_t(ids.size()), V});
      for (size_t t = 0; t < ids.size(); ++t) {
        const BatchEntry e{&s, ids.subspan(t, 1)};
        const Tensor row = m.forward(std::span<const BatchEntry>(&e, 1));
        std::copy(row.data<float>(), row.data<float>() + V, logits.data<float>() + int64_t(t) * V);
      }
    } else {
      const BatchEntry e{&s, ids};
      logits = m.forward(std::span<const BatchEntry>(&e, 1), /*all_logits=*/true);
    }
    Tensor lp = Tensor::empty(logits.shape());
    ops::log_softmax_forward(logits.device(), lp.data<float>(), logits.data<float>(), logits.size(0), V);
    return lp;
  };
  for (int64_t begin = 0; begin + 1 < n; begin += window) {
    const int64_t len = std::min(window, n - 1 - begin);
    const std::span<const int32_t> ids(tokens.data() + begin, size_t(len));
    const Tensor lp = log_probs(model, ids, options.cache_dtype);
    Tensor lr;
    if (reference) lr = log_probs(*reference, ids, DType::kF32);
    for (int64_t t = 0; t < len; ++t) {
      const float* row = lp.data<float>() + t * V;
      loss -= double(row[tokens[size_t(begin + t + 1)]]);
      if (!reference) continue;
      const float* ref = lr.data<float>() + t * V;
      double d = 0;
      for (int64_t v = 0; v < V; ++v) d += std::exp(double(ref[v])) * (double(ref[v]) - double(row[v]));
      kl += d;
      agree += std::max_element(row, row + V) - row == std::max_element(ref, ref + V) - ref ? 1 : 0;
    }
    count += len;
  }
  ServedEval r;
  r.tokens = count;
  r.loss = loss / double(count);
  r.perplexity = std::exp(r.loss);
  if (reference) {
    r.kl = kl / double(count);
    r.top1_agree = double(agree) / double(count);
  }
  return r;
}

}  // namespace myriad
