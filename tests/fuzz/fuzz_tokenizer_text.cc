// Fuzz target: text to encode (any bytes: invalid UTF-8, NULs, special-token text, long runs), with special-token
// parsing on and off. Ids must lie in the vocabulary; with parsing off, a valid UTF-8 input must decode back to
// itself byte for byte (byte fallback covers every character; no special token may appear).
#include <cstdint>

#include "data/tokenize/tokenizer.h"
#include "fuzz/support.h"

using namespace myriad;

namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t n = 0;  // continuation bytes
    uint32_t cp = c;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = uint8_t(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    const uint32_t least = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;  // overlong forms are invalid
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)myriad::fuzz::test_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::test_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_accept_or_error([&] {
    for (const Specials mode : {Specials::kParse, Specials::kAsText}) {
      const std::vector<int32_t> ids = tok.encode(text, mode);
      for (int32_t id : ids) MYRIAD_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
      const std::string back = tok.decode(ids);
      if (mode == Specials::kAsText && valid_utf8(text))
        MYRIAD_CHECK(back == text, "encode/decode does not round-trip ", text.size(), " bytes");
    }
  });
  return 0;
}
