#include "serve/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/memory_release.h"
#include "core/threads.h"
#include "infer/image_input.h"
#include "infer/sequence_file.h"
#include "serve/text_stream.h"

namespace myriad {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// FNV-1a over bytes, continuing from h (chains: hash(a then b) = fnv1a(b, fnv1a(a))).
uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t hash_tokens(const int32_t* t, int64_t n) {
  return fnv1a(t, size_t(n) * sizeof(int32_t));
}

// The image placeholders of a prompt, in runs: each maximal run of `placeholder` must be taken by whole images, in
// order (a run may hold several adjacent images). kValue naming the run and the image otherwise.
void check_placeholder_runs(const std::vector<int32_t>& prompt, int32_t placeholder,
                            const std::vector<int64_t>& tokens) {
  size_t image = 0;
  for (size_t i = 0; i < prompt.size();) {
    if (prompt[i] != placeholder) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < prompt.size() && prompt[end] == placeholder) ++end;
    int64_t taken = 0;
    const size_t first = image;
    while (image < tokens.size() && taken < int64_t(end - i)) taken += tokens[image++];
    MYRIAD_REQUIRE(taken == int64_t(end - i), kValue, "the prompt's run of ", end - i,
                   " image placeholder tokens at token ", i, " does not hold whole images: image ", first,
                   first < tokens.size() ? str(" takes ", tokens[first], " tokens") : std::string(" does not exist"),
                   " (", tokens.size(), " image", tokens.size() == 1 ? "" : "s", " given)");
    i = end;
  }
  MYRIAD_REQUIRE(image == tokens.size(), kValue, "the prompt's image placeholders hold ", image, " of the ",
                 tokens.size(), " images given");
}

TokenEvent cancelled_event() {
  TokenEvent ev;
  ev.finish = FinishReason::kCancelled;
  return ev;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

void LatencyHistogram::observe(double s) {
  size_t b = 0;
  while (b < kBuckets && s > kBounds[b]) ++b;
  ++counts[b];
  sum += s;
  ++count;
}

struct Engine::Sequence {
  uint64_t id = 0;
  GenerationRequest req;
  EventSink sink;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<TextStream> text;
  SequenceState state;
  bool started = false;   // state created (and the prefix cache consulted)
  int64_t prefilled = 0;  // prompt tokens processed
  int64_t image_row = 0;  // image rows used by them (placeholders in prompt[0, prefilled))
  // image_keys[k]: the key of image rows [0, k) (0 for k = 0: text), chained once at submission so a prefix's
  // key costs a count of its placeholders, not a pass over the rows.
  std::vector<uint64_t> image_keys;
  int64_t cached = 0;  // of which reused from the prefix cache
  std::vector<int32_t> generated;
  int32_t next_input = -1;
  // Speculative decoding: the drafter, this sequence's k, and the step's verify chunk [next_input, drafts] with
  // the drafts' distributions (empty chunk: a plain decode step).
  std::unique_ptr<Drafter> drafter;
  int64_t spec_k = 0;
  std::vector<int32_t> chunk;
  std::vector<TokenDistribution> q;
  int64_t spec_start = 0;
  size_t reserved = 0;
  bool done = false;
  Clock::time_point submitted, last_token;
};

struct Engine::PrefixEntry {
  uint64_t hash = 0;
  uint64_t images = 0;  // Engine::image_key of the prefix
  std::vector<int32_t> tokens;
  std::vector<KdaState> kda;  // per layer, as SequenceState
  std::vector<MlaCache> mla;  // per layer, sharing the pages
  // Stored by a request recording its routing (GenerationRequest::record_routing): each layer's experts of the
  // prefix's tokens. Without it the entry is not reused for such a request.
  bool has_routing = false;
  std::vector<std::vector<int32_t>> routing;
  size_t bytes = 0;

  // bytes from the layers' states (the KDA state on KDA layers, the cache on MLA ones).
  void count_bytes() {
    bytes = 0;
    for (size_t l = 0; l < kda.size(); ++l) bytes += kda[l].S.defined() ? kda[l].bytes() : mla[l].bytes();
    for (const auto& r : routing) bytes += r.size() * sizeof(int32_t);
  }
  // A copy that stays valid after this entry is evicted: KDA states cloned, MLA pages shared (a snapshot's pages
  // are never written again) but for a partial last page, which is cloned.
  // What a state file holds (Engine::save_prefix): the tokens, images and states; not the routing.
  PrefixEntry copy_for_file() const {
    PrefixEntry c;
    c.hash = hash;
    c.images = images;
    c.tokens = tokens;
    c.bytes = bytes;
    for (size_t l = 0; l < kda.size(); ++l) {
      c.kda.push_back(kda[l].S.defined() ? kda[l].clone() : KdaState{});
      c.mla.push_back(mla[l].share_prefix(mla[l].size()));
    }
    return c;
  }
};

DType cache_dtype_from_name(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  MYRIAD_REQUIRE(name == "q8", kValue, "cache dtype ", name, ": must be one of f32, bf16, q8");
  return DType::kQ8_0;
}

Engine::Engine(std::shared_ptr<const InferenceModel> model, EngineOptions options)
    : model_(std::move(model)), opt_(options) {
  MYRIAD_REQUIRE(opt_.page_tokens > 0 && opt_.max_batch > 0 && opt_.prefill_chunk > 0 && opt_.max_waiting >= 0 &&
                     opt_.cache_mb > 0 && opt_.prefix_every >= 0 && opt_.prefix_cache_mb >= 0,
                 kValue, "engine: page_tokens, max_batch, prefill_chunk and cache_mb must be > 0");
  const SequenceState probe = model_->new_sequence(opt_.page_tokens, opt_.cache_dtype);
  kda_state_bytes_ = probe.kda_bytes();
  int64_t mla_layers = 0;
  for (int64_t l = 0; l < model_->config().num_hidden_layers; ++l)
    mla_layers += model_->config().mixer(l) == Mixer::kMla ? 1 : 0;
  page_bytes_ =
      size_t(mla_layers) * MlaCache::page_bytes(model_->config().kv_lora_rank, model_->config().qk_rope_head_dim,
                                                opt_.page_tokens, opt_.cache_dtype);
  metrics_.cache_bytes_budget = size_t(opt_.cache_mb) << 20;
  text_vocab_ = model_->text_vocab_size();
  // The tokenizer's end-of-sequence tokens; a model served as ids only stops at myriad's.
  stop_ids_ =
      model_->tokenizer().loaded() ? model_->tokenizer().stop_ids() : std::vector<int32_t>{kEndOfTextId, kEosId};
  MYRIAD_REQUIRE(opt_.draft.empty() || opt_.draft == "ngram" || opt_.draft == "model", kValue, "engine: draft '",
                 opt_.draft, "' must be ngram, model or empty (off)");
  MYRIAD_REQUIRE((opt_.draft == "model") == (opt_.draft_model != nullptr), kValue,
                 "engine: a draft model is given exactly when draft is 'model'");
  MYRIAD_REQUIRE(opt_.spec_tokens >= 1 && opt_.spec_tokens <= 64 && opt_.spec_max_batch >= 0, kValue,
                 "engine: spec_tokens (", opt_.spec_tokens, ") must be in [1, 64] and spec_max_batch (",
                 opt_.spec_max_batch, ") >= 0");
  if (opt_.draft_model) ModelDrafter(opt_.draft_model, *model_);  // refuses a draft with another tokenizer now
}

Engine::~Engine() {
  stop();
}

size_t Engine::reservation(const GenerationRequest& r) const {
  const int64_t tokens = int64_t(r.prompt.size()) + r.max_tokens;
  const int64_t pages = (tokens + opt_.page_tokens - 1) / opt_.page_tokens;
  return kda_state_bytes_ + size_t(pages) * page_bytes_;
}

uint64_t Engine::submit(GenerationRequest req, EventSink sink) {
  const ModelConfig& c = model_->config();
  MYRIAD_REQUIRE(!req.prompt.empty(), kValue, "the prompt is empty (it needs at least one token)");
  for (size_t i = 0; i < req.prompt.size(); ++i)
    MYRIAD_REQUIRE(req.prompt[i] >= 0 && req.prompt[i] < c.vocab_size, kValue, "prompt token ", i, " (id ",
                   req.prompt[i], ") is outside the vocabulary [0, ", c.vocab_size, ")");
  MYRIAD_REQUIRE(req.max_tokens > 0, kValue, "max_tokens (", req.max_tokens, ") must be > 0");
  const int64_t P = int64_t(req.prompt.size());
  MYRIAD_REQUIRE(P + req.max_tokens <= c.max_position_embeddings, kValue, "this model's maximum context length is ",
                 c.max_position_embeddings, " tokens, but ", P + req.max_tokens, " were requested (", P,
                 " in the prompt, ", req.max_tokens, " for the completion)");
  validate(req.sampling);
  MYRIAD_REQUIRE(!(req.image_rows.defined() && req.image_patches.defined()), kValue,
                 "a request gives its images either encoded (image_rows) or as patches, not both");
  std::optional<int32_t> placeholder;
  if (req.image_patches.defined()) {
    require_vision(c, "images");
    const VisionConfig& v = *c.vision_config;
    placeholder = int32_t(*c.media_placeholder_token_id);
    const int64_t row = 3 * v.patch_size * v.patch_size;
    MYRIAD_REQUIRE(req.image_patches.dtype() == DType::kF32 && req.image_patches.ndim() == 2 &&
                       req.image_patches.shape()[1] == row,
                   kValue, "image patches ", shape_str(req.image_patches.shape()), ": expected f32 [rows, ", row, "]");
    check_patch_grids(v, req.image_grids, req.image_patches.shape()[0]);
    std::vector<int64_t> tokens;
    for (const PatchGrid& g : req.image_grids) tokens.push_back(vision_tokens(v, g));
    check_placeholder_runs(req.prompt, *placeholder, tokens);
    req.image_patches = req.image_patches.contiguous();
  } else if (req.image_rows.defined()) {
    MYRIAD_REQUIRE(c.media_placeholder_token_id.has_value(), kValue,
                   "images given but the model's config has no media_placeholder_token_id");
    placeholder = int32_t(*c.media_placeholder_token_id);
    const int64_t k = std::count(req.prompt.begin(), req.prompt.end(), *placeholder);
    MYRIAD_REQUIRE(req.image_rows.dtype() == DType::kF32 && req.image_rows.ndim() == 2 &&
                       req.image_rows.shape()[0] == k && req.image_rows.shape()[1] == c.hidden_size,
                   kValue, "the prompt has ", k, " image placeholder tokens (id ", *placeholder,
                   ") but the images give ", shape_str(req.image_rows.shape()), " rows (expected [", k, ", ",
                   c.hidden_size, "])");
    req.image_rows = req.image_rows.contiguous();
  }
  const size_t need = reservation(req);
  MYRIAD_REQUIRE(need <= metrics_.cache_bytes_budget, kValue, "the request needs ", need >> 10,
                 " KiB of cache (prompt + max_tokens), more than the whole budget of ", opt_.cache_mb, " MiB");
  auto s = std::make_unique<Sequence>();
  s->sampler = std::make_unique<Sampler>(req.sampling);
  MYRIAD_REQUIRE(model_->tokenizer().loaded() || req.stop.empty(), kValue,
                 "stop strings need a tokenizer, and this model has none");
  if (model_->tokenizer().loaded()) s->text = std::make_unique<TextStream>(model_->tokenizer(), req.stop);
  s->req = std::move(req);
  // Keys of the image rows: by the decoded content of each image (its patches; a row's state depends on its whole
  // image, the tower's attention being bidirectional), or by the rows themselves when given encoded.
  if (s->req.image_patches.defined()) {
    const VisionConfig& v = *c.vision_config;
    const size_t row_bytes = size_t(3 * v.patch_size * v.patch_size) * sizeof(float);
    const auto* p = reinterpret_cast<const unsigned char*>(s->req.image_patches.data<float>());
    uint64_t h = fnv1a(nullptr, 0);
    s->image_keys.assign(1, 0);
    for (const PatchGrid& g : s->req.image_grids) {
      const size_t bytes = size_t(g.patches()) * row_bytes;
      h = fnv1a(&g, sizeof(g), fnv1a(p, bytes, h));
      p += bytes;
      for (int64_t r = 0; r < vision_tokens(v, g); ++r) s->image_keys.push_back(fnv1a(&r, sizeof(r), h) | 1);
    }
  } else if (s->req.image_rows.defined()) {
    const int64_t k = s->req.image_rows.shape()[0], row = s->req.image_rows.shape()[1] * int64_t(sizeof(float));
    const auto* p = reinterpret_cast<const unsigned char*>(s->req.image_rows.data<float>());
    uint64_t h = fnv1a(nullptr, 0);  // chained row by row
    s->image_keys.assign(1, 0);
    for (int64_t r = 0; r < k; ++r) {
      h = fnv1a(p + r * row, size_t(row), h);
      s->image_keys.push_back(h | 1);  // never 0, the key of text
    }
  }
  s->sink = std::move(sink);
  s->reserved = need;
  s->submitted = Clock::now();
  std::lock_guard lock(mu_);
  if (int64_t(waiting_.size()) >= opt_.max_waiting) {
    ++metrics_.requests_rejected;
    MYRIAD_REQUIRE(false, kBusy, "the server is busy: ", waiting_.size(), " requests are already waiting");
  }
  s->id = next_id_++;
  const uint64_t id = s->id;
  ++metrics_.requests_total;
  waiting_.push_back(std::move(s));
  cv_.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  std::lock_guard lock(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

void Engine::emit(Sequence& s, TokenEvent ev) {
  ev.request = s.id;
  if (ev.finish != FinishReason::kNone) {
    ev.prompt_tokens = int64_t(s.req.prompt.size());
    ev.completion_tokens = int64_t(s.generated.size());
    ev.cached_tokens = s.cached;
    if (s.req.record_routing) ev.routing = std::move(s.state.routing);
  }
  if (s.sink) s.sink(ev);
}

void Engine::finish(Sequence& s, FinishReason reason, const std::string& error, int32_t end_token, float end_logprob) {
  if (s.done) return;
  TokenEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.end_token = end_token;
  ev.end_logprob = end_logprob;
  if (s.text && reason != FinishReason::kCancelled && reason != FinishReason::kError) ev.text = s.text->finish();
  s.done = true;
  emit(s, std::move(ev));
}

void Engine::admit_locked() {
  // Cancellations of queued requests first.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (std::find(cancelled_.begin(), cancelled_.end(), (*it)->id) != cancelled_.end()) {
      (*it)->done = true;   // the event is sent below, outside the lock
      (*it)->reserved = 0;  // never admitted: nothing reserved
      ++metrics_.requests_cancelled;
      running_.push_back(std::move(*it));  // retired (with its kCancelled event) by step()
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  while (!waiting_.empty() && int64_t(running_.size()) < opt_.max_batch &&
         reserved_ + waiting_.front()->reserved <= metrics_.cache_bytes_budget) {
    reserved_ += waiting_.front()->reserved;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

uint64_t Engine::image_key(const Sequence& s, int64_t n) const {
  if (s.image_keys.empty()) return 0;
  return s.image_keys[size_t(count_placeholders(s, 0, n))];
}

int64_t Engine::count_placeholders(const Sequence& s, int64_t from, int64_t to) const {
  if (s.image_keys.empty()) return 0;  // a request without images
  const auto placeholder = int32_t(*model_->config().media_placeholder_token_id);
  return std::count(s.req.prompt.begin() + from, s.req.prompt.begin() + to, placeholder);
}

Engine::PrefixEntry* Engine::find_prefix(const std::vector<int32_t>& prompt, int64_t n, uint64_t hash,
                                         uint64_t images) const {
  auto [b, e] = prefix_index_.equal_range(hash);
  for (auto it = b; it != e; ++it)
    if (int64_t(it->second->tokens.size()) == n && it->second->images == images &&
        std::equal(it->second->tokens.begin(), it->second->tokens.end(), prompt.begin()))
      return it->second;
  return nullptr;
}

void Engine::lookup_prefix(Sequence& s) {
  const int64_t every = opt_.prefix_every, P = int64_t(s.req.prompt.size());
  // The longest stored prefix of at most P - 1 tokens: a pinned one (any length), or a snapshot (multiples of
  // prefix_every) longer than it.
  PrefixEntry* pe = nullptr;
  int64_t n = 0;
  const bool routed = s.req.record_routing;  // only snapshots that kept their routing serve such a request
  for (const auto& p : pinned_) {
    const auto len = int64_t(p->tokens.size());
    if (len > n && len < P && (!routed || p->has_routing) && p->images == image_key(s, len) &&
        std::equal(p->tokens.begin(), p->tokens.end(), s.req.prompt.begin())) {
      pe = p.get();
      n = len;
    }
  }
  for (int64_t m = every > 0 ? (P - 1) / every * every : 0; m > n && m >= every; m -= every)
    if (PrefixEntry* found = find_prefix(s.req.prompt, m, hash_tokens(s.req.prompt.data(), m), image_key(s, m));
        found && (!routed || found->has_routing)) {
      pe = found;
      n = m;
      for (auto li = prefix_lru_.begin(); li != prefix_lru_.end(); ++li)  // most recently used first
        if (li->get() == pe) {
          prefix_lru_.splice(prefix_lru_.begin(), prefix_lru_, li);
          break;
        }
      break;
    }
  if (!pe) return;
  s.image_row = count_placeholders(s, 0, n);
  for (size_t l = 0; l < pe->kda.size(); ++l) {
    if (pe->kda[l].S.defined())
      s.state.kda[l] = pe->kda[l].clone();
    else
      s.state.mla[l] = pe->mla[l].share_prefix(n);
  }
  if (routed) s.state.routing = pe->routing;
  s.state.tokens = n;
  s.prefilled = s.cached = n;
  std::lock_guard lock(mu_);
  ++metrics_.prefix_hits;
  metrics_.prefix_tokens_reused += uint64_t(n);
}

const std::string& Engine::fingerprint() {
  std::call_once(fingerprint_once_, [&] { fingerprint_ = model_fingerprint(*model_); });
  return fingerprint_;
}

int64_t Engine::save_prefix(const std::vector<int32_t>& prompt, const std::string& path) {
  PrefixEntry snapshot;
  {
    std::lock_guard step_lock(step_mu_);
    const PrefixEntry* best = nullptr;
    auto consider = [&](const PrefixEntry& e) {
      if (e.tokens.size() <= prompt.size() && (!best || e.tokens.size() > best->tokens.size()) &&
          std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin()))
        best = &e;
    };
    for (const auto& e : pinned_) consider(*e);
    for (const auto& e : prefix_lru_) consider(*e);
    if (!best) return 0;
    snapshot = best->copy_for_file();
  }
  save_sequence_file(path, *model_, snapshot.tokens, snapshot.images, snapshot.kda, snapshot.mla, fingerprint());
  return int64_t(snapshot.tokens.size());
}

int64_t Engine::load_prefix(const std::string& path) {
  SequenceSnapshot snap = load_sequence_file(path, *model_, opt_.page_tokens, opt_.cache_dtype, fingerprint());
  auto pe = std::make_unique<PrefixEntry>();
  pe->tokens = std::move(snap.tokens);
  pe->images = snap.images;
  pe->hash = hash_tokens(pe->tokens.data(), int64_t(pe->tokens.size()));
  pe->kda = std::move(snap.kda);
  pe->mla = std::move(snap.mla);
  pe->count_bytes();
  const auto n = int64_t(pe->tokens.size());
  std::lock_guard step_lock(step_mu_);
  pinned_bytes_ += pe->bytes;
  pinned_.push_back(std::move(pe));
  std::lock_guard lock(mu_);
  metrics_.prefix_cache_bytes = prefix_bytes_ + pinned_bytes_;
  return n;
}

void Engine::store_prefix(const Sequence& s) {
  const int64_t n = s.prefilled;
  if (opt_.prefix_every == 0 || n == 0 || n % opt_.prefix_every != 0) return;
  const uint64_t h = hash_tokens(s.req.prompt.data(), n), images = image_key(s, n);
  // The routing of the prefix's tokens, when this sequence records it (it has processed exactly n tokens here).
  const bool routed = s.req.record_routing;
  auto routing_of_prefix = [&] {
    std::vector<std::vector<int32_t>> r = s.state.routing;
    for (auto& layer : r) layer.resize(std::min(layer.size(), size_t(n * model_->config().num_experts_per_token)));
    return r;
  };
  if (PrefixEntry* found = find_prefix(s.req.prompt, n, h, images)) {  // already stored
    if (routed && !found->has_routing) {  // (find_prefix searches the evictable snapshots, counted in prefix_bytes_)
      found->routing = routing_of_prefix();
      found->has_routing = true;
      const size_t before = found->bytes;
      found->count_bytes();
      prefix_bytes_ += found->bytes - before;
    }
    return;
  }
  auto pe = std::make_unique<PrefixEntry>();
  if (routed) {
    pe->routing = routing_of_prefix();
    pe->has_routing = true;
  }
  pe->hash = h;
  pe->images = images;
  pe->tokens.assign(s.req.prompt.begin(), s.req.prompt.begin() + n);
  for (size_t l = 0; l < s.state.kda.size(); ++l) {
    if (s.state.kda[l].S.defined()) {
      pe->kda.push_back(s.state.kda[l].clone());
      pe->mla.push_back(MlaCache(s.state.mla[l].kv_lora_rank(), s.state.mla[l].rope_dim(), opt_.page_tokens,
                                 s.state.mla[l].dtype(), s.state.mla[l].mean_block()));
    } else {
      pe->kda.push_back(KdaState{});
      pe->mla.push_back(s.state.mla[l].share_prefix(n));
    }
  }
  pe->count_bytes();
  const size_t budget = size_t(opt_.prefix_cache_mb) << 20;
  if (pe->bytes > budget) return;
  prefix_bytes_ += pe->bytes;
  prefix_index_.emplace(h, pe.get());
  prefix_lru_.push_front(std::move(pe));
  while (prefix_bytes_ > budget) {  // evict the least recently used
    PrefixEntry* victim = prefix_lru_.back().get();
    auto [vb, ve] = prefix_index_.equal_range(victim->hash);
    for (auto it = vb; it != ve; ++it)
      if (it->second == victim) {
        prefix_index_.erase(it);
        break;
      }
    prefix_bytes_ -= victim->bytes;
    prefix_lru_.pop_back();
  }
}

void Engine::encode_new_images() {
  std::vector<Sequence*> todo;
  for (auto& s : running_)
    if (!s->done && s->req.image_patches.defined()) todo.push_back(s.get());
  if (todo.empty()) return;
  const VisionConfig& v = *model_->config().vision_config;
  // Each sequence's rows, and the patches they came from released (their keys were taken at submission).
  auto take = [&](Sequence& s, Tensor rows) {
    s.req.image_rows = std::move(rows);
    s.req.image_patches = Tensor();
    s.req.image_grids.clear();
  };
  if (todo.size() > 1) {  // one call of the tower for all of them
    std::vector<float> patches;
    std::vector<PatchGrid> grids;
    std::vector<int64_t> rows;  // per sequence: its image tokens
    for (Sequence* s : todo) {
      const Tensor& p = s->req.image_patches;
      patches.insert(patches.end(), p.data<float>(), p.data<float>() + p.numel());
      grids.insert(grids.end(), s->req.image_grids.begin(), s->req.image_grids.end());
      int64_t n = 0;
      for (const PatchGrid& g : s->req.image_grids) n += vision_tokens(v, g);
      rows.push_back(n);
    }
    try {
      const int64_t row = 3 * v.patch_size * v.patch_size;
      const Tensor all =
          model_->encode_images(Tensor::from_vector(patches, {int64_t(patches.size()) / row, row}), grids);
      int64_t at = 0;
      for (size_t i = 0; i < todo.size(); ++i) {
        take(*todo[i], all.slice(0, at, at + rows[i]).contiguous());
        at += rows[i];
      }
      return;
    } catch (const std::exception&) {
      // One request's images failed the batch: encode each alone below, so only that request fails.
    }
  }
  for (Sequence* s : todo) {
    try {
      take(*s, model_->encode_images(s->req.image_patches, s->req.image_grids));
    } catch (const std::exception& e) {
      finish(*s, FinishReason::kError, str("encoding the request's images: ", e.what()));
    }
  }
}

// One running sequence's part of a step: a row of the batch (and of its logits), or a long prefill of its own.
struct Engine::StepPart {
  Sequence* seq = nullptr;
  bool prefilling = false;
  int64_t row = -1;         // in the batch; -1 for a long prefill
  int64_t long_tokens = 0;  // what the long prefill took
  Tensor long_logits;       // its logits [1, V]
  std::string failure;      // why it failed
};

// A step: the batch (prefill chunks ending on prefix snapshot boundaries within the step's prompt budget, and one
// token, or a verify chunk of drafts, for every decoding sequence), each sequence's part of it, and what it gave.
struct Engine::StepPlan {
  std::vector<BatchEntry> batch;
  std::vector<StepPart> parts;
  uint64_t long_prefills = 0;
  Tensor logits;                   // the batch's logits, every entry's logit_rows in batch order
  std::string error;               // why the batch's forward failed
  std::vector<int64_t> logit_row;  // each entry's first row of logits
  // The step's totals for the metrics.
  uint64_t prompt_tokens = 0, generated = 0;
  std::vector<double> ttft, tpot;
  std::vector<SpeculationStats> spec;
};

void Engine::take_cancellations() {
  {
    std::lock_guard lock(mu_);
    admit_locked();
    for (auto& s : running_)
      if (!s->done && std::find(cancelled_.begin(), cancelled_.end(), s->id) != cancelled_.end()) {
        s->done = true;
        ++metrics_.requests_cancelled;
      }
    cancelled_.clear();
  }
  // Requests cancelled above get their last event now (outside the lock: a sink may call back into the engine).
  for (auto& s : running_)
    if (s->done) emit(*s, cancelled_event());
}

void Engine::start_sequence(Sequence& s) {
  s.state = model_->new_sequence(opt_.page_tokens, opt_.cache_dtype);
  s.state.record_routing = s.req.record_routing;
  lookup_prefix(s);
  s.started = true;
  if (opt_.draft == "ngram") s.drafter = std::make_unique<NgramDrafter>();
  if (opt_.draft == "model")
    s.drafter = std::make_unique<ModelDrafter>(opt_.draft_model, *model_, s.req.sampling.seed, /*check=*/false);
  s.spec_k = opt_.spec_tokens;
}

// A decoding sequence's chunk: its next input, then the drafts when speculating (a failing drafter costs its
// drafts, not the request).
void Engine::draft_chunk(Sequence& s, bool speculate) {
  s.chunk.assign(1, s.next_input);
  s.q.clear();
  // Drafts: no more than the tokens still wanted after this one (the request's reservation covers them).
  const int64_t k = std::min(s.spec_k, s.req.max_tokens - int64_t(s.generated.size()) - 1);
  if (!speculate || !s.drafter || k <= 0) return;
  try {
    std::vector<int32_t> d = s.drafter->draft(s.req.prompt, s.generated, k, *s.sampler, s.q);
    d.resize(std::min(d.size(), size_t(k)));
    s.q.resize(std::min(s.q.size(), d.size()));
    for (int32_t t : d)
      MYRIAD_CHECK(t >= 0 && t < text_vocab_, "speculation: drafted token ", t, " outside the vocabulary");
    s.chunk.insert(s.chunk.end(), d.begin(), d.end());
  } catch (const std::exception&) {
    s.chunk.resize(1);
    s.q.clear();
  }
}

void Engine::plan_step(StepPlan& plan) {
  int64_t prompt_budget = opt_.prefill_chunk;
  // Speculation this step: only while few enough sequences decode for the step to stay bound by the weights.
  int64_t decoding = 0;
  for (auto& sp : running_)
    decoding += !sp->done && sp->started && sp->prefilled == int64_t(sp->req.prompt.size()) ? 1 : 0;
  const bool speculate = !opt_.draft.empty() && decoding <= opt_.spec_max_batch;
  for (auto& sp : running_) {
    Sequence& s = *sp;
    if (s.done) continue;
    if (!s.started) start_sequence(s);
    const int64_t P = int64_t(s.req.prompt.size());
    // A long prefill ends on the last prefix snapshot boundary before the prompt's end (the snapshot is stored
    // and the rest, under prefix_every tokens, prefills in chunks), or takes the whole prompt without snapshots.
    // A long prompt under sequence-parallel prefill runs whole, outside the batch.
    int64_t whole = 0;
    if (s.prefilled < P && opt_.long_prefill && s.state.tokens == 0 && s.image_keys.empty() &&
        !s.req.record_routing) {  // (a sequence-parallel prefill does not record the routing)
      whole = opt_.prefix_every > 0 && P > opt_.prefix_every ? (P - 1) / opt_.prefix_every * opt_.prefix_every : P;
      if (whole < opt_.long_prefill_min) whole = 0;
    }
    StepPart part;
    part.seq = &s;
    part.prefilling = s.prefilled < P;
    if (whole > 0) {
      part.long_tokens = whole;
      try {
        part.long_logits = opt_.long_prefill(s.state, std::span<const int32_t>(s.req.prompt.data(), size_t(whole)));
        ++plan.long_prefills;
      } catch (const std::exception& e) {
        part.failure = e.what();
      }
    } else if (s.prefilled < P) {
      if (prompt_budget == 0) continue;
      int64_t n = std::min(P - s.prefilled, prompt_budget);
      if (opt_.prefix_every > 0) {
        const int64_t boundary = (s.prefilled / opt_.prefix_every + 1) * opt_.prefix_every;
        if (boundary < P) n = std::min(n, boundary - s.prefilled);
      }
      prompt_budget -= n;
      part.row = int64_t(plan.batch.size());
      BatchEntry entry{&s.state, std::span<const int32_t>(s.req.prompt.data() + s.prefilled, size_t(n))};
      if (const int64_t k = count_placeholders(s, s.prefilled, s.prefilled + n); k > 0) {
        const int64_t D = model_->config().hidden_size;
        entry.image_rows = std::span<const float>(s.req.image_rows.data<float>() + s.image_row * D, size_t(k * D));
      }
      plan.batch.push_back(entry);
    } else {
      part.row = int64_t(plan.batch.size());
      draft_chunk(s, speculate);
      BatchEntry entry{&s.state, std::span<const int32_t>(s.chunk)};
      if (s.chunk.size() > 1) {
        s.spec_start = s.state.tokens;
        s.state.begin_speculation();
        entry.logit_rows = int64_t(s.chunk.size());
      }
      plan.batch.push_back(entry);
    }
    plan.parts.push_back(std::move(part));
  }
}

void Engine::run_batch(StepPlan& plan) {
  if (!plan.batch.empty()) {
    try {
      plan.logits = model_->forward(plan.batch);
    } catch (const std::exception& e) {
      plan.error = e.what();
    }
  }
  plan.logit_row.assign(plan.batch.size() + 1, 0);
  for (size_t b = 0; b < plan.batch.size(); ++b) plan.logit_row[b + 1] = plan.logit_row[b] + plan.batch[b].logit_rows;
}

std::vector<size_t> Engine::advance_prompts(StepPlan& plan) {
  std::vector<size_t> need;  // the parts that produce a token this step (decoding, or at the end of their prompt)
  for (size_t i = 0; i < plan.parts.size(); ++i) {
    const StepPart& part = plan.parts[i];
    Sequence& s = *part.seq;
    const std::string& why = part.row < 0 ? part.failure : plan.error;
    if (!why.empty()) {
      finish(s, FinishReason::kError, why);
      continue;
    }
    if (part.prefilling) {
      const int64_t n = part.row < 0 ? part.long_tokens : int64_t(plan.batch[size_t(part.row)].tokens.size());
      s.image_row += count_placeholders(s, s.prefilled, s.prefilled + n);
      s.prefilled += n;
      plan.prompt_tokens += uint64_t(n);
      store_prefix(s);
      if (s.prefilled < int64_t(s.req.prompt.size())) continue;
    }
    need.push_back(i);
  }
  return need;
}

// Sampling, spread over the threads (each sequence has its own sampler and generator; at a 160K vocabulary one
// draw with penalties and top-p takes about a millisecond). A verify chunk yields 1 .. drafts + 1 tokens
// (infer/speculative.h accept_verified). Events are sent afterwards, in order (deliver_tokens).
void Engine::sample_tokens(StepPlan& plan, const std::vector<size_t>& need,
                           std::vector<std::vector<SampledToken>>& drawn, std::vector<std::string>& draw_error) {
  const int64_t V = model_->vocab_size();
  drawn.assign(plan.parts.size(), {});
  draw_error.assign(plan.parts.size(), {});
  plan.spec.assign(plan.parts.size(), {});
  const int sample_threads = need.size() > 1 ? num_threads() : 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(sample_threads)
  for (size_t j = 0; j < need.size(); ++j) {
    const size_t i = need[j];
    const StepPart& part = plan.parts[i];
    Sequence& s = *part.seq;
    const int64_t rows = part.row < 0 ? 1 : plan.batch[size_t(part.row)].logit_rows;
    const float* src = part.row < 0 ? part.long_logits.data<float>()
                                    : plan.logits.data<float>() + plan.logit_row[size_t(part.row)] * V;
    std::vector<float> row(src, src + rows * V);
    model_->mask_padded_ids(row.data(), rows);  // a padded vocabulary's ids are never produced
    try {
      if (rows > 1) {
        const std::span<const int32_t> drafts(s.chunk.data() + 1, s.chunk.size() - 1);
        drawn[i] =
            accept_verified(s.state, s.spec_start, *s.sampler, drafts, s.q, row.data(), V, s.req.prompt, &plan.spec[i]);
        // This sequence's k: one less after a rejection, two more (up to spec_tokens) when all were accepted.
        const auto accepted = int64_t(drawn[i].size()) - 1;
        s.spec_k = accepted == int64_t(drafts.size()) ? std::min(s.spec_k + 2, opt_.spec_tokens)
                                                      : std::max<int64_t>(1, s.spec_k - 1);
      } else {
        drawn[i].push_back(s.sampler->sample(row, s.req.prompt));
        s.sampler->observe(drawn[i].back().token);
      }
    } catch (const std::exception& e) {
      draw_error[i] = e.what();
    }
  }
}

void Engine::deliver_tokens(StepPlan& plan, const std::vector<size_t>& need,
                            const std::vector<std::vector<SampledToken>>& drawn,
                            const std::vector<std::string>& draw_error) {
  for (size_t i : need) {
    Sequence& s = *plan.parts[i].seq;
    if (!draw_error[i].empty()) {
      finish(s, FinishReason::kError, draw_error[i]);
      continue;
    }
    const Clock::time_point now = Clock::now();
    const size_t n = drawn[i].size();  // the step's tokens share its time
    for (const SampledToken& t : drawn[i]) {
      if (s.done) break;  // a stop before the chunk's end: the rest is dropped
      if (s.generated.empty())
        plan.ttft.push_back(seconds_between(s.submitted, now));
      else
        plan.tpot.push_back(seconds_between(s.last_token, now) / double(n));
      ++plan.generated;
      if (s.req.stop_at_eos && std::find(stop_ids_.begin(), stop_ids_.end(), t.token) != stop_ids_.end()) {
        finish(s, FinishReason::kStop, {}, t.token, t.logprob);
        break;
      }
      s.generated.push_back(t.token);
      s.next_input = t.token;
      TokenEvent ev;
      ev.token = t.token;
      ev.logprob = t.logprob;
      ev.top = t.top;
      if (s.text) ev.text = s.text->push(t.token);
      if (s.text && s.text->stopped()) {
        ev.finish = FinishReason::kStop;
      } else if (int64_t(s.generated.size()) >= s.req.max_tokens) {
        ev.finish = FinishReason::kLength;
        if (s.text) ev.text += s.text->finish();
      }
      if (ev.finish != FinishReason::kNone) s.done = true;
      emit(s, std::move(ev));
    }
    s.last_token = now;
  }
}

void Engine::record_step(const StepPlan& plan) {
  std::lock_guard lock(mu_);
  for (const SpeculationStats& st : plan.spec) {
    metrics_.spec_verifies += uint64_t(st.verifies);
    metrics_.spec_drafted += uint64_t(st.drafted);
    metrics_.spec_accepted += uint64_t(st.accepted);
    metrics_.spec_emitted += uint64_t(st.emitted);
  }
  metrics_.prompt_tokens += plan.prompt_tokens;
  metrics_.generated_tokens += plan.generated;
  metrics_.long_prefills += plan.long_prefills;
  for (double x : plan.ttft) metrics_.time_to_first_token.observe(x);
  for (double x : plan.tpot) metrics_.time_per_output_token.observe(x);
  ++metrics_.steps;
}

// The finished leave the batch: their state (pages, KDA states) is freed here.
void Engine::retire_finished() {
  size_t used = 0;
  uint64_t finished = 0;
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->done) {
      reserved_ -= (*it)->reserved;
      finished += 1;
      it = running_.erase(it);
    } else {
      used += (*it)->state.kda_bytes() + (*it)->state.mla_bytes();
      ++it;
    }
  }
  std::lock_guard lock(mu_);
  metrics_.requests_finished += finished;
  metrics_.cache_bytes_used = used;
  metrics_.cache_bytes_reserved = reserved_;
  metrics_.prefix_cache_bytes = prefix_bytes_ + pinned_bytes_;
  metrics_.running = int64_t(running_.size());
  metrics_.waiting = int64_t(waiting_.size());
}

// The phases of a step, in order: admit and cancel; encode new images; plan the batch (start sequences, prefill
// chunks, decode tokens and drafts, long prefills); one batched forward; advance the prompts; sample; deliver the
// tokens as events; record the metrics; retire the finished.
bool Engine::step() {
  std::lock_guard step_lock(step_mu_);
  take_cancellations();
  encode_new_images();
  StepPlan plan;
  plan_step(plan);
  const bool worked = !plan.parts.empty() || !running_.empty();
  if (!plan.parts.empty()) {
    run_batch(plan);
    const std::vector<size_t> need = advance_prompts(plan);
    std::vector<std::vector<SampledToken>> drawn;
    std::vector<std::string> draw_error;
    sample_tokens(plan, need, drawn, draw_error);
    deliver_tokens(plan, need, drawn, draw_error);
    record_step(plan);
  }
  retire_finished();
  return worked;
}

void Engine::run_until_idle() {
  while (true) {
    {
      std::lock_guard lock(mu_);
      if (waiting_.empty() && running_.empty() && cancelled_.empty()) return;
    }
    step();
  }
}

void Engine::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    bool worked = false;  // since the last time the engine went idle
    while (!stop_) {
      bool idle;
      {
        std::lock_guard lock(mu_);
        idle = waiting_.empty() && running_.empty() && cancelled_.empty();
      }
      if (!idle) {
        step();
        worked = true;
        continue;
      }
      if (worked) {  // back to idle after work: what the burst allocated and freed goes back to the system
        release_free_memory();
        worked = false;
      }
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [&] { return stop_ || !waiting_.empty() || !cancelled_.empty(); });
    }
  });
}

void Engine::stop() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  // Everything still queued or running is cancelled.
  std::vector<std::unique_ptr<Sequence>> left;
  {
    std::lock_guard lock(mu_);
    for (auto& s : waiting_) left.push_back(std::move(s));
    waiting_.clear();
    metrics_.requests_cancelled += left.size();
  }
  for (auto& s : running_) left.push_back(std::move(s));
  running_.clear();
  reserved_ = 0;
  for (auto& s : left)
    if (!s->done) emit(*s, cancelled_event());
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mu_);
  EngineMetrics m = metrics_;
  m.waiting = int64_t(waiting_.size());
  return m;
}

}  // namespace myriad
