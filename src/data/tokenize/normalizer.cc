// NFC through ICU. See normalizer.h.
#include "data/tokenize/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "core/utf8.h"

namespace myriad {

namespace {

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
    const size_t len = utf8_sequence_length(s + i, text.size() - i);
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
