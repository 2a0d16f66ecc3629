// `myriad chat --model DIR [--system TEXT] [--max-tokens N] [--temperature T] ...`: an interactive conversation.
// Reads one user message per line from stdin, renders the whole history with the chat template
// (serve/chat_template.h: the same as the server's), and streams the reply as the engine produces it. The history
// is kept; when it no longer fits the context (with room for --max-tokens), the oldest turns are dropped (the
// system message stays). "/image PATH" attaches an image (PNG, JPEG, GIF, WebP) to the next message, for a model with
// a vision tower (kept in the history with its message); "/video PATH" a short video (an animated GIF). "/reset" clears
// the history, "/quit" (or end of input) exits. With a terminal a "> " prompt is shown; with piped input only the
// replies are printed, one line each (a reply's own newlines kept). Ctrl-C while a reply streams ends that reply; at
// the prompt it exits.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "data/chat/chat_template.h"
#include "engine_flags.h"
#include "infer/image_input.h"
#include "serve/engine.h"

namespace {

volatile sig_atomic_t g_generating = 0;
volatile sig_atomic_t g_interrupted = 0;

void on_sigint(int) {
  if (g_generating) {
    g_interrupted = 1;
    return;
  }
  ::signal(SIGINT, SIG_DFL);
  ::raise(SIGINT);
}

// The history as a request: the chat template's tokens, each image's marker expanded to its run of placeholders,
// and the images' and videos' patches (decoded once, when attached: `images` and `videos` by path).
myriad::GenerationRequest chat_request(const myriad::InferenceModel& model,
                                       const std::vector<myriad::ChatMessage>& history,
                                       const std::map<std::string, myriad::Image>& images,
                                       const std::map<std::string, myriad::Video>& videos) {
  using namespace myriad;
  const ModelConfig& c = model.config();
  ImageInput in;
  for (const ChatMessage& m : history)
    for (const ChatImage& im : m.images) {
      if (im.video)
        add_video(in, *c.vision_config, videos.at(im.url));
      else
        add_image(in, *c.vision_config, images.at(im.url));
    }
  GenerationRequest req;
  if (in.empty()) {
    req.prompt = encode_chat(model.tokenizer(), history).ids;
    return req;
  }
  const auto ph = int32_t(*c.media_placeholder_token_id);
  req.prompt = expand_image_placeholders(encode_chat(model.tokenizer(), history, {}, true, ToolChoice::kAuto, ph).ids,
                                         ph, in.tokens);
  req.image_patches = in.patches(*c.vision_config);
  req.image_grids = in.grids;
  return req;
}

int run_chat(const myriad::cli::Args& args) {
  const auto dir = args.get("model");
  MYRIAD_REQUIRE(dir.has_value(), kValue, "chat needs --model DIR (see myriad chat --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "chat takes no positional arguments, got '", args.positional()[0],
                 "'");
  myriad::SamplingParams sp;
  constexpr double kMax = 3.0e38;  // within a float
  sp.temperature = float(args.get_double("temperature", 0.7, 0, kMax));
  sp.top_p = float(args.get_double("top-p", 0.95, 0, 1, /*open_min=*/true));
  sp.top_k = args.get_int("top-k", 0, 0, 1 << 30);
  sp.min_p = float(args.get_double("min-p", 0.0, 0, 1));
  sp.repetition_penalty = float(args.get_double("repetition-penalty", 1.0, 0, kMax, /*open_min=*/true));
  sp.seed = args.has("seed") ? args.get_u64("seed", 0) : std::random_device{}();
  myriad::validate(sp);
  const int64_t max_tokens = args.get_int("max-tokens", 512, 1, 1 << 30);
  myriad::EngineOptions eo = myriad::cli::engine_options(args);
  eo.max_batch = 1;

  const bool tty = ::isatty(0) && ::isatty(1);
  if (tty) std::fprintf(stderr, "myriad chat: loading %s ...\n", dir->c_str());
  std::shared_ptr<const myriad::InferenceModel> model =
      myriad::InferenceModel::load(*dir, {}, args.get_or("tokenizer", ""));
  myriad::Engine engine(model, eo);  // driven from this thread with step(): the sink prints as tokens come
  myriad::cli::load_states(args, engine, tty);
  const myriad::Tokenizer& tok = model->tokenizer();
  const int64_t context = model->config().max_position_embeddings;

  std::vector<myriad::ChatMessage> history;
  if (auto s = args.get("system")) history.push_back({"system", *s});
  const size_t kept = history.size();  // the system message survives /reset and trimming
  if (tty)
    std::fprintf(stderr, "myriad chat: context %lld tokens; /reset clears the conversation, /quit exits\n",
                 static_cast<long long>(context));
  ::signal(SIGINT, on_sigint);

  std::map<std::string, myriad::Image> images;  // by path, as attached
  std::map<std::string, myriad::Video> videos;
  std::vector<myriad::ChatImage> pending;  // for the next message
  std::string line;
  for (;;) {
    if (tty) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      history.resize(kept);
      if (tty) std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    const bool image = line.rfind("/image", 0) == 0 && (line.size() == 6 || line[6] == ' ');
    const bool video = line.rfind("/video", 0) == 0 && (line.size() == 6 || line[6] == ' ');
    if (image || video) {
      const std::string path = line.size() > 7 ? line.substr(7) : "";
      const std::string command = image ? "/image" : "/video";
      try {
        MYRIAD_REQUIRE(!path.empty(), kValue, command, " needs a path: ", command, " PATH");
        myriad::require_vision(model->config(), command);
        myriad::ChatImage attached{0, path};
        if (image) {
          myriad::Image decoded = myriad::read_image_file(path);
          attached.width = decoded.width;  // the k3 chat format writes the size
          attached.height = decoded.height;
          images[path] = std::move(decoded);
        } else {
          myriad::Video decoded = myriad::read_video_file(path);
          attached.width = decoded.width;
          attached.height = decoded.height;
          attached.video = true;
          videos[path] = std::move(decoded);
        }
        pending.push_back(std::move(attached));
        if (tty)
          std::fprintf(stderr, "(%s %s attached to the next message)\n", image ? "image" : "video", path.c_str());
      } catch (const myriad::Error& e) {
        std::fprintf(stderr, "myriad chat: %s\n", e.what());
      }
      continue;
    }
    if (line.empty()) continue;
    history.push_back({"user", line});
    history.back().images = std::exchange(pending, {});

    // The prompt: the history, its oldest turns dropped until it fits with room for the reply.
    myriad::GenerationRequest req = chat_request(*model, history, images, videos);
    while (int64_t(req.prompt.size()) + max_tokens > context && history.size() > kept + 1) {
      history.erase(history.begin() + ptrdiff_t(kept));
      req = chat_request(*model, history, images, videos);
    }
    const size_t prompt_size = req.prompt.size();
    req.max_tokens = std::min(max_tokens, context - int64_t(prompt_size));
    if (req.max_tokens <= 0) {
      std::fprintf(stderr, "myriad chat: the message is %lld tokens, more than the context (%lld): not sent\n",
                   static_cast<long long>(prompt_size), static_cast<long long>(context));
      history.pop_back();
      continue;
    }
    req.sampling = sp;
    req.stop = myriad::chat_stop_strings(myriad::chat_format_of(tok));
    ++sp.seed;  // each turn its own draws, the whole conversation reproducible with --seed

    std::string reply, error;
    std::vector<int32_t> reply_ids;
    myriad::FinishReason finish = myriad::FinishReason::kNone;
    uint64_t id = 0;
    try {
      id = engine.submit(std::move(req), [&](const myriad::TokenEvent& e) {
        if (e.token >= 0) reply_ids.push_back(e.token);
        if (!e.text.empty()) {
          std::fwrite(e.text.data(), 1, e.text.size(), stdout);
          std::fflush(stdout);
          reply += e.text;
        }
        if (e.finish != myriad::FinishReason::kNone) {
          finish = e.finish;
          error = e.error;
        }
      });
    } catch (const myriad::Error& e) {
      std::fprintf(stderr, "myriad chat: %s\n", e.what());
      history.pop_back();
      continue;
    }
    g_interrupted = 0;
    g_generating = 1;
    bool cancelled = false;
    while (finish == myriad::FinishReason::kNone) {
      if (g_interrupted && !cancelled) {
        engine.cancel(id);
        cancelled = true;
      }
      if (!engine.step()) break;  // nothing left to run (cannot happen before the finish event)
    }
    g_generating = 0;
    std::printf("\n");
    std::fflush(stdout);
    if (finish == myriad::FinishReason::kError) {
      std::fprintf(stderr, "myriad chat: generation failed: %s\n", error.c_str());
      history.pop_back();
      continue;
    }
    if (finish == myriad::FinishReason::kCancelled && tty) std::fprintf(stderr, "(interrupted)\n");
    if (myriad::chat_format_of(tok) == myriad::ChatFormat::kK3) {
      // K3's reply is tagged channels: the history keeps its response and its thinking apart, as K3 renders them
      while (!reply_ids.empty() && reply_ids.back() == tok.id_of("<|end_of_msg|>")) reply_ids.pop_back();
      const myriad::AssistantReply r = myriad::parse_assistant_reply(tok, reply_ids);
      myriad::ChatMessage m("assistant", r.error.empty() ? r.content : reply);
      m.reasoning_content = r.error.empty() ? r.reasoning : "";
      history.push_back(std::move(m));
    } else {
      history.push_back({"assistant", reply});
    }
  }
  if (tty) std::printf("\n");
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "chat", "talk with a model in the terminal (chat template, history, streamed replies)",
    "myriad chat --model DIR [--system TEXT] [--max-tokens N] [--temperature T] [--seed S]; in the chat: "
    "/image PATH, /video PATH, /reset, /quit",
    myriad::cli::with_engine_options(
        {{"model", "DIR", "model directory (config.json, safetensors, tokenizer/) or a training run"},
         {"tokenizer", "DIR|FILE",
          "use this tokenizer instead of the model's own (tokenizer.model, tiktoken.model or tokenizer.json)"},
         {"system", "TEXT", "a system message at the start of the conversation"},
         {"max-tokens", "N", "longest reply in tokens (default 512)"},
         {"temperature", "T", "sampling temperature; 0 = greedy (default 0.7)"},
         {"top-p", "P", "nucleus sampling mass (default 0.95)"},
         {"top-k", "K", "keep the K most likely tokens; 0 = off (default 0)"},
         {"min-p", "P", "drop tokens below P times the most likely one's probability (default 0)"},
         {"repetition-penalty", "R", "penalty for tokens already seen (default 1 = off)"},
         {"seed", "S", "random seed (default: a random one); each turn uses the next seed"}}),
    run_chat);
