// Fuzz target: a tokenizer.model file (any bytes: SentencePiece's serialized ModelProto, a foreign or corrupted
// file). An accepted model must then encode and decode a fixed multilingual text with ids inside its vocabulary.
#include <cstdint>

#include "data/tokenize/tokenizer.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_accept_or_error([&] {
    const Tokenizer tok = Tokenizer::from_model_bytes(std::string(reinterpret_cast<const char*>(data), size));
    const std::vector<int32_t> ids = tok.encode("Hello, world! 3 + 4 = 7 \xe6\x97\xa5\xe6\x9c\xac <|endoftext|>");
    for (int32_t id : ids) MYRIAD_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
    (void)tok.decode(ids);
  });
  return 0;
}
