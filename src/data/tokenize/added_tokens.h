// Added tokens: the tokens found in the raw text before pre-tokenization (tiktoken's special tokens, Hugging
// Face's "added_tokens"). Matching is leftmost-longest over all of them (a byte trie; time linear in the text times
// the longest token), as Hugging Face's Aho-Corasick split and tiktoken's special-token search (whose tokens are
// never prefixes of one another) find them.
//
// include_special false (message content that must not forge a turn; Hugging Face's encode_special_tokens,
// tiktoken's encode_ordinary): a special token's text is found and then left as ordinary text, so what it covers
// is not searched again; non-special added tokens are still matched.
// lstrip / rstrip: the whitespace (Unicode White_Space) left / right of a match goes with the token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true;
  bool lstrip = false, rstrip = false;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // Throws kFormat naming `source` for an empty or duplicate content.
  AddedTokens(std::vector<AddedToken> tokens, const std::string& source);

  // Cuts text into ordinary runs (on_text, never empty) and added tokens (on_token(id)), in order.
  void split(std::string_view text, bool include_special, const std::function<void(std::string_view)>& on_text,
             const std::function<void(int32_t)>& on_token) const;

  const AddedToken* find(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Node {
    int32_t token = -1;                             // index into tokens_ of the token ending here
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

// Length of the Unicode White_Space character that ends at / starts at the given offset of text, or 0.
size_t whitespace_before(std::string_view text, size_t end);
size_t whitespace_after(std::string_view text, size_t begin);

}  // namespace myriad
