// Fuzz target: a token shard (any bytes) as the train split of a prepared data directory whose meta.json gives
// vocab_size 400, read through the Loader as training reads it. Every token served must lie in the vocabulary
// (a token outside it would index past the embedding table).
#include <cstdint>
#include <filesystem>

#include "data/datasets/loader.h"
#include "fuzz/support.h"

using namespace myriad;

namespace {

const std::string& data_dir() {
  static const std::string dir = [] {
    std::filesystem::create_directories(fuzz::scratch_dir() + "/data");
    fuzz::write_scratch("data/meta.json", R"({"vocab_size": 400})");
    return fuzz::scratch_dir() + "/data";
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)data_dir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = data_dir();
  fuzz::write_scratch("data/train-00000.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    Loader loader(dir, 7);
    for (int i = 0; i < 3; ++i) {
      const Batch b = loader.next_batch(8, 2);
      for (int64_t t : b.tokens) MYRIAD_CHECK(t >= 0 && t < 400, "token ", t, " outside the vocabulary");
      for (int64_t t : b.targets) MYRIAD_CHECK(t >= 0 && t < 400, "target ", t, " outside the vocabulary");
    }
  });
  return 0;
}
