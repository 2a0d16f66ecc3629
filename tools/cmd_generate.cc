// `myriad generate`: one prompt through the serving engine (src/serve/engine.h), streamed to the terminal as the
// tokens come. Argument parsing only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "cli.h"
#include "data/media/image.h"
#include "dist/expert_parallel.h"
#include "engine_flags.h"
#include "infer/image_input.h"
#include "io/atomic_file.h"
#include "serve/engine.h"

namespace {

float parse_float(const myriad::cli::Args& args, const std::string& name, float fallback) {
  const auto v = args.get(name);
  if (!v) return fallback;
  try {
    size_t used = 0;
    const float f = std::stof(*v, &used);
    MYRIAD_REQUIRE(used == v->size(), kValue, "--", name, " ", *v, ": not a number");
    return f;
  } catch (const std::logic_error&) {
    MYRIAD_REQUIRE(false, kValue, "--", name, " ", *v, ": not a number");
  }
  return fallback;
}

// --image a.png,b.jpg and --video c.gif: each image decoded, patched at the model's patch size and encoded by its
// vision tower, each video's frames (an animated GIF's) in chunks; the prompt's image markers
// (media_placeholder_token_id, e.g. <|image|>) expand to each image's and then each video's tokens, or, when the
// prompt has none, one marker per image and video goes before it.
void attach_media(const myriad::InferenceModel& model, const myriad::cli::Args& args, myriad::GenerationRequest* req) {
  using namespace myriad;
  const ModelConfig& c = model.config();
  const std::string flag = args.has("image") ? "--image" : "--video";
  require_vision(c, flag + " (the model in " + model.source() + ")");
  ImageInput media;
  auto each = [](const std::string& list, const auto& fn) {
    std::stringstream ss(list);
    for (std::string path; std::getline(ss, path, ',');)
      if (!path.empty()) fn(path);
  };
  if (const auto images = args.get("image"))
    each(*images, [&](const std::string& path) { add_image(media, *c.vision_config, read_image_file(path)); });
  if (const auto videos = args.get("video"))
    each(*videos, [&](const std::string& path) { add_video(media, *c.vision_config, read_video_file(path)); });
  MYRIAD_REQUIRE(!media.empty(), kValue, flag, ": no paths given");
  const auto ph = int32_t(*c.media_placeholder_token_id);
  if (std::find(req->prompt.begin(), req->prompt.end(), ph) == req->prompt.end())
    req->prompt.insert(req->prompt.begin(), media.tokens.size(), ph);
  req->prompt = expand_image_placeholders(req->prompt, ph, media.tokens);
  req->image_patches = media.patches(*c.vision_config);
  req->image_grids = media.grids;
}

int run_generate(const myriad::cli::Args& args) {
  using namespace myriad;
  const auto model_dir = args.get("model");
  MYRIAD_REQUIRE(model_dir && args.has("prompt") != args.has("prompt-file"), kValue,
                 "generate needs --model DIR and one of --prompt TEXT and --prompt-file FILE");
  const std::string prompt = args.has("prompt") ? *args.get("prompt") : read_file(*args.get("prompt-file"));
  const auto t0 = std::chrono::steady_clock::now();
  // Under mpirun with --ep N: this rank's experts only; every rank generates in lockstep, rank 0 prints.
  const std::unique_ptr<ExpertParallelJob> job = start_expert_parallel_job(int(args.get_int("ep", 1, 1, 1 << 20)));
  const std::string tokenizer = args.get_or("tokenizer", "");
  auto model = job ? InferenceModel::load(
                         *model_dir, [&](const ModelConfig& c) { return job->filter(c); }, tokenizer)
                   : InferenceModel::load(*model_dir, {}, tokenizer);
  if (job) model->set_moe_dispatcher(job->dispatcher.get());
  const bool speak = !job || job->root();
  GenerationRequest req;
  req.prompt = model->tokenizer().encode(prompt);
  MYRIAD_REQUIRE(!req.prompt.empty(), kValue, "generate: the prompt is empty");
  if (args.has("image") || args.has("video")) attach_media(*model, args, &req);
  req.max_tokens = args.get_int("max-tokens", 64, 1, 1 << 24);
  req.sampling.temperature = parse_float(args, "temperature", 0.0f);
  req.sampling.top_k = args.get_int("top-k", 0, 0, 1 << 30);
  req.sampling.top_p = parse_float(args, "top-p", 1.0f);
  req.sampling.min_p = parse_float(args, "min-p", 0.0f);
  req.sampling.repetition_penalty = parse_float(args, "repetition-penalty", 1.0f);
  req.sampling.seed = uint64_t(args.get_int("seed", 0, 0, 1L << 62));
  if (auto s = args.get("stop")) req.stop.push_back(*s);
  Engine engine(model, cli::engine_options(args));
  cli::load_states(args, engine, speak);
  // --save-state writes a prefix snapshot: refused before any work when the prompt will leave none.
  const int64_t every = engine.options().prefix_every;
  MYRIAD_REQUIRE(
      !args.has("save-state") || args.has("load-state") || (every > 0 && int64_t(req.prompt.size()) >= every), kValue,
      "--save-state: the prompt (", req.prompt.size(),
      " tokens) will leave no snapshot of the prompt: snapshots are taken every --prefix-every ", every,
      " tokens (0: none)");
  const auto t1 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first;
  int64_t n = 0;
  std::string reason;
  if (speak && args.has("prompt")) std::printf("%s", prompt.c_str());  // a prompt file is not echoed
  std::fflush(stdout);
  engine.submit(req, [&](const TokenEvent& ev) {
    if (ev.token >= 0 && n++ == 0) first = std::chrono::steady_clock::now();
    if (speak) std::fputs(ev.text.c_str(), stdout);
    std::fflush(stdout);
    if (ev.finish != FinishReason::kNone) reason = finish_reason_name(ev.finish);
  });
  // A long prompt reports its prefill every 5 s on stderr (tokens so far, speed, time left, cache held).
  const bool long_prompt = speak && req.prompt.size() >= 32768;
  auto shown = std::chrono::steady_clock::now();
  while (engine.step()) {
    const auto now = std::chrono::steady_clock::now();
    if (!long_prompt || n > 0 || now - shown < std::chrono::seconds(5)) continue;
    shown = now;
    const EngineMetrics m = engine.metrics();
    const double done = double(m.prompt_tokens), total = double(req.prompt.size() - m.prefix_tokens_reused);
    const double rate = done / std::max(1e-9, std::chrono::duration<double>(now - t1).count());
    std::fprintf(stderr, "[prefill %.0f of %.0f tokens (%.1f%%), %.0f tokens/s, ETA %.0f s, cache %.1f MB]\n", done,
                 total, 100.0 * done / std::max(1.0, total), rate, (total - done) / std::max(1e-9, rate),
                 double(m.cache_bytes_used) / 1e6);
  }
  const auto t2 = std::chrono::steady_clock::now();
  auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  if (!speak) return 0;
  std::printf("\n");
  std::fflush(stdout);  // the text before the statistics line on a shared terminal
  const EngineMetrics mt = engine.metrics();
  std::fprintf(stderr,
               "[%zu prompt tokens (%llu from the prefix cache), %lld generated (%s); load %.2f s, first token %.3f s, "
               "then %.1f tokens/s]\n",
               req.prompt.size(), (unsigned long long)mt.prefix_tokens_reused, (long long)n, reason.c_str(),
               secs(t0, t1), n ? secs(t1, first) : 0.0, n > 1 ? double(n - 1) / secs(first, t2) : 0.0);
  if (mt.spec_verifies > 0)
    std::fprintf(stderr,
                 "[speculation (%s): %llu verifies, %llu of %llu drafted tokens accepted (%.1f%%), %.2f tokens "
                 "per verify]\n",
                 engine.options().draft.c_str(), (unsigned long long)mt.spec_verifies,
                 (unsigned long long)mt.spec_accepted, (unsigned long long)mt.spec_drafted,
                 100.0 * double(mt.spec_accepted) / double(std::max<uint64_t>(1, mt.spec_drafted)),
                 double(mt.spec_emitted) / double(mt.spec_verifies));
  if (const auto path = args.get("save-state")) {
    const int64_t saved = engine.save_prefix(req.prompt, *path);
    MYRIAD_REQUIRE(saved > 0, kValue, "--save-state ", *path, ": the engine holds no snapshot of the prompt (",
                   req.prompt.size(), " tokens; snapshots are taken every --prefix-every ", every, " tokens)");
    std::fprintf(stderr, "[saved the state of the prompt's first %lld of %zu tokens to %s: %.1f MB]\n",
                 (long long)saved, req.prompt.size(), path->c_str(), double(std::filesystem::file_size(*path)) / 1e6);
  }
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "generate", "generate text from a model, streamed as it comes (the serving engine)",
    "myriad generate --model DIR (--prompt TEXT | --prompt-file FILE) [--max-tokens N] [--temperature T] "
    "[--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--seed S] [--stop TEXT] [--image PATHS] [--video "
    "PATHS] "
    "[--save-state FILE] [--load-state FILES]",
    myriad::cli::with_engine_options(
        {{"model", "DIR", "a model directory (plain or quantized), a run (its latest checkpoint)"},
         {"tokenizer", "DIR|FILE",
          "use this tokenizer instead of the model's own (tokenizer.model, tiktoken.model or tokenizer.json)"},
         {"prompt", "TEXT", "the prompt"},
         {"prompt-file", "FILE", "the prompt read from a file (UTF-8 text; not echoed)"},
         {"save-state", "FILE",
          "after generating, write the state of the prompt (its longest prefix snapshot: all but fewer than "
          "--prefix-every tokens) to FILE, for --load-state later"},
         {"image", "PATHS",
          "images (PNG, JPEG, GIF, WebP; comma-separated) for a model with a vision tower: "
          "each <|image|> marker of the prompt (media_placeholder_token_id) takes the "
          "next; without markers the images go before the prompt"},
         {"video", "PATHS",
          "short videos (animated GIFs; comma-separated): up to 4 x init_pos_emb_time frames spread over each, "
          "encoded in chunks of init_pos_emb_time frames; each takes the <|image|> marker after the images'"},
         {"max-tokens", "N", "tokens to generate (default 64)"},
         {"temperature", "T", "0 = greedy (default)"},
         {"top-k", "K", "keep the K most likely tokens (0 = off)"},
         {"top-p", "P", "nucleus sampling mass (1 = off)"},
         {"min-p", "P", "drop tokens below P x the most likely (0 = off)"},
         {"repetition-penalty", "R", "CTRL repetition penalty (1 = off)"},
         {"seed", "S", "sampling seed"},
         {"stop", "TEXT", "stop string (not printed)"},
         {"ep", "N", "under mpirun -np N: split the routed experts over the N ranks (rank 0 prints)"}}),
    run_generate);
