// The serving engine's flags, shared by the commands that run one (`myriad serve`, `generate`, `chat`): its cache
// and prefix options, and the sequence state files (--load-state) it starts with.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "serve/engine.h"

namespace myriad::cli {

// `options` with the engine's flags appended.
inline std::vector<OptionSpec> with_engine_options(std::vector<OptionSpec> options) {
  options.push_back({"cache-mb", "N", "memory for sequence state: KDA states and MLA pages (default 1024)"});
  options.push_back({"cache-dtype", "f32|bf16|q8",
                     "how MLA latent rows are cached: f32 (default), bf16 (half the memory) or q8 (int8 per group of "
                     "32: ~48% of the memory, fastest at long context)"});
  options.push_back({"page-tokens", "N", "MLA cache page size in tokens (default 64)"});
  options.push_back({"prefill-chunk", "N", "prompt tokens per engine step (default 256)"});
  options.push_back({"prefix-every", "N", "prefix cache snapshot interval in tokens; 0 = off (default 256)"});
  options.push_back({"prefix-cache-mb", "N", "memory for prefix snapshots (default 256)"});
  options.push_back({"load-state", "FILES",
                     "sequence state files (comma-separated; written by generate --save-state) loaded into the "
                     "prefix cache: a prompt starting with one's tokens resumes from it"});
  options.push_back({"draft", "ngram|model",
                     "speculative decoding: drafts from n-grams of the context (prompt lookup) or from "
                     "--draft-model; the output keeps the model's distribution (greedy: the same tokens)"});
  options.push_back({"draft-model", "DIR",
                     "a smaller model with the same tokenizer that drafts tokens (implies "
                     "--draft model)"});
  options.push_back({"spec-tokens", "K", "drafted tokens verified per step, at most (default 6)"});
  options.push_back({"spec-max-batch", "N",
                     "speculate only in steps with at most N decoding sequences (default 4; larger batches are "
                     "compute-bound)"});
  return options;
}

inline EngineOptions engine_options(const Args& args, EngineOptions e = {}) {
  e.cache_mb = args.get_int("cache-mb", e.cache_mb, 1, 1 << 24);
  e.cache_dtype = cache_dtype_from_name(args.get_choice("cache-dtype", "f32", {"f32", "bf16", "q8"}));
  e.page_tokens = args.get_int("page-tokens", e.page_tokens, 1, 1 << 20);
  e.prefill_chunk = args.get_int("prefill-chunk", e.prefill_chunk, 1, 1 << 24);
  e.prefix_every = args.get_int("prefix-every", e.prefix_every, 0, 1 << 30);
  e.prefix_cache_mb = args.get_int("prefix-cache-mb", e.prefix_cache_mb, 0, 1 << 24);
  e.draft =
      args.has("draft") ? args.get_choice("draft", "", {"ngram", "model"}) : (args.has("draft-model") ? "model" : "");
  MYRIAD_REQUIRE((e.draft == "model") == args.has("draft-model"), kValue,
                 "--draft model needs --draft-model DIR, and --draft-model goes with --draft model (or alone)");
  if (const auto dir = args.get("draft-model")) e.draft_model = InferenceModel::load(*dir);
  e.spec_tokens = args.get_int("spec-tokens", e.spec_tokens, 1, 64);
  e.spec_max_batch = args.get_int("spec-max-batch", e.spec_max_batch, 0, 1 << 20);
  return e;
}

// The --load-state list: comma-separated paths, empty entries skipped.
inline std::vector<std::string> state_files(const Args& args) {
  std::vector<std::string> paths;
  const auto list = args.get("load-state");
  if (!list) return paths;
  std::stringstream ss(*list);
  for (std::string path; std::getline(ss, path, ',');)
    if (!path.empty()) paths.push_back(path);
  return paths;
}

// The --load-state files into the engine's prefix cache, each reported on stderr when `speak`.
inline void load_states(const Args& args, Engine& engine, bool speak) {
  for (const std::string& path : state_files(args)) {
    const int64_t n = engine.load_prefix(path);
    if (speak) std::fprintf(stderr, "[loaded the state of %lld tokens from %s]\n", (long long)n, path.c_str());
  }
}

}  // namespace myriad::cli
