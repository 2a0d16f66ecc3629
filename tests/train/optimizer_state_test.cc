// The optimizer state's step counter, read back from its safetensors metadata on --resume: exactly a non-negative
// decimal, anything else one format error naming the file and the value (std::stoll took "5junk" and "-3" and threw
// a bare invalid_argument on "x").
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"
#include "train/optimizer.h"

namespace myriad {
namespace {

TEST(AdamWState, StepMetadataIsANonNegativeDecimal) {
  const ModelConfig c = load_model_config(MYRIAD_SOURCE_DIR "/configs/tiny.json", nullptr);
  const ModelWeights w = ModelWeights::random(c, 1);
  const AdamW saved(c, w, AdamWConfig{});
  const std::string path =
      (std::filesystem::path(testing::TempDir()) / ("myriad_adamw_" + std::to_string(getpid()) + ".safetensors"))
          .string();
  for (const char* good : {"0", "7", "123456789012"}) {
    save_safetensors(path, saved.state_tensors(), {{"adamw_step", good}});
    AdamW back(c, w, AdamWConfig{});
    back.load(path);
    EXPECT_EQ(back.steps(), std::stoll(good));
  }
  for (const char* bad : {"5junk", "-3", "x", "", " 5", "99999999999999999999"}) {
    save_safetensors(path, saved.state_tensors(), {{"adamw_step", bad}});
    AdamW back(c, w, AdamWConfig{});
    try {
      back.load(path);
      ADD_FAILURE() << "'" << bad << "' accepted as step " << back.steps();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat) << e.what();
      EXPECT_NE(std::string(e.what()).find(path + ": optimizer state's adamw_step metadata \"" + bad +
                                           "\" is not a non-negative integer"),
                std::string::npos)
          << e.what();
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace myriad
