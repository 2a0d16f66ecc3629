// Pre-tokenization of the byte-level BPE tokenizers (tiktoken's and Hugging Face's): cuts text into the pieces
// that BPE merges within, never across. Regular expressions run on Debian's PCRE2 (JIT, UTF + UCP), compiled from
// the patterns the tokenizer files carry, which are written for Rust's regex crate (tiktoken, through fancy-regex)
// or Oniguruma (Hugging Face tokenizers). translate_pattern() rewrites the two constructs whose meaning differs:
//   - class intersection `[A&&B]` (Kimi's `[\p{Lu}...\p{M}&&[^\p{Han}]]`), which PCRE2 lacks, becomes a lookahead
//     `(?:(?=B)[A])`: one character that is in B and in A;
//   - `\s` and `\S`: Rust and Oniguruma read `\s` as Unicode White_Space, which includes U+0085 (NEL); PCRE2's
//     UCP `\s` does not, so U+0085 is added (`[\s\x{85}]`, `[^\s\x{85}]`);
//   - a script `\p{Han}`: Rust and Oniguruma mean the Script property, PCRE2 (10.40 on) Script_Extensions, which
//     also holds characters shared between scripts (U+3001 '、' is in Han's); it becomes `\p{sc:Han}`.
// Anything else is passed through as written (`\p{..}`, `(?i:..)`, `(?!..)`, `{1,3}` mean the same in all three).
//
// The steps follow Hugging Face's pre-tokenizers, with the same semantics for the pieces they produce:
//   Split(regex, behavior, invert): the matches and the text between them, combined by the behavior
//     (removed, isolated, merged_with_previous, merged_with_next, contiguous);
//   ByteLevel(add_prefix_space, use_regex): a space before each piece that does not start with one (when asked),
//     then, with use_regex, an isolated split by GPT-2's pattern. The byte-to-character mapping of ByteLevel is
//     not done here: the BPE works on bytes (see byte_bpe.h), so it is a no-op for the pieces.
// tiktoken's `findall` is the isolated Split with the gaps kept: with its patterns every well-formed character is
// matched, so the gaps are only ill-formed UTF-8 (which neither Python reference can be given); keeping them as
// pieces keeps every byte string round-tripping.
//
// Ill-formed UTF-8 never matches a character class (PCRE2_MATCH_INVALID_UTF); time is linear in the text for these
// patterns, and a match limit turns a pathological pattern from a file into an error instead of a hang.
//
// Leaves out: normalizers, and the pre-tokenizers that are not byte-level BPE's (Metaspace, Whitespace, Digits,
// Punctuation, ...): the loader refuses those by name.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

// Rewrites a Rust-regex / Oniguruma pattern into PCRE2 syntax (see above). Throws kFormat naming `source` for a
// construct it cannot express (a nested class other than an intersection's operand, `\S` inside a class).
std::string translate_pattern(std::string_view pattern, const std::string& source);

// A compiled pattern. Thread-safe: match state is per call.
class Regex {
 public:
  // `pattern` in Rust-regex / Oniguruma syntax; throws kFormat with PCRE2's message and the offset.
  Regex(std::string_view pattern, const std::string& source);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) for each leftmost, non-overlapping match in order (byte offsets into text); after
  // an empty match the search resumes one character later.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;

  const std::string& pattern() const { return source_pattern_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string source_pattern_;
  std::string source_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PretokenizeStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // kSplit; kByteLevel with use_regex (GPT-2's pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;            // kSplit: the gaps are the matches
  bool add_prefix_space = false;  // kByteLevel
};

// GPT-2's pattern, which Hugging Face's ByteLevel pre-tokenizer uses when use_regex is true.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Pretokenizer {
 public:
  Pretokenizer() = default;
  explicit Pretokenizer(std::vector<PretokenizeStep> steps) : steps_(std::move(steps)) {}

  // Calls on_piece for every non-empty piece of text, in order. With no steps the text is one piece.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& on_piece) const;
  std::vector<std::string> pieces(std::string_view text) const;  // for tests

  bool empty() const { return steps_.empty(); }
  // The steps, one line each, for recognising a known pre-tokenizer (GGUF export names them): "split PATTERN"
  // (isolated, not inverted; another behavior or invert: "split/B[/invert] PATTERN"), "bytelevel" (+ " prefix"
  // with add_prefix_space, + " regex" with use_regex). PATTERN as the file wrote it.
  std::vector<std::string> signature() const;

 private:
  void run(size_t step, std::string_view text, const std::function<void(std::string_view)>& on_piece) const;
  std::vector<PretokenizeStep> steps_;
};

}  // namespace myriad
