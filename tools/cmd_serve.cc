// `myriad serve --model DIR [--host H] [--port P] [--api-key KEY] ...`: the OpenAI-compatible HTTP server
// (serve/server.h). It listens at once (GET /health answers 503 while the model loads), loads the model in the
// background, prints one line when it is ready, and stops cleanly on SIGINT or SIGTERM (streams end, waiting
// requests get 503). A model that fails to load ends the command with status 1.
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "dist/expert_parallel.h"
#include "dist/mpi_communicator.h"
#include "serve/expert_server.h"
#include "serve/server.h"

namespace {

int run_serve(const myriad::cli::Args& args) {
  const auto dir = args.get("model");
  MYRIAD_REQUIRE(dir.has_value(), kValue, "serve needs --model DIR (see myriad serve --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "serve takes no positional arguments, got '", args.positional()[0],
                 "'");
  myriad::ServerOptions opt;
  opt.model_dir = *dir;
  opt.model_name = args.get_or("served-model-name", args.get_or("model-name", ""));
  opt.host = args.get_or("host", "127.0.0.1");
  opt.port = int(args.get_int("port", 8080, 0, 65535));
  opt.api_key = args.get_or("api-key", "");
  if (opt.api_key.empty()) {
    if (const char* k = std::getenv("MYRIAD_API_KEY")) opt.api_key = k;
  }
  myriad::EngineOptions& e = opt.engine;
  e.cache_mb = args.get_int("cache-mb", e.cache_mb, 1, 1 << 24);
  e.max_batch = args.get_int("max-batch", e.max_batch, 1, 4096);
  e.max_waiting = args.get_int("max-waiting", e.max_waiting, 0, 1 << 20);
  e.page_tokens = args.get_int("page-tokens", e.page_tokens, 1, 1 << 20);
  e.cache_dtype = myriad::cache_dtype_from_name(args.get_choice("cache-dtype", "f32", {"f32", "bf16", "q8"}));
  e.prefill_chunk = args.get_int("prefill-chunk", e.prefill_chunk, 1, 1 << 24);
  e.prefix_every = args.get_int("prefix-every", e.prefix_every, 0, 1 << 30);
  e.prefix_cache_mb = args.get_int("prefix-cache-mb", e.prefix_cache_mb, 0, 1 << 24);
  opt.default_max_tokens = args.get_int("default-max-tokens", opt.default_max_tokens, 1, 1 << 30);
  opt.max_connections = int(args.get_int("max-connections", opt.max_connections, 1, 1 << 16));
  opt.request_timeout_s = args.get_double("request-timeout", opt.request_timeout_s, 0.001, 86400);
  opt.shutdown_grace_s = args.get_double("shutdown-grace", opt.shutdown_grace_s, 0, 86400);

  // SIGINT / SIGTERM are taken here with sigtimedwait: block them before any thread starts (threads inherit it).
  // Expert followers block them too: mpirun passes them to every rank, and a follower ends when rank 0, stopping,
  // tells it to (a clean exit 0 for the whole job).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Under mpirun with --ep N (serve/expert_server.h): rank 0 serves, the others hold their experts and serve
  // rank 0's token copies until it stops.
  const std::unique_ptr<myriad::ExpertParallelJob> job =
      myriad::start_expert_parallel_job(int(args.get_int("ep", 1, 1, 1 << 20)));
  std::unique_ptr<myriad::ExpertLeaderDispatcher> leader;
  if (job) {
    auto filter = [&](const myriad::ModelConfig& c) { return job->filter(c); };
    if (!job->root()) {
      const auto model = myriad::InferenceModel::load(opt.model_dir, filter);
      myriad::run_expert_follower(*model, *job->dispatcher, *job->world);
      return 0;
    }
    opt.loader = [&, filter]() -> std::shared_ptr<const myriad::InferenceModel> {
      auto model = myriad::InferenceModel::load(opt.model_dir, filter);
      leader = std::make_unique<myriad::ExpertLeaderDispatcher>(*job->world, *job->groups.ep_group, model->config());
      model->set_moe_dispatcher(leader.get());
      return model;
    };
  }

  myriad::Server server(opt);
  server.start();
  std::printf("myriad serve: listening on http://%s:%d (model '%s' loading from %s)\n", opt.host.c_str(), server.port(),
              server.model_name().c_str(), opt.model_dir.c_str());
  std::fflush(stdout);
  bool announced = false;
  for (;;) {
    const timespec wait{0, 200'000'000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("myriad serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stdout);
      break;
    }
    const myriad::Server::State state = server.state();
    if (state == myriad::Server::State::kFailed) {
      const std::string why = server.load_error();
      server.stop();
      std::fprintf(stderr, "myriad serve: cannot load the model from %s: %s\n", opt.model_dir.c_str(), why.c_str());
      if (job) myriad::mpi_abort(1);  // the followers wait for rank 0: end them with it
      return 1;
    }
    if (state == myriad::Server::State::kReady && !announced) {
      announced = true;
      const auto engine = server.engine();
      const myriad::ModelConfig& c = engine->model().config();
      std::printf(
          "myriad serve: ready: model '%s' (%lld layers, vocab %lld, context %lld), cache %lld MiB, max batch %lld%s\n",
          server.model_name().c_str(), static_cast<long long>(c.num_hidden_layers),
          static_cast<long long>(c.vocab_size), static_cast<long long>(c.max_position_embeddings),
          static_cast<long long>(e.cache_mb), static_cast<long long>(e.max_batch),
          opt.api_key.empty() ? "" : ", API key required on /v1/*");
      std::fflush(stdout);
    }
  }
  server.stop();
  if (leader) leader->stop();  // the engine is joined: the followers' loop ends
  std::printf("myriad serve: stopped\n");
  return 0;
}

}  // namespace

MYRIAD_COMMAND("serve", "serve a model over an OpenAI-compatible HTTP API (chat, completions, streaming)",
               "myriad serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--cache-mb N] "
               "[--max-batch N]",
               {{"model", "DIR", "model directory (config.json, safetensors, tokenizer/) or a training run"},
                {"model-name", "NAME",
                 "the model id clients use (default: DIR's base name; for a run's checkpoint, the run's name)"},
                {"served-model-name", "NAME", "the same as --model-name (vLLM's spelling)"},
                {"host", "HOST", "address to bind (default 127.0.0.1: this machine only)"},
                {"port", "PORT", "port (default 8080; 0: any free port, printed at start)"},
                {"api-key", "KEY", "require 'Authorization: Bearer KEY' on /v1/* (default: $MYRIAD_API_KEY)"},
                {"cache-mb", "N", "memory for sequence state: KDA states and MLA pages (default 1024)"},
                {"cache-dtype", "f32|bf16|q8",
                 "how MLA latent rows are cached: f32 (default), bf16 (half the memory) or q8 (int8 per group of 32: "
                 "~48% of the memory, fastest at long context)"},
                {"max-batch", "N", "sequences decoded together (default 16)"},
                {"ep", "N",
                 "under mpirun -np N: rank 0 serves, every rank holds 1/N of the routed experts (the others serve "
                 "rank 0's token copies)"},
                {"max-waiting", "N", "queued requests before 429 (default 64)"},
                {"page-tokens", "N", "MLA cache page size in tokens (default 64)"},
                {"prefill-chunk", "N", "prompt tokens per engine step (default 256)"},
                {"prefix-every", "N", "prefix cache snapshot interval in tokens; 0 = off (default 256)"},
                {"prefix-cache-mb", "N", "memory for prefix snapshots (default 256)"},
                {"default-max-tokens", "N", "chat max_tokens when the request has none (default 1024)"},
                {"max-connections", "N",
                 "connections served at once, a thread each (default 1024; more wait for a free one)"},
                {"request-timeout", "S",
                 "seconds a client has to send a request, headers and body (default 10; slower ones are "
                 "disconnected, so that slow clients cannot starve the others)"},
                {"shutdown-grace", "S",
                 "on SIGTERM/SIGINT, seconds running requests may finish before they are cancelled (default 10; "
                 "new ones get 503 at once)"}},
               run_serve);
