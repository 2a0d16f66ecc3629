#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

std::vector<int32_t> generate(const InferenceModel& model, std::span<const int32_t> prompt, int max_new_tokens,
                              const SamplingParams& sampling, int32_t stop_id, const StopFn& stop,
                              int64_t prefill_chunk, const SpeculativeConfig& speculation) {
  MYRIAD_REQUIRE(!prompt.empty(), kValue, "generate: the prompt is empty (it needs at least one token)");
  MYRIAD_REQUIRE(max_new_tokens >= 0, kValue, "generate: max_new_tokens (", max_new_tokens, ") must be >= 0");
  MYRIAD_REQUIRE(prefill_chunk >= 0, kValue, "generate: prefill_chunk (", prefill_chunk, ") must be >= 0");
  MYRIAD_REQUIRE(!speculation.drafter || speculation.tokens >= 1, kValue, "generate: speculative tokens (",
                 speculation.tokens, ") must be >= 1");
  Sampler sampler(sampling);  // validates
  std::vector<int32_t> out;
  if (max_new_tokens == 0) return out;
  const int64_t max_context = model.config().max_position_embeddings;
  const std::span<const int32_t> tail = prompt.subspan(prompt.size() - std::min<size_t>(prompt.size(), max_context));
  SequenceState seq = model.new_sequence();
  std::span<const int32_t> feed = tail;
  if (prefill_chunk > 0) {  // all but the last chunk: their logits are not needed
    while (int64_t(feed.size()) > prefill_chunk) {
      const BatchEntry e{&seq, feed.first(size_t(prefill_chunk))};
      (void)model.forward(std::span<const BatchEntry>(&e, 1));
      feed = feed.subspan(size_t(prefill_chunk));
    }
  }
  int32_t next = -1;
  bool more = true;  // the loop below ended only to hand over to speculative rounds
  for (int64_t context = int64_t(tail.size() - feed.size());;) {
    const BatchEntry e{&seq, feed};
    Tensor logits = model.forward(std::span<const BatchEntry>(&e, 1));  // [1, vocab]
    context += int64_t(feed.size());
    model.mask_padded_ids(logits.data<float>(), 1);
    const SampledToken t = sampler.sample(std::span<float>(logits.data<float>(), size_t(logits.numel())), tail);
    more = false;
    if (stop_id >= 0 && t.token == stop_id) break;
    out.push_back(t.token);
    sampler.observe(t.token);
    if ((stop && stop(out)) || int64_t(out.size()) >= max_new_tokens || context >= max_context) break;
    more = true;
    if (speculation.drafter) break;  // the rest in speculative rounds
    next = t.token;
    feed = std::span<const int32_t>(&next, 1);
  }
  if (!speculation.drafter || !more) return out;
  for (;;) {
    const std::vector<SampledToken> round =
        speculative_round(model, seq, sampler, *speculation.drafter, tail, out, speculation.tokens,
                          max_new_tokens - int64_t(out.size()), speculation.stats);
    for (const SampledToken& t : round) {
      if (stop_id >= 0 && t.token == stop_id) return out;
      out.push_back(t.token);
      if ((stop && stop(out)) || int64_t(out.size()) >= max_new_tokens) return out;
    }
    if (seq.tokens >= max_context) return out;  // the context is full (the last token cannot be fed)
  }
}

}  // namespace myriad
