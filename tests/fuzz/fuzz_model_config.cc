// Fuzz target: a model config.json (any bytes): parsed and validated, then the tensor specs and the size
// accounting derived from it (the arithmetic a hostile config could overflow), never a model allocated.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz/support.h"
#include "model/accounting.h"
#include "model/config.h"
#include "model/param_spec.h"

using namespace myriad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      fuzz::write_scratch("config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  fuzz::expect_accept_or_error([&] {
    std::vector<std::string> warnings;
    const ModelConfig c = load_model_config(path, &warnings);
    (void)model_config_summary(c);
    const std::vector<ParamSpec> specs = model_param_specs(c);
    const ModelAccounting a = account_model(c, specs);
    (void)training_flops_per_token(c, a, 4096);
  });
  return 0;
}
