#include "bench/spec_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "infer/inference_model.h"
#include "serve/engine.h"

namespace myriad::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  std::vector<std::vector<int32_t>> tokens;  // per request
  double decode_s = 0;                       // first token to last, over all requests
  double total_s = 0;                        // submission to the last token
  int64_t generated = 0;
  EngineMetrics metrics;
};

Timed run_requests(const std::shared_ptr<const InferenceModel>& m, const EngineOptions& o,
                   const std::vector<std::vector<int32_t>>& prompts, int64_t tokens) {
  Engine e(m, o);
  Timed t;
  t.tokens.resize(prompts.size());
  std::map<uint64_t, size_t> slot;
  Clock::time_point first{}, last{};
  bool any = false;
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = tokens;
    r.sampling.temperature = 0;
    r.stop_at_eos = false;
    slot[e.submit(r, [&, i](const TokenEvent& ev) {
      if (ev.token < 0) return;
      const Clock::time_point now = Clock::now();
      if (!any) first = now, any = true;
      last = now;
      t.tokens[i].push_back(ev.token);
    })] = i;
  }
  e.run_until_idle();
  t.decode_s = std::chrono::duration<double>(last - first).count();
  t.total_s = std::chrono::duration<double>(last - start).count();
  for (const auto& v : t.tokens) t.generated += int64_t(v.size());
  t.metrics = e.metrics();
  return t;
}

// Prose of the built-in corpus's kind (held-out seeds), encoded, at least n tokens.
std::vector<int32_t> prose_tokens(const Tokenizer& tok, uint64_t seed, int64_t n) {
  TextRng rng(mix_seed(seed, 0x5bec));
  std::string text;
  std::vector<int32_t> ids;
  while (int64_t(ids.size()) < n) {
    text += prose_document(rng) + "\n";
    ids = tok.encode(text);
  }
  ids.resize(size_t(n));
  return ids;
}

// The document with a handful of words changed (every 60th word swapped for the one after it).
std::string edited(const std::string& doc) {
  std::istringstream in(doc);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  for (size_t i = 30; i + 1 < words.size(); i += 60) std::swap(words[i], words[i + 1]);
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

struct Row {
  std::string name;
  double plain = 0, spec = 0;  // tokens/s, best of rounds
  double acceptance = 0, per_verify = 0, drafts_per_verify = 0;
  bool same_text = true;
};

// Interleaved rounds: plain then speculative, best of each. rate: tokens/s of one run.
Row compare(const std::string& name, const std::shared_ptr<const InferenceModel>& m, const EngineOptions& plain_opt,
            const EngineOptions& spec_opt, const std::vector<std::vector<int32_t>>& prompts, int64_t tokens,
            int64_t rounds, bool batch_rate) {
  Row r;
  r.name = name;
  auto rate = [&](const Timed& t) {
    return batch_rate ? double(t.generated) / t.total_s
                      : double(t.generated - int64_t(t.tokens.size())) / std::max(t.decode_s, 1e-9);
  };
  for (int64_t i = 0; i < rounds; ++i) {
    const Timed a = run_requests(m, plain_opt, prompts, tokens);
    const Timed b = run_requests(m, spec_opt, prompts, tokens);
    r.plain = std::max(r.plain, rate(a));
    r.spec = std::max(r.spec, rate(b));
    r.same_text = r.same_text && a.tokens == b.tokens;
    const EngineMetrics& s = b.metrics;
    r.acceptance = s.spec_drafted ? double(s.spec_accepted) / double(s.spec_drafted) : 0.0;
    r.per_verify = s.spec_verifies ? double(s.spec_emitted) / double(s.spec_verifies) : 0.0;
    r.drafts_per_verify = s.spec_verifies ? double(s.spec_drafted) / double(s.spec_verifies) : 0.0;
  }
  return r;
}

}  // namespace

nlohmann::ordered_json run_spec_bench(const SpecBenchOptions& opt, const MachineLimits& limits, FILE* out) {
  const std::shared_ptr<const InferenceModel> m = InferenceModel::load(opt.model_dir);
  MYRIAD_REQUIRE(m->tokenizer().loaded(), kValue, "bench spec: the model ", opt.model_dir, " has no tokenizer");
  const Tokenizer& tok = m->tokenizer();
  EngineOptions plain;
  plain.prefix_every = 0;  // every round prefills afresh, both sides alike
  const double bytes = double(m->active_weight_bytes(1));
  std::fprintf(out, "\ntarget %s: %.1f MB of weights read per decoded token (f32 as stored)\n", opt.model_dir.c_str(),
               bytes / 1e6);
  std::fprintf(out, "%-34s %10s %10s %7s %8s %8s %7s %10s  %s\n", "row (greedy)", "plain t/s", "spec t/s", "ratio",
               "accept", "tok/ver", "bound", "plain GB/s", "verdict");
  nlohmann::ordered_json j;
  double draft_bytes = 0;  // per drafted token, when a draft model drafts
  // The speed-up the bytes allow at the measured acceptance, batch 1: a verify streams the weights its 1 + d
  // tokens reach (more routed experts than one token's: InferenceModel::active_weight_bytes) and the draft d
  // tokens' worth of its own, for tok/ver tokens, where plain decoding streams one token's per token.
  auto bound = [&](const Row& r, bool model_drafts) {
    const double d = r.drafts_per_verify;
    if (r.per_verify <= 0) return 0.0;
    const auto verify = double(m->active_weight_bytes(int64_t(std::lround(1 + d))));
    return r.per_verify * bytes / (verify + (model_drafts ? d * draft_bytes : 0.0));
  };
  auto print = [&](const Row& r, double target, bool bandwidth, bool model_drafts) {
    const double ratio = r.spec / std::max(r.plain, 1e-9);
    const double gbs = bytes * r.plain / 1e9;
    const double b = bandwidth ? bound(r, model_drafts) : 0.0;
    char bs[16] = "-";
    if (bandwidth) std::snprintf(bs, sizeof(bs), "%.2fx", b);
    char gb[32] = "-";
    if (bandwidth) std::snprintf(gb, sizeof(gb), "%.2f", gbs);
    std::fprintf(out, "%-34s %10.1f %10.1f %6.2fx %7.1f%% %8.2f %7s %10s  %s%s\n", r.name.c_str(), r.plain, r.spec,
                 ratio, 100 * r.acceptance, r.per_verify, bs, gb,
                 target <= 0       ? "(figure)"
                 : ratio >= target ? "met"
                                   : "below",
                 r.same_text ? "" : " (TEXT DIFFERS)");
    j[r.name] = {{"plain_tokens_s", r.plain}, {"spec_tokens_s", r.spec},    {"ratio", ratio},
                 {"target", target},          {"acceptance", r.acceptance}, {"tokens_per_verify", r.per_verify},
                 {"same_text", r.same_text}};
    if (bandwidth) j[r.name]["plain_weight_gbs"] = gbs, j[r.name]["byte_bound"] = b;
  };
  // 1. A draft model, batch 1, on prose like the target's training text.
  const std::vector<int32_t> prose = prose_tokens(tok, 1, 48);
  if (!opt.draft_model_dir.empty()) {
    EngineOptions spec = plain;
    spec.draft = "model";
    spec.draft_model = InferenceModel::load(opt.draft_model_dir);
    spec.spec_tokens = opt.spec_tokens;
    draft_bytes = double(spec.draft_model->active_weight_bytes(1));
    std::fprintf(out, "draft %s: %.1f MB per token\n", opt.draft_model_dir.c_str(), draft_bytes / 1e6);
    print(compare("draft model, batch 1", m, plain, spec, {prose}, opt.tokens, opt.rounds, false), kSpecDraftTarget,
          true, true);
  }
  // 2. n-gram drafts on the copy task.
  const std::vector<int32_t> doc = prose_tokens(tok, 2, opt.doc_tokens);
  const std::string doc_text = tok.decode(doc);
  std::vector<int32_t> copy = tok.encode(doc_text + "\n\nThe same text, corrected:\n");
  const std::vector<int32_t> start = tok.encode(edited(doc_text));
  copy.insert(copy.end(), start.begin(), start.begin() + std::min<ptrdiff_t>(64, ptrdiff_t(start.size())));
  EngineOptions ngram = plain;
  ngram.draft = "ngram";
  ngram.spec_tokens = opt.spec_tokens;
  print(compare("n-gram, copy task, batch 1", m, plain, ngram, {copy}, opt.tokens, opt.rounds, false), kSpecNgramTarget,
        true, false);
  // 3. Batch 16: speculation as configured (off at this size by spec_max_batch) and forced on.
  std::vector<std::vector<int32_t>> many;
  for (uint64_t i = 0; i < 16; ++i) many.push_back(prose_tokens(tok, 100 + i, 48));
  EngineOptions batch = opt.draft_model_dir.empty() ? ngram : plain;
  if (!opt.draft_model_dir.empty()) {
    batch.draft = "model";
    batch.draft_model = InferenceModel::load(opt.draft_model_dir);
    batch.spec_tokens = opt.spec_tokens;
  }
  const std::string drafter = batch.draft == "model" ? "draft model" : "n-gram";
  print(compare(drafter + ", batch 16 (as configured)", m, plain, batch, many, opt.tokens / 2, opt.rounds, true),
        kSpecBatchTarget, false, false);
  batch.spec_max_batch = 16;
  print(compare(drafter + ", batch 16 (forced on)", m, plain, batch, many, opt.tokens / 2, opt.rounds, true), 0.0,
        false, false);
  std::fprintf(
      out,
      "plain GB/s: the weights batch-1 decoding streams (bytes per token x tokens/s), against the triad "
      "of %.1f GB/s and read stream of %.1f GB/s measured above: the ceiling plain decoding cannot pass\n"
      "bound: tok/ver x one token's weight bytes / (the bytes of a verify of 1 + drafts tokens, routed experts "
      "counted for that many, + the draft's bytes per drafted token): the speed-up the weight stream allows at "
      "this acceptance\n",
      limits.triad.gbs, limits.read.gbs);
  j["weight_bytes_per_token"] = bytes;
  return j;
}

}  // namespace myriad::bench
