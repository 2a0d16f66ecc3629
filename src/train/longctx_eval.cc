// The long-context evaluation: see longctx_eval.h.
#include "train/longctx_eval.h"

#include <cctype>

#include "core/error.h"
#include "core/timing.h"
#include "data/datasets/corpus.h"
#include "data/tokenize/tokenizer.h"
#include "infer/generate.h"
#include "infer/inference_model.h"

namespace myriad {

std::vector<int64_t> parse_token_lengths(const std::string& list) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    int64_t v = 0, scale = 1;
    size_t i = 0;
    for (; i < item.size() && std::isdigit(static_cast<unsigned char>(item[i])); ++i) {
      v = v * 10 + (item[i] - '0');
      MYRIAD_REQUIRE(v <= (int64_t(1) << 40), kValue, "length '", item, "' is too large");  // x 2^20 still fits
    }
    if (i + 1 == item.size() && (item[i] == 'K' || item[i] == 'k')) scale = 1024, ++i;
    if (i + 1 == item.size() && (item[i] == 'M' || item[i] == 'm')) scale = 1024 * 1024, ++i;
    MYRIAD_REQUIRE(i > 0 && i == item.size(), kValue, "length '", item, "' in '", list,
                   "': expected a number of tokens, optionally with K (x1024) or M (x1048576)");
    out.push_back(v * scale);
    start = end + 1;
  }
  return out;
}

void check_long_context_options(const LongContextOptions& o, int64_t max_context) {
  MYRIAD_REQUIRE(!o.lengths.empty() && !o.depths.empty(), kValue,
                 "eval longctx needs at least one length and one depth");
  for (int64_t L : o.lengths) {
    MYRIAD_REQUIRE(L >= 1, kValue, "eval longctx: length ", L, " must be >= 1");
    MYRIAD_REQUIRE(L <= max_context, kValue, "eval longctx: length ", L,
                   " exceeds the model's max_position_embeddings ", max_context);
  }
  for (int d : o.depths)
    MYRIAD_REQUIRE(d >= 0 && d <= 100, kValue, "eval longctx: depth ", d, " is outside 0..100 (percent)");
  MYRIAD_REQUIRE(o.samples >= 1, kValue, "eval longctx: samples ", o.samples, " must be >= 1");
  MYRIAD_REQUIRE(o.prefill_chunk >= 1 && o.max_new_tokens >= 1, kValue,
                 "eval longctx: prefill_chunk and max_new_tokens must be >= 1");
}

LongContextReport evaluate_long_context(const LongContextOptions& o, const Tokenizer& tok, int64_t max_context,
                                        const LongGenerateFn& generate,
                                        const std::function<void(const LongContextCell&)>& on_cell) {
  check_long_context_options(o, max_context);
  LongContextReport r;
  r.task = o.task;
  r.lengths = o.lengths;
  r.depths = o.depths;
  const double t_all = now_seconds();
  for (size_t li = 0; li < o.lengths.size(); ++li)
    for (size_t di = 0; di < o.depths.size(); ++di) {
      const double t_cell = now_seconds();
      LongContextCell c;
      c.length = o.lengths[li];
      c.depth = o.depths[di];
      for (int i = 0; i < o.samples; ++i) {
        // Each cell's prompts from their own stream: a cell's result does not depend on the grid around it.
        const uint64_t seed = mix_seed(mix_seed(mix_seed(o.seed, uint64_t(c.length)), uint64_t(c.depth)), uint64_t(i));
        const LongSample s = make_long_sample(o.task, tok, c.length, c.depth, seed);
        int64_t generated = 0;
        const std::string got = generate(s, &generated);
        const bool ok = answer_is_correct(got, s.answer);
        c.correct += ok ? 1 : 0;
        ++c.samples;
        c.prompt_tokens += double(s.tokens.size()) / o.samples;
        r.prompt_tokens += int64_t(s.tokens.size());
        r.generated_tokens += generated;
        if (i == 0) c.answer = s.answer, c.got = got;
      }
      c.seconds = now_seconds() - t_cell;
      r.cells.push_back(c);
      if (on_cell) on_cell(c);
    }
  r.seconds = now_seconds() - t_all;
  return r;
}

LongContextReport evaluate_long_context(const InferenceModel& model, const Tokenizer& tok, const LongContextOptions& o,
                                        const std::function<void(const LongContextCell&)>& on_cell) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto run = [&](const LongSample& s, int64_t* generated) {
    // A model's vocabulary may be larger than its tokenizer's (padded): an id without text ends the answer.
    const int64_t vocab = tok.vocab_size();
    std::vector<int32_t> out = myriad::generate(
        model, s.tokens, o.max_new_tokens, greedy, tok.end_of_text_id(),
        [&](const std::vector<int32_t>& g) {
          return g.back() >= vocab || tok.decode(g).find('\n') != std::string::npos;
        },
        o.prefill_chunk);
    *generated = int64_t(out.size());
    if (!out.empty() && out.back() >= vocab) out.pop_back();
    std::string text = tok.decode(out);
    return text.substr(0, text.find('\n'));
  };
  return evaluate_long_context(o, tok, model.config().max_position_embeddings, run, on_cell);
}

nlohmann::json LongContextReport::to_json() const {
  nlohmann::json j;
  j["task"] = long_task_name(task);
  j["lengths"] = lengths;
  j["depths"] = depths;
  j["seconds"] = seconds;
  j["prompt_tokens"] = prompt_tokens;
  j["generated_tokens"] = generated_tokens;
  int correct = 0, samples = 0;
  nlohmann::json cs = nlohmann::json::array();
  for (const LongContextCell& c : cells) {
    cs.push_back({{"length", c.length},
                  {"depth", c.depth},
                  {"correct", c.correct},
                  {"samples", c.samples},
                  {"accuracy", c.accuracy()},
                  {"prompt_tokens", c.prompt_tokens},
                  {"seconds", c.seconds},
                  {"answer", c.answer},
                  {"got", c.got}});
    correct += c.correct;
    samples += c.samples;
  }
  j["cells"] = cs;
  j["accuracy"] = samples > 0 ? double(correct) / samples : 0.0;
  return j;
}

}  // namespace myriad
