#include "infer/speculative.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

int32_t draw_token(const TokenDistribution& d, double u) {
  if (d.greedy) return d.argmax;
  double total = 0;
  for (float p : d.p) total += double(p);
  const double target = u * total;
  double acc = 0;
  int32_t chosen = d.argmax;  // rounding may leave target just above the final sum: the last positive one
  for (size_t i = 0; i < d.p.size(); ++i) {
    if (d.p[i] <= 0) continue;
    acc += double(d.p[i]);
    chosen = int32_t(i);
    if (acc > target) break;
  }
  return chosen;
}

bool accept_draft(const TokenDistribution& p, const TokenDistribution* q, int32_t draft, double u_accept,
                  double u_residual, int32_t* replacement) {
  MYRIAD_REQUIRE(draft >= 0 && size_t(draft) < p.p.size(), kValue, "speculation: drafted token ", draft,
                 " is outside the target's vocabulary [0, ", p.p.size(), ")");
  MYRIAD_REQUIRE(!q || q->p.size() == p.p.size(), kValue, "speculation: draft distribution over ", q ? q->p.size() : 0,
                 " tokens, target's over ", p.p.size());
  const double pd = double(p.p[size_t(draft)]);
  const double qd = q ? double(q->p[size_t(draft)]) : 1.0;
  if (u_accept * qd < pd) return true;
  // The residual max(0, p - q), drawn without forming it twice: total first, then the cumulative walk.
  auto residual = [&](size_t i) {
    const double qi = q ? double(q->p[i]) : (i == size_t(draft) ? 1.0 : 0.0);
    return std::max(0.0, double(p.p[i]) - qi);
  };
  double total = 0;
  for (size_t i = 0; i < p.p.size(); ++i) total += residual(i);
  int32_t chosen = p.argmax;
  if (total > 0) {
    const double target = u_residual * total;
    double acc = 0;
    for (size_t i = 0; i < p.p.size(); ++i) {
      const double r = residual(i);
      if (r <= 0) continue;
      acc += r;
      chosen = int32_t(i);
      if (acc > target) break;
    }
  }
  *replacement = chosen;
  return false;
}

// ---- n-gram drafts ----

namespace {

uint64_t ngram_hash(const int32_t* t, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ uint64_t(n);
  for (int64_t i = 0; i < n; ++i) {
    h ^= uint64_t(uint32_t(t[i]));
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

NgramDrafter::NgramDrafter(int64_t max_n, int64_t min_n) : max_n_(max_n), min_n_(min_n) {
  MYRIAD_REQUIRE(min_n >= 1 && max_n >= min_n && max_n <= 16, kValue, "ngram drafts: n from ", min_n, " to ", max_n,
                 " (need 1 <= min_n <= max_n <= 16)");
  last_end_.resize(size_t(max_n + 1));
}

std::vector<int32_t> NgramDrafter::draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t k,
                                         const Sampler&, std::vector<TokenDistribution>& q) {
  q.clear();
  const auto total = int64_t(prompt.size() + output.size());
  // A context that is not a continuation of the indexed one (a new request): start over.
  // Checked at its ends, not whole (that would be O(prompt) per round): a drafter serves one sequence, and a wrong
  // guess costs drafts, never correctness.
  const bool continues =
      int64_t(context_.size()) <= total && prompt_size_ == prompt.size() &&
      (prompt.empty() || (prompt.front() == context_.front() && prompt.back() == context_[prompt.size() - 1]));

  if (!continues) {
    prompt_size_ = prompt.size();
    context_.clear();
    indexed_ = 0;
    for (auto& m : last_end_) m.clear();
  }
  for (int64_t i = int64_t(context_.size()); i < total; ++i)
    context_.push_back(i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i - int64_t(prompt.size()))]);
  // Index every n-gram ending before the last token (the suffix looked up must find an EARLIER occurrence).
  for (; indexed_ < total - 1; ++indexed_)
    for (int64_t n = min_n_; n <= max_n_ && n <= indexed_ + 1; ++n)
      last_end_[size_t(n)][ngram_hash(context_.data() + indexed_ - n + 1, n)] = indexed_;
  std::vector<int32_t> out;
  if (k <= 0 || total < 2) return out;
  for (int64_t n = std::min(max_n_, total - 1); n >= min_n_; --n) {
    const int32_t* suffix = context_.data() + total - n;
    const auto it = last_end_[size_t(n)].find(ngram_hash(suffix, n));
    if (it == last_end_[size_t(n)].end()) continue;
    const int64_t end = it->second;
    if (!std::equal(suffix, suffix + n, context_.data() + end - n + 1)) continue;  // a hash collision
    for (int64_t j = end + 1; j < total && int64_t(out.size()) < k; ++j) out.push_back(context_[size_t(j)]);
    return out;
  }
  return out;
}

// ---- a draft model ----

ModelDrafter::ModelDrafter(std::shared_ptr<const InferenceModel> draft, const InferenceModel& target, uint64_t seed,
                           bool check)
    : model_(std::move(draft)), seed_(seed ^ 0x9e3779b97f4a7c15ull) {
  MYRIAD_REQUIRE(model_ != nullptr, kValue, "speculation: no draft model");
  const Tokenizer& a = model_->tokenizer();
  const Tokenizer& b = target.tokenizer();
  MYRIAD_REQUIRE(model_->vocab_size() == target.vocab_size(), kValue, "speculation: the draft model ", model_->source(),
                 " has vocab_size ", model_->vocab_size(), ", the target ", target.source(), " ", target.vocab_size(),
                 " (a draft must share the target's tokenizer and vocabulary)");
  if (check && a.loaded() && b.loaded()) {
    bool same = a.vocab_size() == b.vocab_size();
    int64_t first_diff = -1;
    for (int32_t i = 0; same && i < int32_t(a.vocab_size()); ++i)
      if (a.token_bytes(i) != b.token_bytes(i) || a.piece(i) != b.piece(i)) same = false, first_diff = i;
    MYRIAD_REQUIRE(same, kValue, "speculation: the draft model ", model_->source(), "'s tokenizer (", a.vocab_size(),
                   " tokens, ", a.hash(), ") differs from the target ", target.source(), "'s (", b.vocab_size(),
                   " tokens, ", b.hash(), ")",
                   first_diff >= 0 ? " at token " + std::to_string(first_diff) : std::string(),
                   ": a draft must share the target's tokenizer");
  }
  state_ = model_->new_sequence();
}

std::vector<int32_t> ModelDrafter::draft(std::span<const int32_t> prompt, std::span<const int32_t> output, int64_t k,
                                         const Sampler& target_sampler, std::vector<TokenDistribution>& q) {
  q.clear();
  const auto total = int64_t(prompt.size() + output.size());
  auto at = [&](int64_t i) {
    return i < int64_t(prompt.size()) ? prompt[size_t(i)] : output[size_t(i) - prompt.size()];
  };
  std::vector<int32_t> out;
  k = std::min(k, model_->config().max_position_embeddings - total);
  if (k <= 0 || total == 0) return out;
  // What the draft state already holds of this context: kept up to where the last round's drafts begin to differ
  // from what was accepted, rolled back there (the context before the last speculation is taken as unchanged: the
  // drafter serves one sequence, and a wrong guess would cost drafts, never correctness). The last token is fed
  // again when the state holds the whole context, its logits being needed.
  int64_t common = state_.speculating() ? state_.speculation_start() : 0;
  if (common > int64_t(processed_.size()) || common > total) common = 0;
  while (common < int64_t(processed_.size()) && common < total && processed_[size_t(common)] == at(common)) ++common;
  common = std::min(common, total - 1);
  if (common < state_.tokens) {
    if (state_.speculating() && common >= state_.speculation_start()) {
      state_.rewind(common);
    } else {  // the kept states do not reach back that far: start over
      state_ = model_->new_sequence();
      common = 0;
    }
  }
  processed_.resize(size_t(common));
  state_.end_speculation();
  // Feed the rest of the context (one forward), then sample k tokens one forward each, keeping the states so that
  // the next round can roll back to the accepted ones.
  std::vector<int32_t> feed;
  for (int64_t i = common; i < total; ++i) feed.push_back(at(i));
  Sampler sampler = target_sampler.fork(seed_ + uint64_t(rounds_++));
  state_.begin_speculation();
  for (int64_t i = 0; i < k; ++i) {
    const BatchEntry e{&state_, feed};
    Tensor logits = model_->forward(std::span<const BatchEntry>(&e, 1));
    model_->mask_padded_ids(logits.data<float>(), 1);
    processed_.insert(processed_.end(), feed.begin(), feed.end());
    TokenDistribution d = sampler.distribution(std::span<float>(logits.data<float>(), size_t(logits.numel())), prompt);
    const int32_t t = draw_token(d, d.greedy ? 0.0 : sampler.uniform());
    sampler.observe(t);
    out.push_back(t);
    q.push_back(std::move(d));
    if (int64_t(out.size()) == k || state_.tokens + 1 > model_->config().max_position_embeddings) break;
    feed.assign(1, t);
  }
  return out;
}

// ---- verification ----

std::vector<SampledToken> speculative_round(const InferenceModel& target, SequenceState& seq, Sampler& sampler,
                                            Drafter& drafter, std::span<const int32_t> prompt,
                                            std::span<const int32_t> output, int64_t k, int64_t max_tokens,
                                            SpeculationStats* stats) {
  MYRIAD_REQUIRE(!output.empty() && k >= 1 && max_tokens >= 1, kValue,
                 "speculation: a round needs the last chosen token, k >= 1 and room for a token (k ", k,
                 ", max_tokens ", max_tokens, ")");
  // No more drafts than the tokens still wanted (the last returned token is never a draft) or the context holds.
  k = std::min({k, max_tokens - 1, target.config().max_position_embeddings - seq.tokens - 1});
  std::vector<TokenDistribution> q;
  std::vector<int32_t> drafts = k > 0 ? drafter.draft(prompt, output, k, sampler, q) : std::vector<int32_t>{};
  if (int64_t(drafts.size()) > k) drafts.resize(size_t(k)), q.resize(std::min(q.size(), size_t(k)));
  MYRIAD_CHECK(q.empty() || q.size() == drafts.size(), "speculation: ", drafter.name(), " drafted ", drafts.size(),
               " tokens with ", q.size(), " distributions");
  std::vector<int32_t> chunk{output.back()};
  chunk.insert(chunk.end(), drafts.begin(), drafts.end());
  const int64_t start = seq.tokens;
  seq.begin_speculation();
  BatchEntry e{&seq, chunk};
  e.logit_rows = int64_t(chunk.size());
  Tensor logits = target.forward(std::span<const BatchEntry>(&e, 1));  // [1 + drafts, V]
  target.mask_padded_ids(logits.data<float>(), logits.size(0));
  return accept_verified(seq, start, sampler, drafts, q, logits.data<float>(), logits.size(1), prompt, stats);
}

std::vector<SampledToken> accept_verified(SequenceState& seq, int64_t start, Sampler& sampler,
                                          std::span<const int32_t> drafts, const std::vector<TokenDistribution>& q,
                                          float* logits, int64_t V, std::span<const int32_t> prompt,
                                          SpeculationStats* stats) {
  MYRIAD_REQUIRE(q.empty() || q.size() == drafts.size(), kValue, "speculation: ", drafts.size(), " drafts with ",
                 q.size(), " distributions");
  MYRIAD_REQUIRE(seq.speculating() && seq.tokens == start + 1 + int64_t(drafts.size()), kValue,
                 "speculation: the sequence processed ", seq.tokens - start, " tokens since ", start, ", not the ",
                 1 + drafts.size(), " of the verify chunk");
  std::vector<SampledToken> out;
  auto emit = [&](int32_t t, const TokenDistribution& p, const float* penalised) {
    SampledToken s;
    s.token = t;
    s.logprob = float(double(penalised[t]) - p.lse);
    s.top = p.top;
    sampler.observe(t);
    out.push_back(std::move(s));
  };
  size_t accepted = 0;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    float* row = logits + int64_t(i) * V;
    const TokenDistribution p = sampler.distribution(std::span<float>(row, size_t(V)), prompt);
    // Greedy draws nothing from the generator (as sample()): u = 0 accepts exactly when the draft is the argmax.
    auto u = [&] { return p.greedy ? 0.0 : sampler.uniform(); };
    if (i == drafts.size()) {  // every draft accepted: the bonus token
      emit(draw_token(p, u()), p, row);
      break;
    }
    const double u_accept = u(), u_residual = u();
    int32_t replacement = -1;
    if (accept_draft(p, q.empty() ? nullptr : &q[i], drafts[i], u_accept, u_residual, &replacement)) {
      emit(drafts[i], p, row);
      ++accepted;
      continue;
    }
    emit(replacement, p, row);
    break;
  }
  // The sequence keeps [last chosen, accepted drafts]; the final returned token is the next round's input.
  seq.rewind(start + 1 + int64_t(accepted));
  seq.end_speculation();
  if (stats) {
    ++stats->verifies;
    stats->drafted += int64_t(drafts.size());
    stats->accepted += int64_t(accepted);
    stats->emitted += int64_t(out.size());
  }
  return out;
}

}  // namespace myriad
