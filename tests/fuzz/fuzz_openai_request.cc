// Fuzz target: an HTTP request body (any bytes) as every endpoint with a body reads it: /v1/chat/completions and
// /v1/completions (validated into a generation request against a tiny model, then its sampler built as the engine
// builds it, and with strict tools 24 draws under the tool-call grammar), /tokenize and /detokenize. A bad body must be
// an ApiError with a 4xx status (the server's 400, 404, 413 family) or a myriad::Error the server maps; never another
// exception, never a 5xx.
#include <cstdint>

#include "fuzz/support.h"
#include "infer/inference_model.h"
#include "infer/sampling.h"
#include "serve/openai_schema.h"

using namespace myriad;
using namespace myriad::serve;

namespace {

template <class F>
void expect_accept_or_4xx(F&& handle) {
  try {
    handle();
  } catch (const ApiError& e) {
    MYRIAD_CHECK(e.status >= 400 && e.status < 500, "status ", e.status, ": ", e.what());
    MYRIAD_CHECK(e.what()[0] != '\0', "an ApiError without a message");
  } catch (const Error& e) {
    const ApiError api = from_error(e);
    MYRIAD_CHECK(api.status >= 400 && api.status < 500, "status ", api.status, " for ", e.what());
  }
}

const std::shared_ptr<InferenceModel>& tiny_model() {
  static const std::shared_ptr<InferenceModel> model = InferenceModel::load(fuzz::tiny_model_dir());
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tiny_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::shared_ptr<InferenceModel>& model = tiny_model();
  static const ServerOptions options = [] {
    ServerOptions o;
    o.model_name = "tiny";
    return o;
  }();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const bool chat : {true, false}) {
    expect_accept_or_4xx([&] {
      const ParsedRequest p = parse_generation(parse_body(body), chat, *model, options);
      for (int32_t id : p.gen.prompt) MYRIAD_CHECK(id >= 0 && id < model->vocab_size(), "prompt id ", id);
      Sampler sampler(p.gen.sampling);
      // Under a tool-call grammar (strict tools): a few draws from logits made of the body's bytes; every token
      // drawn must be one the grammar allows, and moving past it must not throw.
      if (p.gen.sampling.tool_grammar) {
        std::vector<float> logits(size_t(model->vocab_size()));
        for (size_t step = 0; step < 24; ++step) {
          for (size_t v = 0; v < logits.size(); ++v)
            logits[v] = size == 0 ? 0.0f : float(data[(v * 31 + step * 7) % size] % 17) * 0.5f;
          const int32_t t = sampler.sample(logits, p.gen.prompt).token;
          sampler.observe(t);
        }
      }
    });
  }
  expect_accept_or_4xx([&] { (void)parse_tokenize(parse_body(body), *model, options); });
  expect_accept_or_4xx([&] { (void)parse_detokenize(parse_body(body), model->tokenizer(), options.model_name); });
  return 0;
}
