// Fuzz target: a Hugging Face tokenizer.json (any bytes). An accepted tokenizer must then encode a fixed
// multilingual text (special tokens parsed and as text) with ids inside its vocabulary and decode them.
#include <cstdint>

#include "data/tokenizer.h"
#include "fuzz/support.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("tokenizer.json", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    const Tokenizer tok = Tokenizer::load(path);
    for (Specials s : {Specials::kParse, Specials::kAsText}) {
      const std::vector<int32_t> ids =
          tok.encode("Hello, world! DON'T 3 + 4 = 7 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 <|endoftext|>\xff", s);
      for (int32_t id : ids) MYRIAD_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
      (void)tok.decode(ids);
    }
  });
  return 0;
}
