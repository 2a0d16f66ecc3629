// Fuzz target: a Hugging Face tokenizer.json (any bytes). An accepted tokenizer must then encode a fixed
// multilingual text (special tokens parsed and as text) with ids inside its vocabulary and decode them.
#include <cstdint>

#include "fuzz/support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  myriad::fuzz::check_tokenizer_file("tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
