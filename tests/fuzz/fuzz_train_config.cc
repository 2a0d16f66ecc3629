// Fuzz target: a training config (any bytes) validated against the tiny model's config, then written back as
// JSON (the form a checkpoint's trainer state stores) and parsed again: what was accepted must round-trip.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz/support.h"
#include "model/config.h"
#include "train/train_config.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelConfig model = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  const std::string path =
      fuzz::write_scratch("train.json", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    const TrainConfig c = load_train_config(path, model);
    const nlohmann::json back = train_config_to_json(c);
    const TrainConfig again = parse_train_config(back, "round trip", model);
    MYRIAD_CHECK(train_config_to_json(again) == back, "a training config does not round-trip: ", back.dump());
  });
  return 0;
}
