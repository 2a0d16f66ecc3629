// Task documents, held-out prompts and their scoring (see tasks.h).
#include "data/datasets/tasks.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {
namespace {

constexpr uint64_t kHeldOutModulus = 8;  // about 1 in 8 problems held out
constexpr int kMaxDraws = 100000;        // held-out rejection sampling: ~8 draws expected

// FNV-1a over the kind's name and the problem: the partition is a fixed property of the problem text.
uint64_t problem_hash(TaskKind kind, const std::string& problem) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto feed = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ULL;
    }
  };
  feed(task_kind_name(kind));
  feed(":");
  feed(problem);
  return mix_seed(h, 0);  // FNV's low bits are weak; mix before the modulus
}

// An operand of 1-3 digits, the digit count uniform (so one-digit sums are common enough to be learnt first).
int operand(TextRng& rng) {
  switch (rng.uniform(3)) {
    case 0:
      return rng.range(0, 9);
    case 1:
      return rng.range(10, 99);
    default:
      return rng.range(100, 999);
  }
}

// 2-6 random lowercase letters.
std::string letters(TextRng& rng) {
  std::string s(size_t(rng.range(2, 6)), 'a');
  for (char& c : s) c = char('a' + rng.uniform(26));
  return s;
}

std::string spaced(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (!out.empty()) out += ' ';
    out += c;
  }
  return out;
}

// One example of a line-shaped kind (not recall), with its canonical problem text.
struct Drawn {
  TaskExample example;
  std::string problem;
};

Drawn draw_line_example(TaskKind kind, TextRng& rng) {
  switch (kind) {
    case TaskKind::kArithmetic: {
      const int a = operand(rng), b = operand(rng);
      return {{kind, str("Q: ", a, " + ", b, " = ? A:"), str(" ", a + b)}, str(a, "+", b)};
    }
    case TaskKind::kCopy: {
      const std::string s = letters(rng);
      return {{kind, "copy: " + spaced(s) + " ->", " " + spaced(s)}, s};
    }
    case TaskKind::kReverse: {
      const std::string s = letters(rng);
      return {{kind, "reverse: " + spaced(s) + " ->", " " + spaced(std::string(s.rbegin(), s.rend()))}, s};
    }
    case TaskKind::kRecall:
      break;
  }
  MYRIAD_CHECK(false, "draw_line_example: recall is not line-shaped");
  return {};
}

// A recall block: key lines, filler, queries. The example is the first query; `rest` holds the other query
// lines (training documents only).
struct RecallBlock {
  TaskExample example;
  std::string rest;
};

RecallBlock draw_recall(TextRng& rng) {
  const int n_keys = rng.range(2, 8);
  std::vector<int> keys, values;
  while (int(keys.size()) < n_keys) {
    const int k = rng.uniform(100);
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  std::string prompt;
  for (int k : keys) {
    values.push_back(rng.uniform(100));
    prompt += str("key k", k, " = ", values.back(), ".\n");
  }
  prompt += prose_sentences(rng, rng.range(2, 6), rng.chance(0.5)) + "\n";
  // Queries: distinct keys of the list, in random order (a partial Fisher-Yates shuffle).
  std::vector<int> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  const int n_queries = std::min(n_keys, rng.range(1, 3));
  for (int i = 0; i < n_queries; ++i) std::swap(order[size_t(i)], order[size_t(i + rng.uniform(n_keys - i))]);
  RecallBlock b;
  b.example = {TaskKind::kRecall, prompt + str("recall k", keys[size_t(order[0])], " ->"),
               str(" ", values[size_t(order[0])])};
  for (int i = 1; i < n_queries; ++i)
    b.rest += str("recall k", keys[size_t(order[size_t(i)])], " -> ", values[size_t(order[size_t(i)])], "\n");
  return b;
}

}  // namespace

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kArithmetic:
      return "arithmetic";
    case TaskKind::kCopy:
      return "copy";
    case TaskKind::kReverse:
      return "reverse";
    case TaskKind::kRecall:
      return "recall";
  }
  return "?";
}

bool is_held_out(TaskKind kind, const std::string& problem) {
  return problem_hash(kind, problem) % kHeldOutModulus == 0;
}

std::string task_document(TaskKind kind, TextRng& rng) {
  if (kind == TaskKind::kRecall) {
    for (int draw = 0; draw < kMaxDraws; ++draw) {
      RecallBlock b = draw_recall(rng);
      if (is_held_out(kind, b.example.prompt)) continue;
      return b.example.prompt + b.example.answer + "\n" + b.rest;
    }
  } else {
    const int n = rng.range(4, 10);
    std::string doc;
    for (int i = 0, draw = 0; i < n && draw < kMaxDraws; ++draw) {
      const Drawn d = draw_line_example(kind, rng);
      if (is_held_out(kind, d.problem)) continue;
      doc += d.example.prompt + d.example.answer + "\n";
      ++i;
    }
    if (!doc.empty()) return doc;
  }
  MYRIAD_CHECK(false, "task_document: no training problem of kind ", task_kind_name(kind), " in ", kMaxDraws, " draws");
  return {};
}

std::vector<TaskExample> task_examples(TaskKind kind, uint64_t seed, int n) {
  MYRIAD_REQUIRE(n >= 0, kValue, "task_examples: n (", n, ") must be >= 0");
  TextRng rng(mix_seed(seed, /*stream: held-out prompts*/ 2 + uint64_t(kind)));
  std::vector<TaskExample> out;
  for (int draw = 0; int(out.size()) < n; ++draw) {
    MYRIAD_CHECK(draw < kMaxDraws * (n + 1), "task_examples: too few held-out problems of kind ", task_kind_name(kind));
    if (kind == TaskKind::kRecall) {
      RecallBlock b = draw_recall(rng);
      if (is_held_out(kind, b.example.prompt)) out.push_back(std::move(b.example));
    } else {
      Drawn d = draw_line_example(kind, rng);
      if (is_held_out(kind, d.problem)) out.push_back(std::move(d.example));
    }
  }
  return out;
}

std::string trimmed(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string extract_answer(const std::string& continuation) {
  return trimmed(continuation.substr(0, continuation.find('\n')));
}

bool answer_matches(const std::string& continuation, const std::string& want) {
  return extract_answer(continuation) == trimmed(want);
}

}  // namespace myriad
