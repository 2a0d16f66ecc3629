#include "bench/longctx_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/timing.h"
#include "infer/decode_weights.h"
#include "infer/inference_model.h"
#include "model/config.h"
#include "model/weights.h"

namespace myriad::bench {

namespace {

double peak_rss_gb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss: KiB on Linux
}

// The prompt: a fixed pseudo-random stream of ids in [3, vocab) (past pad/bos/eos).
int32_t token_at(int64_t t, int64_t vocab) {
  uint64_t x = uint64_t(t) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return int32_t(3 + x % uint64_t(vocab - 3));
}

std::string human_tokens(int64_t n) {
  if (n % (int64_t(1) << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % 1024 == 0) return std::to_string(n / 1024) + "K";
  return std::to_string(n);
}

// One timed decoder: a model and the sequence it extends.
struct Decoding {
  const InferenceModel* model;
  SequenceState* seq;
};

// The median seconds of n decode steps of each of `runs`, their steps interleaved (run 0, run 1, ..., run 0, ...)
// so that every run sees the same machine (other processes, clock speed) over the same seconds: the ratio of two
// medians is what the targets compare. The median, not the mean, so that a step delayed by another process does
// not move the figure. The tokens continue each stream.
std::vector<double> time_decode(std::span<const Decoding> runs, int64_t n) {
  std::vector<std::vector<double>> steps(runs.size(), std::vector<double>(static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i)
    for (size_t r = 0; r < runs.size(); ++r) {
      const int32_t tok = token_at(runs[r].seq->tokens, runs[r].model->config().vocab_size);
      const BatchEntry e{runs[r].seq, std::span<const int32_t>(&tok, 1)};
      const double t0 = now_seconds();
      (void)runs[r].model->forward(std::span<const BatchEntry>(&e, 1));
      steps[r][size_t(i)] = now_seconds() - t0;
    }
  std::vector<double> median;
  for (std::vector<double>& s : steps) {
    std::nth_element(s.begin(), s.begin() + n / 2, s.end());
    median.push_back(s[size_t(n / 2)]);
  }
  return median;
}

// Prefills `seq` from its current length to `to` tokens of the stream in chunks; returns the seconds.
double prefill(const InferenceModel& model, SequenceState& seq, int64_t to, int64_t chunk, std::vector<int32_t>& buf) {
  double seconds = 0.0;
  while (seq.tokens < to) {
    const int64_t n = std::min(chunk, to - seq.tokens);
    buf.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = token_at(seq.tokens + i, model.config().vocab_size);
    const BatchEntry e{&seq, buf};
    const double t0 = now_seconds();
    (void)model.forward(std::span<const BatchEntry>(&e, 1));
    seconds += now_seconds() - t0;
  }
  return seconds;
}

}  // namespace

nlohmann::ordered_json run_longctx_bench(const LongctxBenchOptions& opt, const MachineLimits& limits, std::FILE* out) {
  ModelConfig c = load_model_config(opt.config_path, nullptr);
  MYRIAD_REQUIRE(opt.context > 0 && opt.chunk > 0 && opt.decode > 0, kValue,
                 "bench longctx: --context, --chunk and --decode must be > 0");
  std::vector<int64_t> at = opt.at;
  if (at.empty())
    for (int64_t n : {int64_t(1) << 10, int64_t(32) << 10, int64_t(256) << 10, int64_t(1) << 20})
      if (n <= opt.context) at.push_back(n);
  std::sort(at.begin(), at.end());
  for (int64_t n : at)
    MYRIAD_REQUIRE(n > 0 && n <= opt.context, kValue, "bench longctx: --at length ", n, " must be in [1, --context ",
                   opt.context, "]");
  // Every decode step timed adds a token: the context must hold them all.
  const int64_t steps = int64_t(at.size()) * opt.decode * (opt.dense ? 2 : 1);
  c.max_position_embeddings = std::max(c.max_position_embeddings, opt.context + steps);
  const ModelWeights w = ModelWeights::random(c, 1);
  const std::shared_ptr<const DecodeWeights> dw = DecodeWeights::from_model(w);
  const InferenceModel model(c, dw);
  ModelConfig dense_c = c;
  dense_c.mla_sparse_attention.reset();
  const InferenceModel dense(dense_c, dw);
  const bool sparse = c.mla_sparse_attention.has_value();

  std::fprintf(out, "  model %s: %s MLA%s, %ld MLA of %ld layers; cache %s; prompt %s tokens in chunks of %ld\n",
               opt.config_path.c_str(), sparse ? "block-sparse" : "dense",
               sparse ? (" (block " + std::to_string(c.mla_sparse_attention->block_size) + ", top " +
                         std::to_string(c.mla_sparse_attention->top_k) + ", window " +
                         std::to_string(c.mla_sparse_attention->window) + ")")
                            .c_str()
                      : "",
               long(c.num_mla_layers()), long(c.num_hidden_layers), dtype_name(opt.cache),
               human_tokens(opt.context).c_str(), long(opt.chunk));
  SequenceState seq = model.new_sequence(MlaCache::kDefaultPageTokens, opt.cache);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<int32_t> buf;
  const double start = now_seconds();
  double prefill_s = 0.0, last_progress = start, decode_s = 0.0;
  int64_t prompt = 0;  // prompt tokens prefilled (seq.tokens also counts decoded ones)
  auto progress = [&](bool force) {
    const double now = now_seconds();
    if (!force && now - last_progress < opt.progress_every_s) return;
    last_progress = now;
    const double rate = double(prompt) / std::max(prefill_s, 1e-9);
    std::fprintf(out, "  prefill %9ld / %ld tokens  %7.0f tok/s  ETA %5.0f s  MLA cache %8.1f MB  peak RSS %.2f GB\n",
                 long(prompt), long(opt.context), rate, double(opt.context - prompt) / std::max(rate, 1e-9),
                 double(seq.mla_bytes()) / 1e6, peak_rss_gb());
    std::fflush(out);
  };
  for (int64_t next : at) {
    while (prompt < next) {
      const int64_t to = std::min(next, prompt + opt.chunk);  // the stream's tokens: decoded ones came after prompt
      prefill_s += prefill(model, seq, seq.tokens + (to - prompt), opt.chunk, buf);
      prompt = to;
      progress(false);
    }
    progress(true);
    // A fresh sequence of the first length, its steps interleaved with this length's: the ratio to it is measured
    // over the same seconds (the machine's load moves between lengths minutes apart).
    SequenceState ref = model.new_sequence(MlaCache::kDefaultPageTokens, opt.cache);
    (void)prefill(model, ref, at.front(), opt.chunk, buf);
    // Dense is timed after them, not among them: its reads of the whole cache would evict the others' working set.
    const std::vector<Decoding> runs = {{&model, &seq}, {&model, &ref}};
    const double t0 = now_seconds();
    const std::vector<double> t = time_decode(runs, opt.decode);
    const double step = t[0], ref_step = t[1];
    const Decoding dense_run{&dense, &seq};
    const double dense_step = opt.dense ? time_decode(std::span(&dense_run, 1), opt.decode)[0] : 0.0;
    decode_s += now_seconds() - t0;
    const double cache_mb = double(seq.mla_bytes()) / 1e6;
    const double floor_ms = double(seq.mla_bytes()) / (limits.triad.gbs * 1e9) * 1e3;
    nlohmann::ordered_json r = {{"at", next},
                                {"context", seq.tokens},
                                {"decode_ms", step * 1e3},
                                {"first_length_decode_ms", ref_step * 1e3},
                                {"ratio_to_first_length", step / ref_step},
                                {"mla_cache_mb", cache_mb},
                                {"cache_read_floor_ms", floor_ms}};
    if (opt.dense) r["dense_decode_ms"] = dense_step * 1e3;
    rows.push_back(r);
  }
  const double ratio = rows.back()["ratio_to_first_length"].get<double>();
  const std::string first_len = human_tokens(at.front());
  std::fprintf(out, "\n  %-10s %12s %12s %8s %12s %12s %16s\n", "context", "decode ms", (first_len + " ms").c_str(),
               "ratio", opt.dense ? "dense ms" : "", "cache MB", "cache read ms");
  for (const auto& r : rows) {
    std::fprintf(out, "  %-10s %12.2f %12.2f %7.2fx ", human_tokens(r["at"].get<int64_t>()).c_str(),
                 r["decode_ms"].get<double>(), r["first_length_decode_ms"].get<double>(),
                 r["ratio_to_first_length"].get<double>());
    if (opt.dense)
      std::fprintf(out, "%12.2f ", r["dense_decode_ms"].get<double>());
    else
      std::fprintf(out, "%12s ", "");
    std::fprintf(out, "%12.1f %16.3f\n", r["mla_cache_mb"].get<double>(), r["cache_read_floor_ms"].get<double>());
  }
  const double kda_per_seq = double(seq.kda_bytes());
  const double per_token = double(seq.mla_bytes()) / double(seq.tokens);
  std::fprintf(out,
               "\n  prefill %ld tokens in %.1f s (%.0f tok/s); decode at %s / at %s = %.2fx (target <= 2x with sparse "
               "MLA; medians of steps interleaved with a %s-token sequence's)\n  MLA cache %.1f bytes per token (%s), "
               "KDA state %.2f MB whatever the length; peak RSS %.2f GB; "
               "total %.1f s\n  (cache read ms: the whole latent cache read once at the triad bandwidth, %.1f GB/s: "
               "what every dense decode step costs at least)\n",
               long(prompt), prefill_s, double(prompt) / prefill_s,
               human_tokens(rows.back()["at"].get<int64_t>()).c_str(), first_len.c_str(), ratio, first_len.c_str(),
               per_token, dtype_name(opt.cache), kda_per_seq / 1e6, peak_rss_gb(), now_seconds() - start,
               limits.triad.gbs);
  return {{"config", opt.config_path},
          {"sparse", sparse},
          {"cache", dtype_name(opt.cache)},
          {"context", prompt},
          {"chunk", opt.chunk},
          {"prefill_s", prefill_s},
          {"prefill_tokens_per_s", double(prompt) / prefill_s},
          {"decode_ratio_last_first", ratio},
          {"mla_cache_bytes_per_token", per_token},
          {"kda_state_bytes", kda_per_seq},
          {"peak_rss_gb", peak_rss_gb()},
          {"rows", rows}};
}

}  // namespace myriad::bench
