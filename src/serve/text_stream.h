// Streaming detokenisation with stop strings (docs/design.md §3): tokens in, text out, such that
//   - only whole, valid UTF-8 characters are ever emitted (a token may end inside a character; its bytes wait
//     for the rest). A byte sequence that can no longer become valid UTF-8 is emitted as U+FFFD (one per
//     maximal ill-formed subpart, Unicode 15 §3.9 / table 3-8), so every emitted piece is valid UTF-8 (JSON-safe);
//   - text that could be the beginning of a stop string is held back until it either completes the stop string
//     (generation ends; the stop string and anything after it are never emitted) or can no longer do so;
//   - the concatenation of everything emitted equals the (U+FFFD-repaired) decoded text, cut before the first
//     stop string: the first to be completed, i.e. the occurrence that ENDS first (of several ending at the same
//     byte, the longest). This does not depend on how the text is split into tokens: with stops {"abcd", "bc"},
//     "abcd" stops after "a", as generation would have ended at "abc".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad {

class Tokenizer;

class TextStream {
 public:
  // Empty stop strings are ignored; a stop string that is not valid UTF-8 throws kValue (it could match inside a
  // character). The tokenizer must outlive the stream.
  TextStream(const Tokenizer& tok, std::vector<std::string> stop);
  // Adds one token; returns the text that became safe to emit (possibly empty). After stopped(), returns "".
  std::string push(int32_t token);
  // True once a stop string has been completed.
  bool stopped() const { return stopped_; }
  // End of generation: returns whatever is still held back (an incomplete UTF-8 tail becomes U+FFFD; a partial
  // stop-string match is emitted as text). A stop string completed by that U+FFFD still stops (and is cut).
  // Returns "" after stopped() and on a second call.
  std::string finish();

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stop_;
  std::string pending_bytes_;  // raw bytes not yet known to form whole characters
  std::string held_;           // valid text held back for a possible stop string
  bool stopped_ = false;
};

// Emits the longest prefix of `bytes` made of complete characters, repairing ill-formed sequences with U+FFFD,
// and leaves in `bytes` only an incomplete (still possibly valid) tail. With final = true nothing is left.
std::string take_complete_utf8(std::string& bytes, bool final);

}  // namespace myriad
