// Next-token selection for the serving engine (docs/design.md §3): greedy, temperature, top-k, top-p, min-p,
// repetition / frequency / presence penalties, a seed per request, and log-probabilities with the top alternatives.
//
// Order of operations on the logits of one position (the order vLLM and llama.cpp use, written out here so that
// a user can predict the result):
//   0. logit_bias added to the model's logits; then, with a tool-call grammar, -inf on every token it does not
//      allow here (data/chat/tool_call_grammar.h).
//   1. penalties on the raw logits:
//        repetition_penalty r (CTRL, Keskar et al. 2019), for every token seen in the prompt or the output:
//          logit > 0 ? logit / r : logit * r
//        frequency_penalty f and presence_penalty p (OpenAI), for tokens in the OUTPUT only, with c = its count:
//          logit -= c * f + (c > 0) * p
//      (repetition first, then frequency/presence; each token is penalised once however often it occurs).
//   2. logprobs: log_softmax of the penalised logits (before temperature and truncation): what is reported for
//      the chosen token and the top alternatives.
//   3. temperature == 0: greedy (argmax; ties to the lowest id), steps 4-5 skipped.
//   4. divide by temperature; softmax; truncate: top_k (> 0: keep the k most likely), then top_p (< 1: the
//      smallest set, by descending probability, whose mass reaches top_p, the mass measured after renormalising
//      over the top_k survivors), then min_p (> 0: drop tokens whose probability is below min_p * the largest);
//      the most likely token always survives. "Most likely" orders by penalised logit, ties to the lowest id.
//   5. sample from the renormalised survivors with u in [0, 1) from the request's std::mt19937_64 (53 bits);
//      greedy draws nothing from it.
// Deterministic for a given seed and logits. Cost: O(vocab) passes (vectorised exps), never a sort of the whole
// vocabulary: top_k selects with a heap or nth_element, top_p with a histogram of the mass (sampling.cc).
// Logits may be -inf (masked: never drawn) but not NaN or +inf after the penalties; a prompt id (when the
// repetition penalty is on) or an output id (when any penalty is on) outside [0, vocab) is an error (kValue).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "data/chat/tool_call_grammar.h"

namespace myriad {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  int64_t top_logprobs = 0;  // alternatives to report per token (0..20)
  // OpenAI's logit_bias: (token id, bias) added to the model's logits before anything else (-100 bans a token,
  // +100 all but forces it). Ids in [0, vocab), biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Constrained tool calls (data/chat/tool_call_grammar.h): the grammar's mask follows logit_bias (step 0), so the
  // reported logprobs are those of the masked distribution. tool_grammar_start: the forced start of the reply
  // (tokens the prompt ends with, read as the reply's first ones: tool_choice required or a named function), fed
  // to the grammar before the first draw. Every chosen token (observe()) moves the grammar on.
  std::shared_ptr<const ToolCallGrammar> tool_grammar;
  std::vector<int32_t> tool_grammar_start;
};

// Throws kValue naming the field and the rule: temperature finite and >= 0; top_k >= 0; top_p in (0, 1];
// min_p in [0, 1]; repetition_penalty finite and > 0; frequency/presence penalties finite, in [-2, 2];
// top_logprobs in [0, 20]; every logit_bias id in [0, 2^24) and bias in [-100, 100] (the vocabulary bound is
// checked against the logits in sample()).
void validate(const SamplingParams& p);

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0;              // of the chosen token (step 2)
  std::vector<TokenLogprob> top;  // the top_logprobs most likely (step 2), descending
};

// The distribution step 5 draws from, over the whole vocabulary (speculative decoding compares a target's with a
// draft's: infer/speculative.h). p[t]: the renormalised survivors' probabilities (zero elsewhere); greedy: 1 on the
// argmax. lse and top: step 2's normaliser and alternatives, for the chosen token's reported logprob.
struct TokenDistribution {
  std::vector<float> p;  // [vocab], sums to 1 (to rounding)
  int32_t argmax = -1;   // the most likely token (the greedy choice)
  bool greedy = false;
  double lse = 0;
  std::vector<TokenLogprob> top;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);  // validates
  // logits [vocab] is scratch (modified in place). prompt: the request's prompt ids. The output's tokens (for the
  // penalties) are counted incrementally: call observe() after every chosen token (ids in [0, 2^24)).
  SampledToken sample(std::span<float> logits, std::span<const int32_t> prompt);
  // Steps 0-4 as sample() runs them, without the draw: what sample() would draw from. logits become the penalised
  // ones (the chosen token's logprob is logits[t] - lse).
  TokenDistribution distribution(std::span<float> logits, std::span<const int32_t> prompt);
  // u in [0, 1) from the request's generator (53 bits), the draw sample() makes.
  double uniform();
  void observe(int32_t token);
  const SamplingParams& params() const { return p_; }
  // A copy with the same settings and observed output but its own generator seeded with `seed`: a draft's sampler,
  // whose draws must be independent of the target's.
  Sampler fork(uint64_t seed) const;

 private:
  // Steps 0-4: the candidates in order_ (listed) or every id, with weights in probs_ by id; fills result's top.
  struct Candidates {
    int32_t best = -1;
    double lse = 0, z = 0;
    bool sampling = false, listed = false;
  };
  Candidates prepare(std::span<float> logits, std::span<const int32_t> prompt, SampledToken& result);

  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> out_count_;          // per token id, grown on demand
  std::vector<int32_t> out_tokens_;         // the distinct ids of the output, in order of first appearance
  std::optional<ToolCallMatcher> grammar_;  // with tool_grammar
  std::vector<uint8_t> mark_;               // scratch per token id (repetition penalty applied); all zero between calls
  std::vector<float> probs_;                // scratch
  std::vector<int32_t> order_;              // scratch
};

}  // namespace myriad
