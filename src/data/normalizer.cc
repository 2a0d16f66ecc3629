// NFC through ICU. See normalizer.h.
#include "data/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace myriad {

namespace {

// Length of the well-formed UTF-8 sequence at s (Unicode table 3-7), or 0.
size_t utf8_length(const unsigned char* s, size_t n) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned char lo, unsigned char hi) { return i < n && s[i] >= lo && s[i] <= hi; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF)
    return cont(1, c == 0xE0 ? 0xA0 : 0x80, c == 0xED ? 0x9F : 0xBF) && cont(2, 0x80, 0xBF) ? 3 : 0;
  if (c >= 0xF0 && c <= 0xF4)
    return cont(1, c == 0xF0 ? 0x90 : 0x80, c == 0xF4 ? 0x8F : 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF) ? 4
                                                                                                                   : 0;
  return 0;
}

void append_nfc(std::string_view run, std::string& out) {
  bool ascii = true;
  for (char c : run) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {  // ASCII is its own NFC
    out.append(run);
    return;
  }
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  MYRIAD_REQUIRE(U_SUCCESS(status), kUnsupported, "NFC normalizer: ICU: ", u_errorName(status));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(run.data(), int32_t(run.size())));
  const icu::UnicodeString norm = nfc->normalize(in, status);
  MYRIAD_REQUIRE(U_SUCCESS(status), kValue, "NFC normalizer: ICU: ", u_errorName(status));
  norm.toUTF8String(out);
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  size_t run = 0, i = 0;
  while (i < text.size()) {
    const size_t len = utf8_length(s + i, text.size() - i);
    if (len > 0) {
      i += len;
      continue;
    }
    append_nfc(text.substr(run, i - run), out);
    out += text[i];
    run = ++i;
  }
  append_nfc(text.substr(run), out);
  return out;
}

}  // namespace myriad
