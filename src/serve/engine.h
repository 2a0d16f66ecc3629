// The serving engine (docs/design.md §3): continuous batching of generation requests over one InferenceModel.
//
// Each engine step runs ONE batched forward (InferenceModel::forward) over every running sequence: a sequence
// still in its prompt contributes its next prefill chunk, a decoding one its last token. New requests join
// between steps; finished or cancelled ones leave and free their state at once. Prompts are prefilled in chunks
// of at most `prefill_chunk` tokens per step (shared by all prefilling sequences), so a long prompt never stalls
// the decoding sequences for more than one chunk.
//
// Memory: every sequence holds its KDA states (fixed size) and its MLA latent pages. Admission reserves, per
// request, the KDA state plus the pages for prompt + max_tokens; a request waits while the reservations of the
// running ones leave no room in `cache_mb`, and one that could never fit is refused at submit(). So a running
// sequence never runs out of pages (no preemption needed).
//
// Prefix reuse: while prefilling, a sequence leaves a snapshot every `prefix_every` prompt tokens: clones of its
// KDA states (all layers or none) and its full MLA pages, which are then shared, not copied (a full page is never
// written again); a page the snapshot ends inside is copied, and copied again for each sequence resuming from it
// (copy on write), so the snapshot interval is free of the page size. A new prompt that starts with a stored
// prefix resumes from the longest one (leaving at least one token to prefill, for its logits). Snapshots live in
// an LRU of `prefix_cache_mb`.
//
// A model without a tokenizer is served as token ids only (events carry no text; stop strings are refused).
//
// Threads: submit() and cancel() may be called from any thread. After start(), a background thread runs the
// steps and calls each request's sink from that thread (a sink must not block for long). Without start(), the
// caller drives the engine with step() / run_until_idle() (tests, benchmarks, the CLI).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "infer/inference_model.h"
#include "infer/sampling.h"
#include "infer/speculative.h"
#include "model/vision_tower.h"

namespace myriad {

struct EngineOptions {
  int64_t cache_mb = 1024;          // sequence state budget (KDA states + MLA pages)
  int64_t page_tokens = 64;         // MLA cache page size in tokens
  DType cache_dtype = DType::kF32;  // MLA cache rows: kF32, kBF16 (half the memory) or kQ8_0 (int8; MlaCache)
  int64_t max_batch = 16;           // sequences running at once
  int64_t prefill_chunk = 256;      // prompt tokens per step, over all prefilling sequences
  int64_t max_waiting = 64;         // queued requests beyond this are refused (kBusy)
  int64_t prefix_every = 256;       // prefix snapshot interval in tokens (any: see Prefix reuse); 0 = off
  int64_t prefix_cache_mb = 256;    // budget of the prefix snapshots
  // Sequence-parallel prefill (serve/sequence_server.h): when set, a prompt that starts from nothing (no
  // prefix-cache hit) is prefilled in one step by long_prefill (which fills the fresh state from the tokens given
  // and returns their last logits [1, vocab]) instead of in chunks, up to its last prefix snapshot boundary (the
  // snapshot is stored; the rest, fewer than prefix_every tokens, then prefills in chunks) or whole with
  // prefix_every 0, when that is at least long_prefill_min tokens. The step's other sequences wait for it.
  std::function<Tensor(SequenceState& state, std::span<const int32_t> prompt)> long_prefill;
  int64_t long_prefill_min = 1;
  // Speculative decoding (infer/speculative.h): draft "ngram" (prompt lookup) or "model" (draft_model, which must
  // share the model's tokenizer; each sequence runs it on a state of its own, outside cache_mb); "" = off. A
  // decoding sequence verifies up to spec_tokens drafts per step, fewer after rejections (its own k: one less
  // after a rejection, two more after a verify that accepts every draft). Steps with more than spec_max_batch decoding
  // sequences do not speculate: their products are no longer bound by reading the weights, so verifying drafts costs
  // compute.
  std::string draft;
  std::shared_ptr<const InferenceModel> draft_model;
  int64_t spec_tokens = 6;  // measured: bench spec, README "Speculative decoding"
  int64_t spec_max_batch = 4;
};

// The --cache-dtype names: "f32", "bf16", "q8" (kQ8_0); anything else is a kValue error naming the choices.
DType cache_dtype_from_name(const std::string& name);

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, non-empty
  // Images: f32 [placeholders in prompt, hidden_size] (InferenceModel::encode_images), the rows that take the
  // place of the prompt's media_placeholder_token_id tokens in order; undefined: none. Prefix reuse keys a prefix
  // that holds image tokens by the content of those rows too, so another image never reuses its states.
  Tensor image_rows;
  // Or the images as patches (infer/image_input.h): f32 [patch rows, 3 p p] and each image's grid, in order; each
  // image takes a run of vision_tokens(grid) placeholders (adjacent images may share a run). The engine encodes
  // the images of every request that starts in a step in one call of the vision tower, and keys prefixes by the
  // patches (the images' decoded content).
  Tensor image_patches;
  std::vector<PatchGrid> image_grids;
  int64_t max_tokens = 16;  // > 0
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (never part of the output)
  bool stop_at_eos = true;        // <|endoftext|> and </s> end generation (not part of the output)
  // Routing replay (RL): the last event carries the experts of every token the model processed (prompt and
  // generated, the last sampled token excepted: it was never fed back). Prefix snapshots stored by such requests
  // keep their routing; a snapshot without it is not reused for one.
  bool record_routing = false;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error", ""

// Sent to a request's sink once per generated token (token >= 0), and a last time with finish != kNone
// (token -1 unless it is the last token's own event: a request that ends on max_tokens gets its last token and
// the finish together). text: the new text that became safe to show (whole UTF-8 characters; a possible stop
// string is held back).
struct TokenEvent {
  uint64_t request = 0;
  int32_t token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;          // with kError
  int32_t end_token = -1;     // with kStop at <|endoftext|> or </s>: that token (not part of the output) ...
  float end_logprob = 0;      // ... and its logprob (RL trains on the end of a reply too)
  int64_t prompt_tokens = 0;  // usage, on the last event
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens reused from the prefix cache
  // With GenerationRequest::record_routing, on the last event: per layer, the experts of each processed token
  // (SequenceState::routing: k per token; empty on layers without MoE).
  std::vector<std::vector<int32_t>> routing;
};
// The event is the sink's to take from (a sink may move TokenEvent::routing out); sinks that only read it take a
// const reference.
using EventSink = std::function<void(TokenEvent&)>;

// Prometheus-style histogram (cumulative buckets, seconds).
struct LatencyHistogram {
  static constexpr double kBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  static constexpr size_t kBuckets = sizeof(kBounds) / sizeof(kBounds[0]);
  uint64_t counts[kBuckets + 1] = {};  // per bucket (not cumulative); last = above every bound
  double sum = 0;
  uint64_t count = 0;
  void observe(double seconds);
};

struct EngineMetrics {
  uint64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, generated_tokens = 0, prefix_hits = 0, prefix_tokens_reused = 0, steps = 0;
  uint64_t long_prefills = 0;  // prompts prefilled by EngineOptions::long_prefill
  int64_t running = 0, waiting = 0;
  size_t cache_bytes_used = 0, cache_bytes_reserved = 0, cache_bytes_budget = 0, prefix_cache_bytes = 0;
  LatencyHistogram time_to_first_token, time_per_output_token;
  // Speculative decoding: verify forwards, drafted and accepted tokens, tokens those verifies produced.
  uint64_t spec_verifies = 0, spec_drafted = 0, spec_accepted = 0, spec_emitted = 0;
};

class Engine {
 public:
  Engine(std::shared_ptr<const InferenceModel> model, EngineOptions options = {});
  ~Engine();  // stops the thread; pending requests get a kCancelled event
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; returns its id. Throws kValue for a bad request (empty prompt, a token id outside the
  // vocabulary, max_tokens <= 0, bad sampling parameters, prompt + max_tokens longer than the context: the
  // message gives both counts, or more cache than the whole budget) and kBusy when max_waiting are queued.
  uint64_t submit(GenerationRequest request, EventSink sink);
  // Cancels a queued or running request (its state is freed at the next step; its sink gets kCancelled).
  // Unknown or finished ids are ignored.
  void cancel(uint64_t id);

  void start();  // the background thread
  void stop();   // joins it; queued and running requests are cancelled
  // One scheduling step (admit, one batched forward, sample, retire). Returns false when there was nothing to do.
  bool step();
  void run_until_idle();

  // Sequence state files (infer/sequence_file.h), so that a long prompt is prefilled once: save_prefix writes the
  // longest prefix snapshot this engine holds of `prompt` (a prompt it has prefilled: snapshots are taken every
  // prefix_every tokens) and returns its length, 0 when it holds none (nothing written). load_prefix reads one
  // into the prefix cache, pinned (never evicted; counted in prefix_cache_bytes): a prompt that starts with its
  // tokens (and at least one more) resumes from it. Returns its length; kValue for a state of another model,
  // kFormat for a damaged file. save_prefix waits for the step in progress only to take a shared copy of the
  // snapshot (the file is written outside the engine's lock, so running sequences keep decoding meanwhile).
  int64_t save_prefix(const std::vector<int32_t>& prompt, const std::string& path);
  int64_t load_prefix(const std::string& path);

  EngineMetrics metrics() const;
  const InferenceModel& model() const { return *model_; }
  const EngineOptions& options() const { return opt_; }

 private:
  struct Sequence;
  struct PrefixEntry;
  void admit_locked();
  void finish(Sequence& s, FinishReason reason, const std::string& error = {}, int32_t end_token = -1,
              float end_logprob = 0);
  void emit(Sequence& s, TokenEvent ev);
  size_t reservation(const GenerationRequest& r) const;
  // The stored snapshot of prompt[0, n) (hash: of those tokens), or null.
  PrefixEntry* find_prefix(const std::vector<int32_t>& prompt, int64_t n, uint64_t hash, uint64_t images) const;
  // The key of the image rows inside prompt[0, n) (0 when there are none): Sequence::image_keys.
  uint64_t image_key(const Sequence& s, int64_t n) const;
  // Media placeholders among prompt[from, to) (0 for a request without images).
  int64_t count_placeholders(const Sequence& s, int64_t from, int64_t to) const;
  void lookup_prefix(Sequence& s);
  // The images of the running sequences given as patches, encoded in one call of the vision tower (each alone
  // when that fails, so a bad one fails only its own request).
  void encode_new_images();
  void store_prefix(const Sequence& s);

  // The phases of step(), in order (engine.cc says what each does).
  struct StepPart;
  struct StepPlan;
  void take_cancellations();
  void start_sequence(Sequence& s);
  void draft_chunk(Sequence& s, bool speculate);
  void plan_step(StepPlan& plan);
  void run_batch(StepPlan& plan);
  std::vector<size_t> advance_prompts(StepPlan& plan);
  void sample_tokens(StepPlan& plan, const std::vector<size_t>& need, std::vector<std::vector<SampledToken>>& drawn,
                     std::vector<std::string>& draw_error);
  void deliver_tokens(StepPlan& plan, const std::vector<size_t>& need,
                      const std::vector<std::vector<SampledToken>>& drawn, const std::vector<std::string>& draw_error);
  void record_step(const StepPlan& plan);
  void retire_finished();

  std::shared_ptr<const InferenceModel> model_;
  EngineOptions opt_;
  size_t kda_state_bytes_ = 0, page_bytes_ = 0;
  int64_t text_vocab_ = 0;         // ids the tokenizer knows (the model's vocabulary may be padded beyond)
  std::vector<int32_t> stop_ids_;  // tokens that end a request with stop_at_eos

  mutable std::mutex mu_;  // guards waiting_, cancelled_, metrics_, next_id_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  EngineMetrics metrics_;

  std::vector<std::unique_ptr<Sequence>> running_;  // the engine thread's (or step()'s caller's) only
  size_t reserved_ = 0;

  std::list<std::unique_ptr<PrefixEntry>> prefix_lru_;  // most recent first
  std::vector<std::unique_ptr<PrefixEntry>> pinned_;    // loaded from files (load_prefix)
  size_t pinned_bytes_ = 0;
  std::unordered_multimap<uint64_t, PrefixEntry*> prefix_index_;
  size_t prefix_bytes_ = 0;

  // The model's fingerprint for state files (infer/sequence_file.h), computed on first use.
  const std::string& fingerprint();
  std::once_flag fingerprint_once_;
  std::string fingerprint_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex step_mu_;  // one step at a time
};

}  // namespace myriad
