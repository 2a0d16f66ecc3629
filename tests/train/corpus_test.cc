// The built-in corpus and the task evaluation: determinism per seed, the size target, every task document's
// answer checked by parsing it back, held-out prompts absent from the training corpus, generation (greedy
// determinism, stop_id, stop predicate) on a random tiny model, and the scoring through evaluate_tasks with
// fake tokenizers that act as an oracle.
#include "data/datasets/corpus.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "autograd/tape.h"
#include "infer/decode_weights.h"
#include "infer/generate.h"
#include "infer/inference_model.h"
#include "model/config.h"
#include "model/transformer.h"
#include "train/task_eval.h"

namespace myriad {
namespace {

std::vector<std::string> lines_of(const std::string& doc) {
  std::vector<std::string> lines;
  std::istringstream in(doc);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// "a b c" -> "abc"; empty when the spacing is not exactly one lowercase letter, space, letter, ...
std::string unspaced(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i % 2 == 1) {
      if (s[i] != ' ') return {};
      continue;
    }
    if (s[i] < 'a' || s[i] > 'z') return {};
    out += s[i];
  }
  return s.size() % 2 == 1 ? out : std::string();
}

// Parses one task document back and checks every answer in it. Returns its kind, or nullopt for prose.
// Fails the test (with the document) on anything malformed or wrong.
std::optional<TaskKind> check_document(const std::string& doc) {
  SCOPED_TRACE("document:\n" + doc);
  EXPECT_FALSE(doc.empty());
  EXPECT_EQ(doc.back(), '\n');
  const std::vector<std::string> lines = lines_of(doc);
  if (lines.empty()) return std::nullopt;
  const std::string& first = lines[0];
  if (starts_with(first, "Q: ")) {
    for (const std::string& l : lines) {
      int a = -1, b = -1, c = -1;
      char tail = 0;
      EXPECT_EQ(std::sscanf(l.c_str(), "Q: %d + %d = ? A: %d%c", &a, &b, &c, &tail), 3) << l;
      EXPECT_EQ(l, str("Q: ", a, " + ", b, " = ? A: ", c));  // canonical spelling (no leading zeros, spaces)
      EXPECT_TRUE(a >= 0 && a <= 999 && b >= 0 && b <= 999) << l;
      EXPECT_EQ(a + b, c) << l;
    }
    return TaskKind::kArithmetic;
  }
  if (starts_with(first, "copy: ") || starts_with(first, "reverse: ")) {
    const bool reverse = starts_with(first, "reverse: ");
    for (const std::string& l : lines) {
      const std::string head = reverse ? "reverse: " : "copy: ";
      EXPECT_TRUE(starts_with(l, head)) << l;
      const size_t arrow = l.find(" -> ");
      EXPECT_NE(arrow, std::string::npos) << l;
      if (arrow == std::string::npos) continue;
      const std::string in = unspaced(l.substr(head.size(), arrow - head.size())), out = unspaced(l.substr(arrow + 4));
      EXPECT_TRUE(in.size() >= 2 && in.size() <= 6) << l;
      EXPECT_EQ(out, reverse ? std::string(in.rbegin(), in.rend()) : in) << l;
    }
    return reverse ? TaskKind::kReverse : TaskKind::kCopy;
  }
  if (starts_with(first, "key k")) {
    std::map<int, int> kv;
    size_t i = 0;
    for (; i < lines.size() && starts_with(lines[i], "key k"); ++i) {
      int k = -1, v = -1;
      EXPECT_EQ(std::sscanf(lines[i].c_str(), "key k%d = %d.", &k, &v), 2) << lines[i];
      EXPECT_EQ(lines[i], str("key k", k, " = ", v, "."));
      EXPECT_EQ(kv.count(k), 0u) << "duplicate key: " << lines[i];
      kv[k] = v;
    }
    EXPECT_TRUE(kv.size() >= 2 && kv.size() <= 8);
    // One line of prose filler, then 1-3 recall lines whose values match the key lines.
    EXPECT_LT(i, lines.size());
    if (i < lines.size()) {
      EXPECT_EQ(lines[i].back(), '.') << lines[i];
    }
    const size_t queries = lines.size() - i - 1;
    EXPECT_TRUE(queries >= 1 && queries <= 3);
    std::set<int> asked;
    for (++i; i < lines.size(); ++i) {
      int k = -1, v = -1;
      EXPECT_EQ(std::sscanf(lines[i].c_str(), "recall k%d -> %d", &k, &v), 2) << lines[i];
      EXPECT_EQ(lines[i], str("recall k", k, " -> ", v));
      EXPECT_TRUE(kv.count(k)) << "recall of an absent key: " << lines[i];
      if (kv.count(k)) {
        EXPECT_EQ(kv[k], v) << lines[i];
      }
      EXPECT_TRUE(asked.insert(k).second) << "asked twice: " << lines[i];
    }
    return TaskKind::kRecall;
  }
  // Prose: capitalised sentences ending in '.', paragraphs separated by one empty line.
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i % 2 == 1) {
      EXPECT_EQ(lines[i], "");
      continue;
    }
    EXPECT_TRUE(!lines[i].empty() && lines[i][0] >= 'A' && lines[i][0] <= 'Z' && lines[i].back() == '.') << lines[i];
  }
  return std::nullopt;
}

size_t total_bytes(const std::vector<std::string>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

// The checker itself catches wrong answers (else the corpus test below could never fail).
TEST(Corpus, CheckerRejectsWrongAnswers) {
  EXPECT_EQ(check_document("Q: 12 + 7 = ? A: 19\n"), std::optional<TaskKind>(TaskKind::kArithmetic));
  EXPECT_NONFATAL_FAILURE(check_document("Q: 12 + 7 = ? A: 19\nQ: 1 + 2 = ? A: 4\n"), "a + b");
  EXPECT_NONFATAL_FAILURE(check_document("copy: a b c -> a b d\n"), "out");
  EXPECT_NONFATAL_FAILURE(check_document("reverse: a b c -> a b c\n"), "out");
  EXPECT_NONFATAL_FAILURE(check_document("key k1 = 5.\nkey k2 = 6.\nThe cat sleeps.\nrecall k1 -> 6\n"), "kv[k]");
  EXPECT_NONFATAL_FAILURE(check_document("key k1 = 5.\nkey k2 = 6.\nThe cat sleeps.\nrecall k3 -> 5\n"), "absent key");
  EXPECT_NONFATAL_FAILURE(check_document("the cat sleeps.\n"), "the cat");
}

TEST(Corpus, DeterministicPerSeedAndDifferentAcrossSeeds) {
  const auto a = generate_corpus(7, 50000), b = generate_corpus(7, 50000), c = generate_corpus(8, 50000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Not merely shifted: the first documents differ too.
  EXPECT_NE(a[0], c[0]);
}

TEST(Corpus, MeetsTheSizeTargetByLessThanOneDocument) {
  for (size_t target : {size_t(0), size_t(1), size_t(1000), size_t(123457)}) {
    const auto docs = generate_corpus(3, target);
    const size_t n = total_bytes(docs);
    EXPECT_GE(n, target);
    if (target == 0) {
      EXPECT_TRUE(docs.empty());
      continue;
    }
    EXPECT_LT(n - docs.back().size(), target) << "one document too many";
  }
}

TEST(Corpus, EveryTaskAnswerIsRightAndTheMixIsAboutHalfProse) {
  const auto docs = generate_corpus(11, 400000);
  std::map<int, int> count;  // kind (or -1 for prose) -> documents
  for (const auto& d : docs) {
    const auto kind = check_document(d);
    ++count[kind ? int(*kind) : -1];
    if (HasFailure()) return;  // one malformed document is enough to read
  }
  const double prose = double(count[-1]) / double(docs.size());
  EXPECT_GT(prose, 0.4);
  EXPECT_LT(prose, 0.6);
  for (TaskKind k : kTaskKinds) EXPECT_GT(count[int(k)], int(docs.size()) / 16) << task_kind_name(k);
}

// The mix's shares: task documents at task_share, each kind at its weight's share of them (binomial: 400 KB is
// ~1,800 documents, so a share's standard error is ~1.2 points; 5 points is about 4 of them). The default mix
// keeps the documents it drew before weights existed (the same generator draws).
TEST(Corpus, TaskShareAndWeightsSetTheMix) {
  CorpusMix mix;
  mix.task_share = 0.8;
  mix.task_weights = {4.0, 1.0, 1.0, 0.0};  // arithmetic, copy, reverse, recall
  const auto docs = generate_corpus(11, 400000, mix);
  std::map<int, int> count;
  for (const auto& d : docs) {
    const auto kind = check_document(d);
    ++count[kind ? int(*kind) : -1];
    if (HasFailure()) return;
  }
  const double n = double(docs.size()), tasks = n - count[-1];
  EXPECT_NEAR(count[-1] / n, 0.2, 0.05);
  EXPECT_NEAR(count[int(TaskKind::kArithmetic)] / tasks, 4.0 / 6.0, 0.05);
  EXPECT_NEAR(count[int(TaskKind::kCopy)] / tasks, 1.0 / 6.0, 0.05);
  EXPECT_EQ(count[int(TaskKind::kRecall)], 0);
  // All prose, all tasks.
  mix.task_share = 0.0;
  for (const auto& d : generate_corpus(3, 20000, mix)) EXPECT_FALSE(check_document(d).has_value());
  mix.task_share = 1.0;
  for (const auto& d : generate_corpus(3, 20000, mix)) EXPECT_TRUE(check_document(d).has_value());
  // Equal weights of any size are the default mix.
  CorpusMix equal;
  equal.task_weights = {2.0, 2.0, 2.0, 2.0};
  EXPECT_EQ(generate_corpus(5, 30000, equal), generate_corpus(5, 30000));
  mix.task_share = 1.5;
  EXPECT_THROW(generate_corpus(3, 100, mix), Error);
}

TEST(Corpus, ProseUsesAFewHundredWords) {
  std::set<std::string> words;
  TextRng rng(5);
  for (int i = 0; i < 2000; ++i) {
    std::string doc = prose_document(rng);
    for (char& ch : doc)
      if (ch == '.' || ch == ',' || ch == '\n') ch = ' ';
    std::istringstream in(doc);
    for (std::string w; in >> w;) words.insert(w);
  }
  EXPECT_GT(words.size(), 200u);
  EXPECT_LT(words.size(), 600u);
}

TEST(Tasks, HeldOutExamplesAreCorrectDeterministicAndNotInTheTrainingCorpus) {
  const auto docs = generate_corpus(1, 600000);
  std::set<std::string> lines;
  std::string all;
  for (const auto& d : docs) {
    for (const auto& l : lines_of(d)) lines.insert(l);
    all += d;
  }
  for (TaskKind kind : kTaskKinds) {
    SCOPED_TRACE(task_kind_name(kind));
    const auto ex = task_examples(kind, 2, 200);
    ASSERT_EQ(ex.size(), 200u);
    const auto again = task_examples(kind, 2, 200), other = task_examples(kind, 3, 200);
    int same_as_other = 0;
    for (size_t i = 0; i < ex.size(); ++i) {
      EXPECT_EQ(ex[i].kind, kind);
      EXPECT_EQ(ex[i].prompt, again[i].prompt);
      EXPECT_EQ(ex[i].answer, again[i].answer);
      same_as_other += ex[i].prompt == other[i].prompt;
      ASSERT_EQ(ex[i].answer[0], ' ') << ex[i].answer;
      EXPECT_EQ(ex[i].answer.find('\n'), std::string::npos);
      // The answer is right: the example parses back as a one-example document.
      EXPECT_EQ(check_document(ex[i].prompt + ex[i].answer + "\n"), std::optional<TaskKind>(kind));
      // Held out: no training line starts with the prompt; a recall prompt occurs nowhere in the corpus.
      if (kind == TaskKind::kRecall) {
        EXPECT_EQ(all.find(ex[i].prompt), std::string::npos) << ex[i].prompt;
      } else {
        auto it = lines.lower_bound(ex[i].prompt);
        const bool in_training = it != lines.end() && starts_with(*it, ex[i].prompt + " ");
        EXPECT_FALSE(in_training) << ex[i].prompt << " | " << *it;
      }
    }
    EXPECT_LT(same_as_other, 60) << "seeds 2 and 3 give nearly the same prompts";
  }
  // The training documents hold training problems only (the partition), checked directly on arithmetic.
  for (const auto& l : lines) {
    int a = -1, b = -1, c = -1;
    if (std::sscanf(l.c_str(), "Q: %d + %d = ? A: %d", &a, &b, &c) == 3) {
      EXPECT_FALSE(is_held_out(TaskKind::kArithmetic, str(a, "+", b))) << l;
    }
  }
}

TEST(Tasks, HeldOutArithmeticCoversShortOperands) {
  // The held-out set keeps the training distribution: some one-digit operands, some three-digit ones.
  int one = 0, three = 0;
  for (const auto& e : task_examples(TaskKind::kArithmetic, 9, 300)) {
    int a = 0, b = 0;
    ASSERT_EQ(std::sscanf(e.prompt.c_str(), "Q: %d + %d", &a, &b), 2);
    one += a < 10;
    three += a >= 100;
  }
  EXPECT_GT(one, 30);
  EXPECT_GT(three, 30);
}

TEST(Scoring, ExactMatchOfTheFirstLineAfterTrimming) {
  EXPECT_TRUE(answer_matches(" 19", " 19"));
  EXPECT_TRUE(answer_matches("19", " 19"));
  EXPECT_TRUE(answer_matches(" 19 \n", " 19"));
  EXPECT_TRUE(answer_matches(" 19\nQ: 3 + 4 = ? A: 7", " 19"));
  EXPECT_TRUE(answer_matches("\t a b c\r\n", " a b c"));
  EXPECT_FALSE(answer_matches(" 191", " 19"));
  EXPECT_FALSE(answer_matches(" 1 9", " 19"));
  EXPECT_FALSE(answer_matches("", " 19"));
  EXPECT_FALSE(answer_matches("\n 19", " 19"));  // the answer must be on the prompt's line
  EXPECT_FALSE(answer_matches(" a b c d", " a b c"));
  EXPECT_FALSE(answer_matches(" 19.", " 19"));
  EXPECT_EQ(extract_answer("  42 -> x\nmore"), "42 -> x");
  EXPECT_EQ(extract_answer(""), "");
}

ModelConfig tiny() {
  return load_model_config(std::string(MYRIAD_SOURCE_DIR) + "/configs/tiny.json", nullptr);
}

// Generation through the inference model (infer/generate.h), over a training model's weights.
std::vector<int32_t> gen(const InferenceModel& m, const std::vector<int32_t>& prompt, int n, float temperature,
                         uint64_t seed, int32_t stop_id, const StopFn& stop = {}) {
  SamplingParams sp;
  sp.temperature = temperature;
  sp.seed = seed;
  return generate(m, prompt, n, sp, stop_id, stop);
}

TEST(Generate, GreedyIsDeterministicAndRespectsStops) {
  const ModelConfig c = tiny();
  Transformer model(c, ModelWeights::random(c, 3));
  const InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  const std::vector<int32_t> prompt = {5, 17, 300, 42};
  const auto g = gen(inf, prompt, 8, 0.0f, 1, -1);
  ASSERT_EQ(g.size(), 8u);
  EXPECT_EQ(gen(inf, prompt, 8, 0.0f, 99, -1), g) << "greedy does not depend on the seed";
  for (int32_t id : g) EXPECT_TRUE(id >= 0 && id < c.vocab_size) << id;
  // Greedy with states equals the argmax of the training forward recomputed over the whole context each step
  // (the independent, quadratic reading of the same model).
  {
    ag::NoGradGuard ng;
    std::vector<int64_t> ctx(prompt.begin(), prompt.end());
    for (size_t i = 0; i < g.size(); ++i) {
      const int64_t T = int64_t(ctx.size());
      const ForwardResult r = model.forward(Tensor::from_vector(ctx, {T}), Tensor());
      const Tensor logits = model.logits(ag::Var(r.hidden.value().slice(0, T - 1, T).contiguous()));
      const float* x = logits.data<float>();
      const int32_t best = int32_t(std::max_element(x, x + c.vocab_size) - x);
      EXPECT_EQ(g[i], best) << "token " << i;
      ctx.push_back(g[i]);
    }
  }
  // Greedy is a prefix property: fewer tokens give the same start.
  EXPECT_EQ(gen(inf, prompt, 3, 0.0f, 1, -1), std::vector<int32_t>(g.begin(), g.begin() + 3));
  // stop_id ends generation before its first occurrence and is not included.
  const int32_t stop = g[4];
  const auto cut = std::find(g.begin(), g.end(), stop);
  EXPECT_EQ(gen(inf, prompt, 8, 0.0f, 1, stop), std::vector<int32_t>(g.begin(), cut));
  // A stop predicate ends generation after the token it accepts, which is included.
  const auto p = gen(inf, prompt, 8, 0.0f, 1, -1, [](const std::vector<int32_t>& ids) { return ids.size() == 2; });
  EXPECT_EQ(p, std::vector<int32_t>(g.begin(), g.begin() + 2));
  EXPECT_TRUE(gen(inf, prompt, 0, 0.0f, 1, -1).empty());
  EXPECT_THROW(gen(inf, {}, 4, 0.0f, 1, -1), Error);
  EXPECT_THROW(gen(inf, prompt, -1, 0.0f, 1, -1), Error);
  EXPECT_THROW(gen(inf, prompt, 4, -0.5f, 1, -1), Error);
}

TEST(Generate, SamplingIsDeterministicPerSeed) {
  const ModelConfig c = tiny();
  Transformer model(c, ModelWeights::random(c, 3));
  const InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  const std::vector<int32_t> prompt = {9, 8, 7};
  // A random model's distribution is nearly flat over 512 ids, so two seeds differ almost surely.
  const auto a = gen(inf, prompt, 6, 1.0f, 1, -1), b = gen(inf, prompt, 6, 1.0f, 1, -1);
  const auto other = gen(inf, prompt, 6, 1.0f, 2, -1);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
}

TEST(Generate, PromptLongerThanTheModelIsCutToItsTailAndGenerationEndsWhenFull) {
  ModelConfig c = tiny();
  c.max_position_embeddings = 8;
  Transformer model(c, ModelWeights::random(c, 3));
  const InferenceModel inf(c, DecodeWeights::from_model(model.weights()));
  std::vector<int32_t> prompt(20);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 % 500);
  // The context is full after the 8 prompt tokens: one token, from the last 8 prompt tokens only.
  const auto g = gen(inf, prompt, 3, 0.0f, 1, -1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(gen(inf, std::vector<int32_t>(prompt.end() - 8, prompt.end()), 1, 0.0f, 1, -1)[0], g[0]);
  // A 6-token prompt leaves room for 2 more fed tokens: 3 generated, then the context is full.
  EXPECT_EQ(gen(inf, std::vector<int32_t>(prompt.begin(), prompt.begin() + 6), 5, 0.0f, 1, -1).size(), 3u);
}

// Fake tokenizers over a real (random) model: encode remembers the prompt; decode ignores the ids and answers
// for that prompt, so the scoring path is checked with a known-perfect and a known-wrong "model".
struct OracleTokenizer {
  std::map<std::string, std::string> answers;  // prompt -> answer
  std::string last_prompt;
  std::string suffix;  // appended to the answer: "" is right, "0" is wrong
  int encodes = 0;
  EncodeFn encode() {
    return [this](const std::string& prompt) {
      last_prompt = prompt;
      ++encodes;
      return std::vector<int32_t>{1, 2, 3};
    };
  }
  DecodeFn decode() {
    return [this](const std::vector<int32_t>& ids) {
      return ids.empty() ? std::string() : answers.at(last_prompt) + suffix + "\n";
    };
  }
};

TEST(Evaluate, ScoresAnOracleAsPerfectAndAWrongOracleAsZero) {
  const ModelConfig c = tiny();
  const Transformer model(c, ModelWeights::random(c, 3));
  const int per_task = 3;
  OracleTokenizer tok;
  for (TaskKind k : kTaskKinds)
    for (const auto& e : task_examples(k, 5, per_task)) tok.answers[e.prompt] = e.answer;
  const TaskScores right = evaluate_tasks(model, tok.encode(), tok.decode(), per_task, 5, 4);
  EXPECT_EQ(tok.encodes, 4 * per_task);
  ASSERT_EQ(right.tasks.size(), 4u);
  for (const TaskScore& s : right.tasks) {
    EXPECT_EQ(s.total, per_task);
    EXPECT_EQ(s.correct, per_task) << task_kind_name(s.kind);
  }
  EXPECT_EQ(right.by_name(),
            (std::map<std::string, double>{{"arithmetic", 1.0}, {"copy", 1.0}, {"reverse", 1.0}, {"recall", 1.0}}));
  ASSERT_EQ(right.samples.size(), 8u);  // 2 per kind
  for (const TaskSample& s : right.samples) {
    EXPECT_TRUE(s.correct);
    EXPECT_EQ(s.got, s.want);
    EXPECT_EQ(" " + s.want, tok.answers.at(s.prompt));
  }
  tok.suffix = "0";
  const TaskScores wrong = evaluate_tasks(model, tok.encode(), tok.decode(), per_task, 5, 4);
  for (TaskKind k : kTaskKinds) EXPECT_EQ(wrong.accuracy(k), 0.0);
  for (const TaskSample& s : wrong.samples) EXPECT_EQ(s.got, s.want + "0");
}

TEST(Evaluate, RandomModelWithByteTokenizerRunsEndToEnd) {
  const ModelConfig c = tiny();
  const Transformer model(c, ModelWeights::random(c, 4));
  const EncodeFn encode = [](const std::string& s) {
    std::vector<int32_t> ids;
    for (unsigned char ch : s) ids.push_back(int32_t(ch));
    return ids;
  };
  const DecodeFn decode = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += id < 256 ? char(id) : '?';
    return s;
  };
  const TaskScores s = evaluate_tasks(model, encode, decode, 2, 1, 3);
  ASSERT_EQ(s.tasks.size(), 4u);
  for (const TaskScore& t : s.tasks) {
    EXPECT_EQ(t.total, 2);
    EXPECT_GE(t.accuracy(), 0.0);
    EXPECT_LE(t.accuracy(), 1.0);
  }
  EXPECT_EQ(s.samples.size(), 8u);
}

}  // namespace
}  // namespace myriad
