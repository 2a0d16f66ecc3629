// Fuzz target: an image-text records file (JSONL of captions, questions and chats with images; any bytes), read
// and, for records whose images are all inline data: URIs, turned into training examples for configs/tiny-vl.json
// (images decoded and patched, text encoded, placeholder runs expanded). Every example must have one target flag
// per token, vocabulary ids only, and as many placeholders as its images' tokens.
#include <algorithm>
#include <cstdint>

#include "data/datasets/image_text_records.h"
#include "fuzz/support.h"
#include "model/config.h"
#include "train/image_text_source.h"

using namespace myriad;

namespace {
const ModelConfig& vlm() {
  static const ModelConfig c = [] {
    ModelConfig m = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny-vl.json", nullptr);
    m.vocab_size = fuzz::test_tokenizer().vocab_size();
    return m;
  }();
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)fuzz::test_tokenizer();
  (void)vlm();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::test_tokenizer();
  const std::string path =
      fuzz::write_scratch("records.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    for (const ImageTextRecord& r : read_image_text_records(path)) {
      // Paths would read whatever files the machine has: only inline images are decoded here.
      if (!std::all_of(r.images.begin(), r.images.end(), [](const std::string& s) { return s.rfind("data:", 0) == 0; }))
        continue;
      const ImageTextExample e = record_example(r, vlm(), tok);
      MYRIAD_CHECK(e.predicted.size() == e.tokens.size(), "one target flag per token");
      int64_t image_tokens = 0;
      for (int64_t t : e.images.tokens) image_tokens += t;
      const int32_t ph = int32_t(*vlm().media_placeholder_token_id);
      MYRIAD_CHECK(std::count(e.tokens.begin(), e.tokens.end(), ph) == image_tokens, "placeholders != image tokens");
      for (int32_t id : e.tokens) MYRIAD_CHECK(id >= 0 && id < vlm().vocab_size, "id ", id, " outside the vocabulary");
    }
  });
  return 0;
}
