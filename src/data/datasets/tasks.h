// Verifiable tasks: their training documents (part of the built-in corpus, corpus.h), held-out prompts with
// answers and their scoring; the evaluation with a model (accuracy per task in metrics.jsonl) is train/task_eval.h.
//
// Formats (one example per line; the prompt is everything up to and including the answer cue, the answer is
// the rest of the line, starting with one space):
//   arithmetic  "Q: 345 + 78 = ? A: 423"          addition; each operand has 1-3 digits (digit count uniform)
//   copy        "copy: q a z k -> q a z k"          2-6 lowercase letters, separated by spaces
//   reverse     "reverse: q a z k -> k z a q"       2-6 lowercase letters, separated by spaces
//   recall      "key k17 = 42."                     2-8 lines, distinct keys k0..k99, values 0..99
//               <2-6 sentences of prose filler>     one line (the distance to bridge: ~40-150 tokens)
//               "recall k17 -> 42"                  1-3 lines, distinct keys from the list, any order
// Letters are spaced so that a BPE tokenizer gives one token per letter (a random letter string would be cut
// into arbitrary merges, which a small model cannot reverse). Arithmetic digits are best split one per token
// too (SentencePiece's split_digits); the format does not depend on it.
// A training document holds 4-10 examples of one kind (recall: one key list, filler, 1-3 recall lines).
// Evaluation prompts are one example at the start of a document; generation stops at the first newline.
//
// Held out: every problem (the operands, the letter string, the whole recall prompt) is assigned to the
// held-out set or to training by a hash of its text, about 1 in 8 held out. Training documents contain only
// training problems and task_examples only held-out ones, so no evaluation prompt occurs in any training
// corpus, whatever the two seeds; task_examples also draws from its own seed stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/datasets/corpus.h"

namespace myriad {

enum class TaskKind { kArithmetic, kCopy, kReverse, kRecall };
inline constexpr TaskKind kTaskKinds[] = {TaskKind::kArithmetic, TaskKind::kCopy, TaskKind::kReverse,
                                          TaskKind::kRecall};

// "arithmetic", "copy", "reverse", "recall" (the keys of "tasks" in metrics.jsonl).
const char* task_kind_name(TaskKind kind);

struct TaskExample {
  TaskKind kind;
  std::string prompt;  // up to and including the answer cue: "Q: 12 + 7 = ? A:"
  std::string answer;  // the rest of the line, without the newline: " 19"
};

// One training document of the given kind (4-10 examples; recall: one block), ending in '\n'.
std::string task_document(TaskKind kind, TextRng& rng);

// n held-out examples of one kind, deterministic in seed (a stream apart from the training corpus's).
std::vector<TaskExample> task_examples(TaskKind kind, uint64_t seed, int n);

// Whether a problem belongs to the held-out set (see the top of this file). `problem` is the canonical text:
// "345+78", the letters without spaces "qazk", or the whole recall prompt.
bool is_held_out(TaskKind kind, const std::string& problem);

// Scoring. The answer a model gave is its decoded continuation cut at the first newline, with leading and
// trailing whitespace trimmed; it is right when it equals the trimmed wanted answer exactly.
std::string extract_answer(const std::string& continuation);
bool answer_matches(const std::string& continuation, const std::string& want);
// Leading and trailing whitespace removed.
std::string trimmed(const std::string& s);

}  // namespace myriad
