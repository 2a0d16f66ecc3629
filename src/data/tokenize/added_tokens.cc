// Added-token matching. See added_tokens.h.
#include "data/tokenize/added_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"

namespace myriad {

namespace {

bool is_white_space(uint32_t c) {
  // Unicode's White_Space property (PropList.txt), what Rust's char::is_whitespace tests.
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

size_t whitespace_before(std::string_view text, size_t end) {
  for (size_t len = 1; len <= 3 && len <= end; ++len)
    if (is_white_space(utf8_code_point(text.substr(end - len, len)))) return len;
  return 0;
}

size_t whitespace_after(std::string_view text, size_t begin) {
  for (size_t len = 1; len <= 3 && begin + len <= text.size(); ++len)
    if (is_white_space(utf8_code_point(text.substr(begin, len)))) return len;
  return 0;
}

AddedTokens::AddedTokens(std::vector<AddedToken> tokens, const std::string& source) : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& c = tokens_[t].content;
    MYRIAD_REQUIRE(!c.empty(), kFormat, source, ": added token ", tokens_[t].id, " has empty content");
    int32_t node = 0;
    for (unsigned char b : c) {
      int32_t nx = child(node, b);
      if (nx < 0) {
        nx = int32_t(trie_.size());
        trie_.emplace_back();
        auto& kids = trie_[size_t(node)].next;
        kids.insert(std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1))), {b, nx});
      }
      node = nx;
    }
    MYRIAD_REQUIRE(trie_[size_t(node)].token < 0, kFormat, source, ": added tokens ",
                   tokens_[size_t(trie_[size_t(node)].token)].id, " and ", tokens_[t].id, " are both '", c, "'");
    trie_[size_t(node)].token = int32_t(t);
    first_byte_[static_cast<unsigned char>(c[0])] = true;
  }
}

int32_t AddedTokens::child(int32_t node, uint8_t b) const {
  const auto& kids = trie_[size_t(node)].next;
  auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t(-1)));
  return it != kids.end() && it->first == b ? it->second : -1;
}

const AddedToken* AddedTokens::find(std::string_view content) const {
  if (trie_.empty()) return nullptr;
  int32_t node = 0;
  for (unsigned char b : content) {
    node = child(node, b);
    if (node < 0) return nullptr;
  }
  return trie_[size_t(node)].token >= 0 ? &tokens_[size_t(trie_[size_t(node)].token)] : nullptr;
}

void AddedTokens::split(std::string_view text, bool include_special,
                        const std::function<void(std::string_view)>& on_text,
                        const std::function<void(int32_t)>& on_token) const {
  size_t from = 0;  // start of the pending ordinary text
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // The longest token starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      if (trie_[size_t(node)].token >= 0) {
        best = trie_[size_t(node)].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[size_t(best)];
    if (t.special && !include_special) {  // stays text; the search resumes after it
      i = best_end;
      continue;
    }
    size_t begin = i, end = best_end;
    if (t.lstrip)
      while (size_t w = whitespace_before(text.substr(from), begin - from)) begin -= w;
    if (t.rstrip)
      while (size_t w = whitespace_after(text, end)) end += w;
    if (begin > from) on_text(text.substr(from, begin - from));
    on_token(t.id);
    from = i = end;
  }
  if (from < text.size()) on_text(text.substr(from));
}

}  // namespace myriad
