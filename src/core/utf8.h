// UTF-8 well-formedness, as Unicode's table 3-7 defines it: the one reader the tokenizers, the normalizer and
// the added-token matcher share (an over-long form, a surrogate or a code point above U+10FFFF is ill-formed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace myriad {

// Length (1..4) of the well-formed UTF-8 sequence at s[0], reading at most n >= 1 bytes, or 0 when the
// sequence there is ill-formed or cut short.
inline size_t utf8_sequence_length(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo, unsigned char hi) { return i < n && s[i] >= lo && s[i] <= hi; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(1, lo, hi) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// Whether all of s is well-formed UTF-8.
inline bool is_valid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if ((len = utf8_sequence_length(b + i, s.size() - i)) == 0) return false;
  return true;
}

// The code point of `s` when s is exactly one well-formed UTF-8 character, else UINT32_MAX.
inline uint32_t utf8_code_point(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  if (s.empty() || utf8_sequence_length(b, s.size()) != s.size()) return UINT32_MAX;
  switch (s.size()) {
    case 1:
      return b[0];
    case 2:
      return ((b[0] & 0x1Fu) << 6) | (b[1] & 0x3Fu);
    case 3:
      return ((b[0] & 0x0Fu) << 12) | ((b[1] & 0x3Fu) << 6) | (b[2] & 0x3Fu);
    default:
      return ((b[0] & 0x07u) << 18) | ((b[1] & 0x3Fu) << 12) | ((b[2] & 0x3Fu) << 6) | (b[3] & 0x3Fu);
  }
}

}  // namespace myriad
