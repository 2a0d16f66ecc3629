// Fuzz target: a checkpoint's trainer_state.json (any bytes) as resuming reads it: the counters, then the data
// position restored onto a pretraining loader and onto an SFT conversation source (the two BatchSources a run
// resumes), each followed by the batch it would train on next, whose tokens must lie in the vocabulary.
#include <cstdint>
#include <filesystem>

#include "data/datasets/loader.h"
#include "data/datasets/shards.h"
#include "fuzz/support.h"
#include "train/run_checkpoint.h"
#include "train/sft_data.h"

using namespace myriad;

namespace {

const std::string& data_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/state-data";
    std::filesystem::create_directories(d);
    std::vector<int32_t> tokens(1000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37) % 400);
    write_shard(shard_path(d, "train", 0), ShardDType::kU16, tokens);
    fuzz::write_scratch("state-data/meta.json", R"({"vocab_size": 400})");
    return d;
  }();
  return dir;
}

std::vector<ChatTokens> conversations(int n) {
  std::vector<ChatTokens> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<ChatMessage> m{{"user", "what is " + std::to_string(i) + " + 1?"},
                                     {"assistant", std::to_string(i + 1)}};
    out.push_back(encode_chat(fuzz::test_tokenizer(), m, {}, false));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)data_dir();
  (void)fuzz::test_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_accept_or_error([&] {
    const nlohmann::json st = parse_trainer_state(text, "trainer_state.json");
    for (const char* k : {"step", "skipped_total", "consecutive_skips", "tokens_seen"})
      (void)trainer_state_counter(st, k, "trainer_state.json", 0);
    if (!st.contains("data")) return;
    Loader loader(data_dir(), 1);
    loader.restore(st["data"]);
    for (int64_t t : loader.next_batch(16, 2).tokens) MYRIAD_CHECK(t >= 0 && t < 400, "token ", t);
  });
  fuzz::expect_accept_or_error([&] {
    const nlohmann::json st = parse_trainer_state(text, "trainer_state.json");
    if (!st.contains("data")) return;
    ConversationSource source(fuzz::test_tokenizer(), conversations(5), conversations(1), 3);
    source.restore(st["data"]);
    const TrainBatch b = source.next(32);
    (void)b;
  });
  return 0;
}
