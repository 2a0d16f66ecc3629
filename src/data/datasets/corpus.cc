// The prose grammar and the corpus mix (see corpus.h).
#include "data/datasets/corpus.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/datasets/tasks.h"

namespace myriad {

int TextRng::uniform(int n) {
  MYRIAD_CHECK(n > 0, "uniform(", n, ")");
  return int(engine_() % uint64_t(n));
}

int TextRng::range(int lo, int hi) {
  MYRIAD_CHECK(lo <= hi, "range(", lo, ", ", hi, ")");
  return lo + uniform(hi - lo + 1);
}

double TextRng::unit() {
  return double(engine_() >> 11) * 0x1.0p-53;
}

uint64_t mix_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 finaliser over both words.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {

// ---- Vocabulary ---------------------------------------------------------------------------------------------

struct Name {
  const char* name;
  const char* pronoun;  // "she" / "he"
};
constexpr Name kNames[] = {
    {"Anna", "she"},  {"Tom", "he"},   {"Maria", "she"}, {"Sam", "he"},  {"Lucy", "she"},  {"Ben", "he"},
    {"Emma", "she"},  {"Jack", "he"},  {"Nora", "she"},  {"Leo", "he"},  {"Clara", "she"}, {"Peter", "he"},
    {"Alice", "she"}, {"Oscar", "he"}, {"Rosa", "she"},  {"Hugo", "he"}, {"Ella", "she"},  {"Max", "he"},
    {"Mia", "she"},   {"Paul", "he"},  {"Ida", "she"},   {"Karl", "he"}, {"Vera", "she"},  {"Omar", "he"},
};

struct Agent {
  const char* noun;
  bool animal;  // animals are "it"; people are referred to by "the <noun>" again
};
constexpr Agent kAgents[] = {
    {"farmer", false},  {"teacher", false},   {"doctor", false},  {"baker", false},     {"child", false},
    {"boy", false},     {"girl", false},      {"king", false},    {"queen", false},     {"sailor", false},
    {"soldier", false}, {"painter", false},   {"student", false}, {"fisherman", false}, {"hunter", false},
    {"nurse", false},   {"driver", false},    {"cook", false},    {"writer", false},    {"singer", false},
    {"old man", false}, {"old woman", false}, {"dog", true},      {"cat", true},        {"horse", true},
    {"bird", true},     {"fox", true},        {"wolf", true},     {"rabbit", true},     {"bear", true},
    {"mouse", true},    {"owl", true},        {"goat", true},     {"duck", true},       {"cow", true},
};

constexpr const char* kAgentAdjectives[] = {
    "young",  "small", "tall",   "quiet", "happy", "sad",     "brave",  "kind",    "clever", "tired",
    "hungry", "busy",  "gentle", "proud", "lazy",  "curious", "strong", "careful", "sleepy", "cheerful",
};

constexpr const char* kThingAdjectives[] = {
    "red",   "blue",  "green", "yellow", "white", "black",  "heavy",   "light",  "new",    "old",
    "small", "large", "warm",  "cold",   "round", "wooden", "sweet",   "fresh",  "broken", "shiny",
    "soft",  "long",  "short", "empty",  "full",  "little", "strange", "pretty", "dirty",  "clean",
};

constexpr const char* kThings[] = {
    "apple",  "book",    "letter", "basket",         "box",          "bottle",   "cup",    "map",
    "key",    "lamp",    "chair",  "table",          "coin",         "ring",     "hat",    "coat",
    "boat",   "cart",    "bell",   "loaf of bread",  "cake",         "cheese",   "fish",   "flower",
    "stone",  "rope",    "bag",    "candle",         "clock",        "ball",     "kite",   "drum",
    "pen",    "picture", "shell",  "spoon",          "bowl",         "blanket",  "ladder", "bucket",
    "window", "door",    "fence",  "basket of eggs", "jar of honey", "umbrella", "mirror", "shovel",
    "scarf",
};

struct Verb {
  const char* base;
  const char* third;  // present, third person singular
  const char* past;
};
constexpr Verb kTransitive[] = {
    {"see", "sees", "saw"},         {"find", "finds", "found"},     {"carry", "carries", "carried"},
    {"buy", "buys", "bought"},      {"sell", "sells", "sold"},      {"make", "makes", "made"},
    {"paint", "paints", "painted"}, {"open", "opens", "opened"},    {"close", "closes", "closed"},
    {"hold", "holds", "held"},      {"bring", "brings", "brought"}, {"take", "takes", "took"},
    {"clean", "cleans", "cleaned"}, {"fix", "fixes", "fixed"},      {"drop", "drops", "dropped"},
    {"lose", "loses", "lost"},      {"wash", "washes", "washed"},   {"build", "builds", "built"},
    {"want", "wants", "wanted"},    {"like", "likes", "liked"},     {"hide", "hides", "hid"},
    {"keep", "keeps", "kept"},      {"draw", "draws", "drew"},      {"need", "needs", "needed"},
    {"show", "shows", "showed"},    {"count", "counts", "counted"}, {"watch", "watches", "watched"},
};
constexpr Verb kIntransitive[] = {
    {"walk", "walks", "walked"},       {"run", "runs", "ran"},        {"sleep", "sleeps", "slept"},
    {"sing", "sings", "sang"},         {"wait", "waits", "waited"},   {"sit", "sits", "sat"},
    {"dance", "dances", "danced"},     {"swim", "swims", "swam"},     {"rest", "rests", "rested"},
    {"laugh", "laughs", "laughed"},    {"work", "works", "worked"},   {"play", "plays", "played"},
    {"travel", "travels", "traveled"}, {"smile", "smiles", "smiled"}, {"listen", "listens", "listened"},
    {"jump", "jumps", "jumped"},       {"read", "reads", "read"},     {"cry", "cries", "cried"},
};
// Verbs of motion take a destination ("to the market") rather than a place ("at the market").
constexpr Verb kMotion[] = {
    {"walk", "walks", "walked"},  {"run", "runs", "ran"},          {"go", "goes", "went"},
    {"come", "comes", "came"},    {"hurry", "hurries", "hurried"}, {"return", "returns", "returned"},
    {"drive", "drives", "drove"}, {"ride", "rides", "rode"},
};

constexpr const char* kAdverbs[] = {
    "slowly", "quickly", "quietly", "happily", "carefully", "loudly", "softly", "again", "alone", "together",
};

constexpr const char* kPlaces[] = {
    "in the garden", "at the market",     "by the river",     "near the old bridge", "in the kitchen",
    "on the hill",   "at the station",    "in the forest",    "on the beach",        "in the village",
    "at school",     "in the library",    "behind the house", "under the tree",      "on the farm",
    "in the harbor", "at the castle",     "in the city",      "near the lake",       "in the valley",
    "on the road",   "in the small shop", "by the window",    "at the bakery",       "in the field",
};
constexpr const char* kDestinations[] = {
    "to the market", "to the river",   "to the station", "to the forest", "to the beach",  "to the village",
    "to school",     "to the library", "to the farm",    "to the harbor", "to the castle", "to the city",
    "to the lake",   "to the bakery",  "home",           "to the field",  "to the hill",   "to the old bridge",
};
constexpr const char* kTimes[] = {
    "in the morning", "at night",      "every day", "on Sunday",      "after dinner", "before noon",
    "in the spring",  "in winter",     "at dawn",   "in the evening", "once a week",  "after school",
    "at sunset",      "in the summer", "on Monday", "at midnight",
};
constexpr const char* kWeather[] = {
    "the sky is grey",  "the sun is warm", "the wind is cold", "it is raining",
    "the air is still", "it is snowing",   "the sky is clear", "the night is dark",
};
// kWeather in the past tense, same order.
constexpr const char* kWeatherPast[] = {
    "the sky was grey",  "the sun was warm", "the wind was cold", "it was raining",
    "the air was still", "it was snowing",   "the sky was clear", "the night was dark",
};
static_assert(std::size(kWeather) == std::size(kWeatherPast));

// ---- Grammar ------------------------------------------------------------------------------------------------

const char* article_for(const std::string& word) {
  const char c = word.empty() ? 'x' : word[0];
  return (c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u') ? "an" : "a";
}

// "a red apple", "the box", "an old lamp".
std::string thing_phrase(TextRng& rng) {
  std::string noun = rng.pick(kThings);
  if (rng.chance(0.5)) noun = std::string(rng.pick(kThingAdjectives)) + " " + noun;
  if (rng.chance(0.3)) return "the " + noun;
  return std::string(article_for(noun)) + " " + noun;
}

// Who a paragraph is about: how it is introduced, and how later sentences refer to it.
struct Protagonist {
  std::string intro;  // "Anna", "the tired farmer", "a small fox"
  std::string again;  // "she", "the farmer", "it"
};

Protagonist make_protagonist(TextRng& rng) {
  if (rng.chance(0.45)) {
    const Name& n = rng.pick(kNames);
    return {n.name, n.pronoun};
  }
  const Agent& a = rng.pick(kAgents);
  const std::string noun = a.noun;
  std::string intro = rng.chance(0.5) ? std::string(rng.pick(kAgentAdjectives)) + " " + noun : noun;
  intro = "the " + intro;
  return {intro, a.animal ? "it" : "the " + noun};
}

// A subject other than the protagonist: a name or "the <agent>".
std::string other_subject(TextRng& rng) {
  if (rng.chance(0.4)) return rng.pick(kNames).name;
  return std::string("the ") + rng.pick(kAgents).noun;
}

const char* form(const Verb& v, bool past) {
  return past ? v.past : v.third;
}

// One clause with a singular subject: "Anna buys a red apple at the market".
std::string clause(TextRng& rng, const std::string& subject, bool past) {
  switch (rng.uniform(6)) {
    case 0:  // transitive, optional place
    case 1: {
      std::string s = subject + " " + form(rng.pick(kTransitive), past) + " " + thing_phrase(rng);
      if (rng.chance(0.5)) s += std::string(" ") + rng.pick(kPlaces);
      return s;
    }
    case 2: {  // intransitive, optional adverb and place
      std::string s = subject + " " + form(rng.pick(kIntransitive), past);
      if (rng.chance(0.4)) s += std::string(" ") + rng.pick(kAdverbs);
      if (rng.chance(0.6)) s += std::string(" ") + rng.pick(kPlaces);
      return s;
    }
    case 3: {  // motion to a destination
      std::string s = subject + " " + form(rng.pick(kMotion), past) + " " + rng.pick(kDestinations);
      if (rng.chance(0.3)) s += std::string(" ") + rng.pick(kAdverbs);
      return s;
    }
    case 4:  // description
      return subject + (past ? " was " : " is ") + rng.pick(kAgentAdjectives);
    default:  // two things done
      return subject + " " + form(rng.pick(kTransitive), past) + " " + thing_phrase(rng) + " and " +
             form(rng.pick(kTransitive), past) + " " + thing_phrase(rng);
  }
}

std::string capitalised(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

// One sentence (capitalised, ending in '.'); `subject` is the protagonist's current reference. An introducing
// sentence always mentions the subject (so that a later "she" or "it" has something to refer to).
std::string sentence(TextRng& rng, const std::string& subject, bool past, bool introduce) {
  std::string s;
  int shape = rng.uniform(10);
  if (introduce && (shape == 4 || shape == 5)) shape = 9;
  if (subject == "it" && (shape == 6 || shape == 7)) shape = 9;  // animals neither speak nor go "it and Tom"
  switch (shape) {
    case 0:  // time first
      s = std::string(rng.pick(kTimes)) + ", " + clause(rng, subject, past);
      break;
    case 1:  // time last
      s = clause(rng, subject, past) + " " + rng.pick(kTimes);
      break;
    case 2: {  // because
      const bool adjective = rng.chance(0.5);
      s = clause(rng, subject, past) + " because " +
          (adjective ? subject + (past ? " was " : " is ") + rng.pick(kAgentAdjectives)
                     : std::string(past ? rng.pick(kWeatherPast) : rng.pick(kWeather)));
      break;
    }
    case 3:  // when
      s = "when " + clause(rng, other_subject(rng), past) + ", " + clause(rng, subject, past);
      break;
    case 4: {  // a thing is described
      std::string thing = rng.pick(kThings);
      s = "the " + thing + (past ? " was " : " is ") + rng.pick(kThingAdjectives);
      break;
    }
    case 5: {  // there is
      std::string thing = rng.pick(kThingAdjectives);
      thing += std::string(" ") + rng.pick(kThings);
      s = std::string(past ? "there was " : "there is ") + article_for(thing) + " " + thing + " " + rng.pick(kPlaces);
      break;
    }
    case 6:  // reported speech
      s = subject + (past ? " said that " : " says that ") + clause(rng, other_subject(rng), past);
      break;
    case 7: {  // two subjects together (plural verb)
      const Verb& v = rng.pick(kIntransitive);
      std::string other = other_subject(rng);
      while (other == subject) other = other_subject(rng);  // not "the boy and the boy"
      s = subject + " and " + other + " " + (past ? v.past : v.base) + " together " + rng.pick(kPlaces);
      break;
    }
    default:
      s = clause(rng, subject, past);
      break;
  }
  return capitalised(s) + ".";
}

}  // namespace

std::string prose_sentences(TextRng& rng, int n, bool past) {
  const Protagonist p = make_protagonist(rng);
  std::string out;
  for (int i = 0; i < n; ++i) {
    // The first sentence introduces the protagonist; later ones mostly refer back to it.
    const std::string subject = i == 0 ? p.intro : rng.chance(0.7) ? p.again : other_subject(rng);
    if (i > 0) out += ' ';
    out += sentence(rng, subject, past, /*introduce=*/i == 0);
  }
  return out;
}

std::string prose_document(TextRng& rng) {
  const bool past = rng.chance(0.5);
  const int paragraphs = rng.range(1, 3);
  std::string doc;
  for (int i = 0; i < paragraphs; ++i) {
    if (i > 0) doc += '\n';
    doc += prose_sentences(rng, rng.range(3, 6), past) + "\n";
  }
  return doc;
}

std::vector<std::string> generate_corpus(uint64_t seed, size_t target_bytes, const CorpusMix& mix) {
  MYRIAD_REQUIRE(mix.task_share >= 0 && mix.task_share <= 1, kValue, "corpus task_share ", mix.task_share,
                 " must lie in [0, 1]");
  double weight_sum = 0;
  for (double w : mix.task_weights) {
    MYRIAD_REQUIRE(w >= 0 && std::isfinite(w), kValue, "corpus task weight ", w, " must be finite and >= 0");
    weight_sum += w;
  }
  MYRIAD_REQUIRE(mix.task_share == 0 || weight_sum > 0, kValue, "corpus task weights are all 0 but task_share is ",
                 mix.task_share);
  const bool uniform =
      std::all_of(mix.task_weights.begin(), mix.task_weights.end(), [&](double w) { return w == mix.task_weights[0]; });
  TextRng rng(mix_seed(seed, /*stream: training corpus*/ 1));
  auto pick_kind = [&] {
    if (uniform) return rng.pick(kTaskKinds);  // the draws of the default mix, as before weights existed
    double u = rng.unit() * weight_sum;
    for (size_t k = 0; k + 1 < mix.task_weights.size(); ++k) {
      if (u < mix.task_weights[k]) return kTaskKinds[k];
      u -= mix.task_weights[k];
    }
    return kTaskKinds[mix.task_weights.size() - 1];
  };
  std::vector<std::string> docs;
  size_t total = 0;
  while (total < target_bytes) {
    std::string doc = rng.chance(1.0 - mix.task_share) ? prose_document(rng) : task_document(pick_kind(), rng);
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace myriad
