// Unicode normalization of tokenizer input (a Hugging Face tokenizer.json "normalizer"), through Debian's ICU.
// Only NFC (Qwen's tokenizers) so far. Well-formed UTF-8 runs are normalized; ill-formed bytes pass through
// unchanged (ICU would replace them with U+FFFD, and the byte-level BPE keeps every byte).
#pragma once

#include <string>
#include <string_view>

namespace myriad {

// `text` in Unicode Normalization Form C, ill-formed bytes kept as they are.
std::string nfc_normalize(std::string_view text);

}  // namespace myriad
