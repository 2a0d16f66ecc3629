// The built-in corpus: what `make demo` trains on, generated here from a seed, so the demo needs no download.
//
// Documents are of two kinds, mixed about 50/50 by count (a fair coin per document):
//  - prose: readable synthetic English from a small grammar (about 300 real words: names, people and animals,
//    adjectives, things, verbs in three forms, places, times, adverbs). A document is 1-3 paragraphs of 3-6
//    sentences, one tense per document; a paragraph has a protagonist that later sentences refer back to by
//    pronoun ("Anna walks to the market. She buys a red apple."). Varied, but a small model can learn it.
//  - tasks: verifiable task documents in the fixed formats of tasks.h (arithmetic, copy, reverse, recall),
//    the four kinds equally often.
// Lines end with '\n'; paragraphs are separated by one empty line. Document boundaries are the caller's (the
// tokenizer's <|endoftext|>). Everything is a pure function of the seed: the same seed gives the same bytes on
// every platform (no std:: distributions, whose output is implementation-defined).
//
// Left out: any real-world text; the tokenizer (tokenizer.h); sharding (`myriad data prepare`).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace myriad {

// Deterministic draws. std::mt19937_64's sequence is fixed by the standard; the standard distributions are not,
// so bounded draws are done here. NOTE: `uniform` uses a plain modulo; its bias (n / 2^64) is irrelevant here.
class TextRng {
 public:
  explicit TextRng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  int uniform(int n);         // [0, n), n > 0
  int range(int lo, int hi);  // [lo, hi], lo <= hi
  double unit();              // [0, 1), 53 random bits
  bool chance(double p) { return unit() < p; }
  template <class Container>
  const auto& pick(const Container& c) {
    return c[size_t(uniform(int(std::size(c))))];
  }

 private:
  std::mt19937_64 engine_;
};

// An independent seed for a named stream of a seed (splitmix64 of both): the training corpus and the held-out
// task prompts draw from different streams of the same user seed.
uint64_t mix_seed(uint64_t seed, uint64_t stream);

// n sentences of prose on one line (no trailing newline), in the past or present tense, sharing a protagonist.
std::string prose_sentences(TextRng& rng, int n, bool past);

// One prose document: 1-3 paragraphs, each one line ending in '\n', separated by an empty line.
std::string prose_document(TextRng& rng);

// What the built-in corpus is made of: the share of task documents (the rest is prose) and each task kind's
// weight among them (relative; indexed by TaskKind: arithmetic, copy, reverse, recall).
struct CorpusMix {
  double task_share = 0.5;
  std::array<double, 4> task_weights = {1.0, 1.0, 1.0, 1.0};
};

// Documents (prose and task, in the mix's shares) until their total size reaches target_bytes: the total is at
// least target_bytes and exceeds it by less than one document (a few hundred bytes). Deterministic in seed.
std::vector<std::string> generate_corpus(uint64_t seed, size_t target_bytes, const CorpusMix& mix = {});

}  // namespace myriad
