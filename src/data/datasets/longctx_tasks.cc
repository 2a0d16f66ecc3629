// Long-context tasks: see longctx_tasks.h.
#include "data/datasets/longctx_tasks.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "data/datasets/corpus.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {

namespace {

constexpr const char* kKeys[] = {"amber fox",   "blue heron",  "copper owl",  "green lynx",
                                 "grey whale",  "ivory crane", "jade otter",  "olive moth",
                                 "pearl wolf",  "red finch",   "silver hare", "teal crab",
                                 "violet newt", "white bison", "yellow wasp", "indigo raven"};
constexpr int kMultiKeyNeedles = 4;  // the asked key and three distractors
constexpr int kVarTrackHops = 4;     // variables in the chain
constexpr int64_t kMinFillerTokens = 16;

std::string number5(TextRng& rng) {
  return std::to_string(10000 + rng.uniform(90000));
}

struct Insert {
  double fraction;   // of the filler's tokens before it
  std::string text;  // one line
  bool needle;       // the one whose offset and fraction the sample reports
};

struct Plan {
  std::vector<Insert> inserts;  // sorted by fraction (stable: a chain keeps its order)
  std::string question, answer;
};

Plan plan_task(LongTask task, double depth, TextRng& rng) {
  Plan p;
  p.answer = number5(rng);
  switch (task) {
    case LongTask::kPasskey:
      p.inserts.push_back({depth, "Remember this: the pass key is " + p.answer + ".", true});
      p.question = "What is the pass key? The pass key is";
      break;
    case LongTask::kMultiKey: {
      std::vector<int> keys;
      while (int(keys.size()) < kMultiKeyNeedles) {
        const int k = rng.uniform(int(std::size(kKeys)));
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      }
      const std::string asked = kKeys[keys[0]];
      p.inserts.push_back({depth, "The magic number for " + asked + " is " + p.answer + ".", true});
      for (size_t i = 1; i < keys.size(); ++i) {
        std::string n = number5(rng);
        while (n == p.answer) n = number5(rng);
        p.inserts.push_back(
            {rng.unit(), std::string("The magic number for ") + kKeys[keys[i]] + " is " + n + ".", false});
      }
      p.question = "What is the magic number for " + asked + "? The magic number for " + asked + " is";
      break;
    }
    case LongTask::kVarTrack: {
      std::vector<std::string> names;
      while (int(names.size()) < kVarTrackHops) {
        std::string v;
        for (int i = 0; i < 3; ++i) v += char('A' + rng.uniform(26));
        if (std::find(names.begin(), names.end(), v) == names.end()) names.push_back(v);
      }
      p.inserts.push_back({depth, "Let " + names[0] + " be " + p.answer + ".", true});
      std::vector<double> at;
      for (int i = 1; i < kVarTrackHops; ++i) at.push_back(depth + (1.0 - depth) * rng.unit());
      std::sort(at.begin(), at.end());
      for (int i = 1; i < kVarTrackHops; ++i)
        p.inserts.push_back(
            {at[size_t(i - 1)], "Let " + names[size_t(i)] + " be " + names[size_t(i - 1)] + ".", false});
      p.question = "What is the value of " + names.back() + "? The value of " + names.back() + " is";
      break;
    }
  }
  std::stable_sort(p.inserts.begin(), p.inserts.end(),
                   [](const Insert& a, const Insert& b) { return a.fraction < b.fraction; });
  return p;
}

const char* const kIntro = "Read the text below. Facts are hidden in it; remember them, you will be asked about one.";

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& prompt) {
  std::vector<int32_t> ids;
  if (tok.end_of_text_id() >= 0) ids.push_back(tok.end_of_text_id());  // a document starts here, as in training
  const std::vector<int32_t> body = tok.encode(prompt, Specials::kAsText);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace

const char* long_task_name(LongTask t) {
  switch (t) {
    case LongTask::kPasskey:
      return "passkey";
    case LongTask::kMultiKey:
      return "multikey";
    case LongTask::kVarTrack:
      return "vartrack";
  }
  return "?";
}

LongTask parse_long_task(std::string_view name) {
  for (LongTask t : kLongTasks)
    if (name == long_task_name(t)) return t;
  throw_error(ErrorKind::kValue, "long-context task '", name, "': expected one of passkey, multikey, vartrack");
}

LongSample make_long_sample(LongTask task, const Tokenizer& tok, int64_t length, int depth_percent, uint64_t seed) {
  MYRIAD_REQUIRE(depth_percent >= 0 && depth_percent <= 100, kValue, "long-context depth ", depth_percent,
                 "% is outside 0..100");
  TextRng rng(mix_seed(seed, 0x4c4f4e47ULL + uint64_t(task)));
  const Plan plan = plan_task(task, depth_percent / 100.0, rng);

  std::string fixed = std::string(kIntro) + "\n";
  for (const Insert& in : plan.inserts) fixed += in.text + "\n";
  fixed += plan.question;
  const int64_t fixed_tokens = int64_t(encode_prompt(tok, fixed).size());
  MYRIAD_REQUIRE(length >= fixed_tokens + kMinFillerTokens, kValue, "a ", long_task_name(task), " sample of ", length,
                 " tokens is too short: its facts and question take ", fixed_tokens, " tokens, so it needs at least ",
                 fixed_tokens + kMinFillerTokens);

  // Filler: the corpus's prose cut into sentences, each counted in tokens on its own.
  std::vector<std::string> units;
  std::vector<int64_t> unit_tokens;
  const bool past = rng.chance(0.5);
  std::string para;
  size_t at = 0;
  auto add_filler = [&](int64_t tokens) {
    for (int64_t added = 0; added < tokens;) {
      if (at >= para.size()) para = prose_sentences(rng, rng.range(3, 6), past), at = 0;
      size_t end = para.find(". ", at);
      end = end == std::string::npos ? para.size() : end + 1;
      units.push_back(para.substr(at, end - at));
      unit_tokens.push_back(int64_t(tok.encode(units.back() + " ", Specials::kAsText).size()));
      added += unit_tokens.back();
      at = end + 1;
    }
  };
  add_filler(length - fixed_tokens);

  // Assemble. The whole text encodes to a few percent fewer tokens than its sentences one by one (merges across
  // their boundaries), so top up with sentences for 90% of what is missing until within a sentence of the length,
  // and drop sentences from the end while it is over.
  LongSample s;
  s.task = task;
  s.answer = plan.answer;
  for (int top_ups = 0;;) {
    int64_t total = 0, longest = 1;
    for (int64_t n : unit_tokens) total += n, longest = std::max(longest, n);
    s.prompt = std::string(kIntro) + "\n";
    size_t next = 0;
    int64_t before = 0;
    bool line_start = true;
    auto place_inserts = [&](bool all) {
      while (next < plan.inserts.size() && (all || double(before) >= plan.inserts[next].fraction * double(total))) {
        if (!line_start) s.prompt += "\n";
        if (plan.inserts[next].needle) {
          s.needle_offset = int64_t(s.prompt.size());
          s.needle_fraction = total > 0 ? double(before) / double(total) : 0.0;
        }
        s.prompt += plan.inserts[next++].text + "\n";
        line_start = true;
      }
    };
    for (size_t i = 0; i < units.size(); ++i) {
      place_inserts(false);
      s.prompt += (line_start ? "" : " ") + units[i];
      line_start = false;
      before += unit_tokens[i];
    }
    place_inserts(true);
    s.prompt += plan.question;
    s.tokens = encode_prompt(tok, s.prompt);
    const int64_t n = int64_t(s.tokens.size());
    if (n > length && !units.empty()) {
      units.pop_back();
      unit_tokens.pop_back();
    } else if (n <= length && length - n > longest && top_ups++ < 8) {
      add_filler(std::max<int64_t>(1, (length - n) * 9 / 10));
    } else {
      break;
    }
  }
  MYRIAD_REQUIRE(int64_t(s.tokens.size()) <= length, kValue, "a ", long_task_name(task), " sample of ", length,
                 " tokens is too short: without any filler it takes ", s.tokens.size(), " tokens");
  return s;
}

bool answer_is_correct(std::string_view generated, std::string_view answer) {
  size_t i = 0;
  while (i < generated.size() && generated[i] == ' ') ++i;
  if (generated.substr(i, answer.size()) != answer) return false;
  const size_t end = i + answer.size();
  return end == generated.size() || !std::isdigit(static_cast<unsigned char>(generated[end]));
}

}  // namespace myriad
