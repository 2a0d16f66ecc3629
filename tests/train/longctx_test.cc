// Long-context tasks and their evaluation (data/datasets/longctx_tasks.h, train/longctx_eval.h, report/longctx_page.h):
// each sample's length, needle depth and answer checked by reading the prompt back (the chain of a vartrack sample
// followed here, independently of the generator); the grid scored with oracle generators that are always right,
// never right, or right only up to a length; the real model path; and every refusal before any work.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "data/datasets/longctx_tasks.h"
#include "data/tokenize/tokenizer.h"
#include "infer/decode_weights.h"
#include "infer/generate.h"
#include "infer/inference_model.h"
#include "model/config.h"
#include "model/transformer.h"
#include "report/longctx_page.h"
#include "train/longctx_eval.h"
#include "train/longctx_mix_source.h"

namespace myriad {
namespace {

class LongContextTest : public testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = new Tokenizer(Tokenizer::train_from_texts(generate_corpus(3, 200000), 400)); }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static Tokenizer* tok_;
};
Tokenizer* LongContextTest::tok_ = nullptr;

void expect_error(const std::function<void()>& f, ErrorKind kind, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& s : fragments) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST_F(LongContextTest, SamplesHaveTheirLengthDepthAndAnswer) {
  for (LongTask task : kLongTasks)
    for (int64_t length : {300, 1000, 4000})
      for (int depth : {0, 25, 50, 75, 100}) {
        const LongSample s = make_long_sample(task, *tok_, length, depth, 7);
        SCOPED_TRACE(std::string(long_task_name(task)) + " " + std::to_string(length) + " " + std::to_string(depth));
        // Never longer than asked, and at most a sentence (< 60 tokens) shorter.
        EXPECT_LE(int64_t(s.tokens.size()), length);
        EXPECT_GE(int64_t(s.tokens.size()), length - 60);
        EXPECT_EQ(s.tokens, [&] {
          std::vector<int32_t> ids{tok_->end_of_text_id()};
          const auto body = tok_->encode(s.prompt, Specials::kAsText);
          ids.insert(ids.end(), body.begin(), body.end());
          return ids;
        }());
        ASSERT_TRUE(std::regex_match(s.answer, std::regex("[1-9][0-9]{4}")));
        // The needle sits at its depth: the filler before it is depth% of all filler, to within one sentence.
        const double sentence = 60.0 / double(length - 250);
        EXPECT_NEAR(s.needle_fraction, depth / 100.0, sentence + 1e-9);
        if (depth == 0) {
          EXPECT_EQ(s.needle_fraction, 0.0);
        }
        if (depth == 100) {
          EXPECT_EQ(s.needle_fraction, 1.0);
        }
        // The answer is stated where the needle is, and the prompt ends with the question's lead-in.
        const std::string after = s.prompt.substr(size_t(s.needle_offset));
        EXPECT_EQ(after.substr(0, after.find('\n')).find(s.answer) != std::string::npos, true) << after.substr(0, 80);
        EXPECT_EQ(s.prompt.back(), 's') << "ends with '... is'";
        if (task == LongTask::kPasskey) {
          size_t n = 0;
          for (size_t p = s.prompt.find("pass key is"); p != std::string::npos; p = s.prompt.find("pass key is", p + 1))
            ++n;
          EXPECT_EQ(n, 2u) << "the needle and the question";
        }
        if (task == LongTask::kMultiKey) {
          // Four keys with different numbers; the question asks the one whose number is the answer.
          const std::regex needle("The magic number for ([a-z]+ [a-z]+) is ([0-9]{5})\\.");
          std::map<std::string, std::string> numbers;
          for (auto it = std::sregex_iterator(s.prompt.begin(), s.prompt.end(), needle); it != std::sregex_iterator();
               ++it)
            numbers[(*it)[1]] = (*it)[2];
          EXPECT_EQ(numbers.size(), 4u);
          std::smatch q;
          ASSERT_TRUE(std::regex_search(s.prompt, q, std::regex("What is the magic number for ([a-z]+ [a-z]+)\\?")));
          EXPECT_EQ(numbers[q[1]], s.answer);
        }
        if (task == LongTask::kVarTrack) {
          // Follow the chain as written, in text order: every hop must come after what it copies.
          std::map<std::string, std::string> value;
          const std::regex assign("Let ([A-Z]{3}) be ([A-Z]{3}|[0-9]{5})\\.");
          for (auto it = std::sregex_iterator(s.prompt.begin(), s.prompt.end(), assign); it != std::sregex_iterator();
               ++it) {
            const std::string src = (*it)[2];
            if (std::isdigit(static_cast<unsigned char>(src[0]))) {
              value[(*it)[1]] = src;
            } else {
              ASSERT_TRUE(value.count(src)) << src << " used before it is assigned";
              value[(*it)[1]] = value[src];
            }
          }
          std::smatch q;
          ASSERT_TRUE(std::regex_search(s.prompt, q, std::regex("What is the value of ([A-Z]{3})\\?")));
          EXPECT_EQ(value[q[1]], s.answer);
          EXPECT_EQ(value.size(), 4u);
        }
      }
}

TEST_F(LongContextTest, SamplesAreAFunctionOfTheSeed) {
  const LongSample a = make_long_sample(LongTask::kMultiKey, *tok_, 800, 40, 11);
  const LongSample b = make_long_sample(LongTask::kMultiKey, *tok_, 800, 40, 11);
  const LongSample c = make_long_sample(LongTask::kMultiKey, *tok_, 800, 40, 12);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_NE(a.prompt, c.prompt);
}

TEST_F(LongContextTest, AnswersMatchOnlyTheWholeNumber) {
  EXPECT_TRUE(answer_is_correct(" 48213", "48213"));
  EXPECT_TRUE(answer_is_correct("48213. The", "48213"));
  EXPECT_TRUE(answer_is_correct("   48213\n", "48213"));
  EXPECT_FALSE(answer_is_correct(" 4821", "48213"));
  EXPECT_FALSE(answer_is_correct(" 482134", "48213"));
  EXPECT_FALSE(answer_is_correct(" x48213", "48213"));
  EXPECT_FALSE(answer_is_correct("", "48213"));
}

TEST_F(LongContextTest, TheGridScoresWhatIsGenerated) {
  LongContextOptions o;
  o.task = LongTask::kVarTrack;
  o.lengths = {300, 900};
  o.depths = {0, 50, 100};
  o.samples = 3;
  // Right up to 600 tokens, wrong above: the grid shows exactly that, cell by cell.
  int calls = 0;
  const LongContextReport r =
      evaluate_long_context(o, *tok_, 1000, [&](const LongSample& s, int64_t* generated) -> std::string {
        ++calls;
        *generated = 2;
        return s.tokens.size() <= 600 ? " " + s.answer + "." : " 12345";
      });
  EXPECT_EQ(calls, 2 * 3 * 3);
  ASSERT_EQ(r.cells.size(), 6u);
  for (const LongContextCell& c : r.cells) {
    EXPECT_EQ(c.samples, 3);
    EXPECT_EQ(c.correct, c.length == 300 ? 3 : 0) << c.length << " " << c.depth;
    EXPECT_LE(c.prompt_tokens, double(c.length));
  }
  EXPECT_EQ(r.generated_tokens, 2 * 18);
  const nlohmann::json j = r.to_json();
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), 0.5);
  EXPECT_EQ(j["cells"].size(), 6u);
  EXPECT_EQ(j["task"], "vartrack");

  // The heatmap: one cell per grid cell, coloured by accuracy (green at 100%, red at 0%), in a page that fetches
  // nothing and in a standalone SVG file.
  const std::string page = render_longctx_page(j, "t");
  EXPECT_EQ(page.find("http"), std::string::npos);
  size_t rects = 0;
  for (size_t p = page.find("<rect"); p != std::string::npos; p = page.find("<rect", p + 1)) ++rects;
  EXPECT_EQ(rects, 6u);
  EXPECT_NE(page.find("fill=\"#1a9850\""), std::string::npos);
  EXPECT_NE(page.find("fill=\"#d73027\""), std::string::npos);
  EXPECT_NE(page.find("3 / 3"), std::string::npos);
  const std::string svg = render_longctx_svg(j);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
}

TEST_F(LongContextTest, BadGridsAreRefusedBeforeAnyWork) {
  LongContextOptions o;
  o.lengths = {512, 4096};
  o.depths = {0, 50};
  int calls = 0;
  const LongGenerateFn count = [&](const LongSample&, int64_t*) {
    ++calls;
    return std::string();
  };
  expect_error([&] { evaluate_long_context(o, *tok_, 2048, count); }, ErrorKind::kValue,
               {"length 4096", "max_position_embeddings 2048"});
  o.lengths = {512};
  o.depths = {0, 101};
  expect_error([&] { evaluate_long_context(o, *tok_, 2048, count); }, ErrorKind::kValue, {"depth 101", "0..100"});
  o.depths = {50};
  o.samples = 0;
  expect_error([&] { evaluate_long_context(o, *tok_, 2048, count); }, ErrorKind::kValue, {"samples 0"});
  EXPECT_EQ(calls, 0);
  expect_error([] { (void)make_long_sample(LongTask::kVarTrack, *tok_, 30, 50, 1); }, ErrorKind::kValue,
               {"30 tokens is too short", "at least"});
  expect_error([] { (void)parse_long_task("needle"); }, ErrorKind::kValue, {"passkey, multikey, vartrack"});
  EXPECT_EQ(parse_token_lengths("1K,4k,300,1M"), (std::vector<int64_t>{1024, 4096, 300, 1048576}));
  expect_error([] { (void)parse_token_lengths("1K,,2K"); }, ErrorKind::kValue, {"length ''"});
  expect_error([] { (void)parse_token_lengths("4KB"); }, ErrorKind::kValue, {"length '4KB'"});
  expect_error([] { (void)parse_token_lengths("99999999999999999999M"); }, ErrorKind::kValue, {"too large"});
}

// With a model: a random tiny model (it cannot retrieve anything) runs the grid through chunked prefill and greedy
// decode; chunked prefill gives the same greedy continuation as one prefill.
TEST_F(LongContextTest, AModelRunsTheGridWithChunkedPrefill) {
  ModelConfig c = load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
  ASSERT_GE(c.vocab_size, tok_->vocab_size());
  const Transformer t(c, ModelWeights::random(c, 5));
  const InferenceModel model(c, DecodeWeights::from_model(t.weights()));
  const LongSample s = make_long_sample(LongTask::kPasskey, *tok_, 400, 50, 3);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(generate(model, s.tokens, 8, greedy, -1, {}, 0), generate(model, s.tokens, 8, greedy, -1, {}, 64));
  LongContextOptions o;
  o.lengths = {300};
  o.depths = {0, 100};
  o.samples = 1;
  o.prefill_chunk = 100;
  const LongContextReport r = evaluate_long_context(model, *tok_, o);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_GT(r.generated_tokens, 0);
  EXPECT_EQ(r.cells[0].answer.size(), 5u);
}

std::vector<int64_t> ints(const Tensor& t) {
  return std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel());
}

// A corpus stand-in for the mix: sequence n is all token 5 + n % 3 (so a test sees which one it got), state n.
class CountingSource final : public BatchSource {
 public:
  TrainBatch next(int64_t seq_len) override {
    const std::vector<int64_t> v(size_t(seq_len), 5 + n_++ % 3);
    return {Tensor::from_vector(v, {seq_len}), Tensor::from_vector(v, {seq_len}), Tensor(), {}};
  }
  nlohmann::json state() const override { return {{"n", n_}}; }
  void restore(const nlohmann::json& s) override { n_ = s["n"].get<int64_t>(); }
  std::vector<TrainBatch> validation(int64_t, int64_t) override { return {}; }
  int64_t target_bytes(const TrainBatch&) const override { return 0; }

 private:
  int64_t n_ = 0;
};

// train.json longctx_mix: about `fraction` of the sequences are task samples of the sequence's length whose text is
// the prompt followed by its answer (the number hidden in the prompt), then end-of-text and padding; only the
// answer and the end-of-text are targets; the others are the corpus's, in its order; a restored source continues with
// the same sequences.
TEST_F(LongContextTest, MixedTrainingSequencesAreTaskSamplesEndingInTheirAnswer) {
  LongTaskMixConfig mix;
  mix.tasks = {"passkey", "vartrack"};
  mix.fraction = 0.3;
  auto make = [&] { return LongTaskMixSource(std::make_unique<CountingSource>(), *tok_, mix, 11, 0); };
  LongTaskMixSource src = make();
  const int64_t T = 512, N = 120;
  int64_t samples = 0, corpus = 0;
  std::map<std::string, int> by_task;
  std::vector<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < N; ++i) {
    const TrainBatch b = src.next(T);
    ASSERT_EQ(b.tokens.numel(), T);
    const std::vector<int64_t> tok = ints(b.tokens), tgt = ints(b.targets);
    seen.push_back(tok);
    if (!src.is_task_sample(i)) {
      EXPECT_EQ(tok, std::vector<int64_t>(size_t(T), 5 + corpus++ % 3)) << "sequence " << i;
      continue;
    }
    ++samples;
    // The targets are the answer's tokens and the end-of-text (the next tokens there), -100 elsewhere; padding is 0.
    int64_t first = 0;
    while (first < T && tgt[size_t(first)] == -100) ++first;
    int64_t real = first;
    while (real < T && tgt[size_t(real)] != -100) ++real;
    ASSERT_GT(real, T - 80) << "a sample fills its sequence but for a sentence";
    EXPECT_GE(real - first, 2);
    EXPECT_LE(real - first, 8);
    for (int64_t t = first; t + 1 < real; ++t) EXPECT_EQ(tgt[size_t(t)], tok[size_t(t + 1)]);
    EXPECT_EQ(tgt[size_t(real - 1)], tok_->end_of_text_id());
    for (int64_t t = real; t < T; ++t) EXPECT_EQ(tgt[size_t(t)], -100);
    for (int64_t t = real + 1; t < T; ++t) EXPECT_EQ(tok[size_t(t)], 0);
    const std::vector<int32_t> answer_ids(tgt.begin() + first, tgt.begin() + real - 1);
    const std::string answer_text = tok_->decode(answer_ids);
    const std::string text = tok_->decode(std::vector<int32_t>(tok.begin() + 1, tok.begin() + real));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex(" (\\d{5})$"))) << text.substr(text.size() - 80);
    const std::string answer = m[1];
    EXPECT_EQ(answer_text, " " + answer) << "the targets are exactly the answer";
    // The answer is the hidden number: the needle (passkey) or the chain's first value (vartrack) states it.
    const bool passkey = text.find("What is the pass key?") != std::string::npos;
    ++by_task[passkey ? "passkey" : "vartrack"];
    EXPECT_NE(text.find(passkey ? "the pass key is " + answer + "." : " be " + answer + "."), std::string::npos)
        << text.substr(text.size() - 200);
  }
  EXPECT_EQ(samples, src.samples_drawn());
  EXPECT_NEAR(double(samples) / N, mix.fraction, 0.12);
  EXPECT_GT(by_task["passkey"], 0);
  EXPECT_GT(by_task["vartrack"], 0);

  // Resumption: the state after 60 sequences gives the same next 60.
  LongTaskMixSource a = make();
  for (int i = 0; i < 60; ++i) (void)a.next(T);
  LongTaskMixSource b = make();
  b.restore(a.state());
  for (int64_t i = 60; i < N; ++i) EXPECT_EQ(ints(b.next(T).tokens), seen[size_t(i)]) << i;
  LongTaskMixSource c = make();
  EXPECT_THROW(c.restore(nlohmann::json{{"n", 3}}), Error);  // a state saved without the mix

  // A share per stage (train.json stages[i].longctx_fraction): the trainer names the stage before each step's
  // batches; at share 0 every sequence is the corpus's, at 1 every one a sample, and the choice of the others is the
  // one the single fraction makes (the same sequences are samples at the same share).
  LongTaskMixConfig staged = mix;
  staged.stage_fractions = {0.0, 1.0, mix.fraction};
  LongTaskMixSource ladder(std::make_unique<CountingSource>(), *tok_, staged, 11, 0);
  ladder.set_stage(0);
  for (int64_t i = 0; i < 20; ++i) EXPECT_FALSE(ladder.is_task_sample(i)) << i;
  EXPECT_EQ(ints(ladder.next(T).tokens), std::vector<int64_t>(size_t(T), 5));
  ladder.set_stage(1);
  for (int64_t i = 0; i < 20; ++i) EXPECT_TRUE(ladder.is_task_sample(i)) << i;
  EXPECT_NE(ints(ladder.next(T).tokens)[0], 5);
  ladder.set_stage(2);
  for (int64_t i = 0; i < N; ++i) EXPECT_EQ(ladder.is_task_sample(i), src.is_task_sample(i)) << i;

  // Too short a sequence for a sample: one error naming the mix.
  mix.fraction = 1.0;
  LongTaskMixSource all(std::make_unique<CountingSource>(), *tok_, mix, 11, 0);
  expect_error([&] { (void)all.next(40); }, ErrorKind::kConfig, {"longctx_mix", "40-token"});
}

}  // namespace
}  // namespace myriad
