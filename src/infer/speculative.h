// Speculative decoding (Leviathan et al. 2023; Chen et al. 2023). Batch-1 decoding on a CPU is bound by memory
// bandwidth: every token streams the activated weights once. A cheap drafter proposes k tokens; the target model
// runs [last chosen token, d1 .. dk] as one chunk over the sequence's states (the weights streamed once for k + 1
// positions) and returns k + 1 distributions; drafts are accepted left to right by the speculative sampling rule,
// so that the output has exactly the target's distribution under every sampler setting (infer/sampling.h):
//   accept d with probability min(1, p(d) / q(d)); on the first rejection draw from normalize(max(0, p - q)) and
//   stop; when all k are accepted, draw one more ("bonus") token from the last position's p.
// p and q are the distributions the sampler draws from (penalties, logit_bias, the tool-call grammar, temperature
// and the top-k / top-p / min-p truncation applied as sample() applies them, with the output accepted so far).
// A deterministic drafter (n-grams) proposes point masses, q(d) = 1. Greedy: p is one-hot on the argmax, so a draft
// is accepted while it equals the target's argmax and the output is the non-speculative greedy output.
//
// Rollback: the verify chunk keeps the KDA states as of every position (SequenceState::begin_speculation), so a
// rejection at position j restores the state after j accepted tokens and truncates the MLA caches (pages freed);
// the sequence then equals one that never saw the rejected drafts (a test).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "infer/inference_model.h"
#include "infer/sampling.h"

namespace myriad {

// Step 5 with the generator's u in [0, 1): the first token whose cumulative probability exceeds u (greedy: the
// argmax).
int32_t draw_token(const TokenDistribution& d, double u);

// The speculative sampling rule for one drafted token `draft` with target distribution p and draft distribution q
// (null: a point mass on the draft). Returns true when accepted (u_accept * q(d) < p(d)); otherwise *replacement is
// drawn with u_residual from normalize(max(0, p - q)).
bool accept_draft(const TokenDistribution& p, const TokenDistribution* q, int32_t draft, double u_accept,
                  double u_residual, int32_t* replacement);

// Proposes tokens continuing a sequence.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to k tokens continuing prompt + output (output: the tokens generated so far, the newest last; the target
  // sampler has observed them). q: filled with each drafted token's distribution when the drafter samples them
  // (left empty by a deterministic drafter: point masses).
  virtual std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t k,
                                     const Sampler& target_sampler, std::vector<TokenDistribution>& q) = 0;
  virtual std::string name() const = 0;
};

// Prompt lookup (n-gram) drafts: the longest suffix of the context (max_n tokens down to min_n) that occurred
// before in it, and the tokens that followed its latest earlier occurrence. Pays on text that repeats its context
// (edits, retrieval, code). The index of the context's n-grams grows incrementally: O(new tokens * max_n) per call.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int64_t max_n = 4, int64_t min_n = 1);
  std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t k,
                             const Sampler& target_sampler, std::vector<TokenDistribution>& q) override;
  std::string name() const override { return "ngram"; }

 private:
  int64_t max_n_, min_n_;
  std::vector<int32_t> context_;                                 // what has been indexed (prompt + output)
  size_t prompt_size_ = 0;                                       // the prompt's length within context_
  int64_t indexed_ = 0;                                          // n-grams ending before this position are in the index
  std::vector<std::unordered_map<uint64_t, int64_t>> last_end_;  // per n: hash -> latest end position
};

// A smaller model with the same tokenizer, run on its own state and sampled with the target's settings (its own
// generator). kValue when its vocabulary or tokenizer differs from the target's, naming both models.
class ModelDrafter final : public Drafter {
 public:
  // check false: the caller has checked this pair already (the serving engine, once per server).
  ModelDrafter(std::shared_ptr<const InferenceModel> draft, const InferenceModel& target, uint64_t seed = 0,
               bool check = true);
  std::vector<int32_t> draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t k,
                             const Sampler& target_sampler, std::vector<TokenDistribution>& q) override;
  std::string name() const override { return "model " + model_->source(); }

 private:
  std::shared_ptr<const InferenceModel> model_;
  SequenceState state_;
  std::vector<int32_t> processed_;  // the tokens state_ holds
  uint64_t seed_;
  int64_t rounds_ = 0;
};

// Counters of one generation (or a server's lifetime).
struct SpeculationStats {
  int64_t verifies = 0;  // target forwards that verified drafts
  int64_t drafted = 0;
  int64_t accepted = 0;
  int64_t emitted = 0;  // tokens produced by those verifies (accepted + one each)
  double acceptance_rate() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_verify() const { return verifies > 0 ? double(emitted) / double(verifies) : 0.0; }
};

// Speculation for generate(): the drafter and how many tokens it proposes per verify.
struct SpeculativeConfig {
  Drafter* drafter = nullptr;  // null: no speculation
  int64_t tokens = 4;          // k, >= 1
  SpeculationStats* stats = nullptr;
};

// The acceptance half of a round, for a caller that ran the verify forward itself (the serving engine batches
// it with other sequences): `seq` began speculation at `start` tokens (SequenceState::begin_speculation) and has
// since processed [last chosen token, drafts...]; logits: their 1 + drafts.size() rows [., vocab] (scratch:
// penalised in place). Accepts left to right, returns the chosen tokens (each observed by `sampler`), rewinds
// seq to [last chosen, accepted drafts] and ends its speculation.
std::vector<SampledToken> accept_verified(SequenceState& seq, int64_t start, Sampler& sampler,
                                          std::span<const int32_t> drafts, const std::vector<TokenDistribution>& q,
                                          float* logits, int64_t vocab, std::span<const int32_t> prompt,
                                          SpeculationStats* stats = nullptr);

// One round for one sequence: `seq` has processed prompt + output except `output.back()` (the last chosen token,
// observed by `sampler`). Drafts up to k tokens (k >= 1; fewer when the drafter has none), verifies them in one
// forward, and returns the chosen tokens (1 .. k + 1), each observed by `sampler`; seq then holds every returned
// token but the last. max_tokens caps the tokens returned (>= 1).
std::vector<SampledToken> speculative_round(const InferenceModel& target, SequenceState& seq, Sampler& sampler,
                                            Drafter& drafter, std::span<const int32_t> prompt,
                                            std::span<const int32_t> output, int64_t k, int64_t max_tokens,
                                            SpeculationStats* stats = nullptr);

}  // namespace myriad
