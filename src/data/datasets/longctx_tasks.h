// Long-context tasks (`myriad eval longctx`): a fact hidden at a chosen depth of a long filler text, asked for at the
// end, answered by generation. Deterministic from a seed; the filler is the built-in corpus's prose (corpus.h), so
// no two passages repeat.
//
//   passkey   one number to remember (the pass-key retrieval test of long-context papers):
//               "... Remember this: the pass key is 48213. ..." then "What is the pass key? The pass key is"
//   multikey  several "The magic number for <key> is <n>." needles (the asked one at the depth, the other
//             keys' numbers at random depths: distractors), then "What is the magic number for <key>? ... is"
//   vartrack  a chain of assignments "Let <v1> be 52819." "Let <v2> be <v1>." ... (the first at the depth, the
//             later ones spread after it), then "What is the value of <vk>? The value of <vk> is": the model must
//             follow every hop across the window
// The answer is a 5-digit number (10000-99999); a sample is correct when the generated text, after leading spaces,
// starts with exactly that number (answer_is_correct).
//
// Length: a sample's prompt is `length` tokens of the given tokenizer or at most one filler sentence fewer (never
// more). Depth d% places the needle after d% of the filler's tokens (0: before all filler, 100: right before the
// question).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

class Tokenizer;

enum class LongTask : uint8_t { kPasskey, kMultiKey, kVarTrack };
inline constexpr LongTask kLongTasks[] = {LongTask::kPasskey, LongTask::kMultiKey, LongTask::kVarTrack};

const char* long_task_name(LongTask t);           // "passkey", "multikey", "vartrack"
LongTask parse_long_task(std::string_view name);  // kValue naming the accepted names

struct LongSample {
  LongTask task = LongTask::kPasskey;
  std::string prompt;            // the whole text given to the model; it ends where the answer starts
  std::vector<int32_t> tokens;   // the prompt encoded (end-of-text first when the tokenizer has one)
  std::string answer;            // the 5 digits
  int64_t needle_offset = 0;     // byte offset of the needle (vartrack: of its first assignment) in the prompt
  double needle_fraction = 0.0;  // filler tokens before the needle / all filler tokens
};

// One sample of about `length` tokens (see the top). kValue when length is too short to hold the needle(s) and the
// question with some filler (the message gives the least length), or depth_percent is outside 0..100.
LongSample make_long_sample(LongTask task, const Tokenizer& tok, int64_t length, int depth_percent, uint64_t seed);

// True when `generated`, after leading spaces, starts with `answer` not followed by another digit.
bool answer_is_correct(std::string_view generated, std::string_view answer);

}  // namespace myriad
