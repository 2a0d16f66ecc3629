// `myriad serve --model DIR [--host H] [--port P] [--api-key KEY] ...`: the OpenAI-compatible HTTP server
// (serve/server.h). It listens at once (GET /health answers 503 while the model loads), loads the model in the
// background, prints one line when it is ready, and stops cleanly on SIGINT or SIGTERM (streams end, waiting
// requests get 503). A model that fails to load ends the command with status 1.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>

#include "cli.h"
#include "core/error.h"
#include "dist/expert_parallel.h"
#include "dist/mpi_communicator.h"
#include "dist/parallel_dims.h"
#include "engine_flags.h"
#include "serve/expert_server.h"
#include "serve/sequence_server.h"
#include "serve/server.h"

namespace {

// Announces the server, prints one line when it is ready, and runs until SIGINT / SIGTERM (then stops it: 0) or
// a failed load (1; under mpirun the whole job ends with it: the other ranks wait on this one).
int run_until_stopped(const sigset_t& stop_signals, myriad::Server& server, const std::string& who, bool in_job) {
  const myriad::ServerOptions& opt = server.options();
  std::printf("%s: listening on http://%s:%d (model '%s' loading from %s)\n", who.c_str(), opt.host.c_str(),
              server.port(), server.model_name().c_str(), opt.model_dir.c_str());
  std::fflush(stdout);
  bool announced = false;
  for (;;) {
    const timespec wait{0, 200'000'000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      std::printf("%s: %s: stopping\n", who.c_str(), sig == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stdout);
      break;
    }
    const myriad::Server::State state = server.state();
    if (state == myriad::Server::State::kFailed) {
      const std::string why = server.load_error();
      server.stop();
      std::fprintf(stderr, "%s: cannot load the model from %s: %s\n", who.c_str(), opt.model_dir.c_str(), why.c_str());
      if (in_job) myriad::mpi_abort(1);
      return 1;
    }
    if (state == myriad::Server::State::kReady && !announced) {
      announced = true;
      const auto engine = server.engine();
      const myriad::ModelConfig& c = engine->model().config();
      std::printf("%s: ready: model '%s' (%lld layers, vocab %lld, context %lld), cache %lld MiB, max batch %lld%s\n",
                  who.c_str(), server.model_name().c_str(), static_cast<long long>(c.num_hidden_layers),
                  static_cast<long long>(c.vocab_size), static_cast<long long>(c.max_position_embeddings),
                  static_cast<long long>(opt.engine.cache_mb), static_cast<long long>(opt.engine.max_batch),
                  opt.api_key.empty() ? "" : ", API key required on /v1/*");
      std::fflush(stdout);
    }
  }
  server.stop();
  return 0;
}

// The mpirun job's world for `--<flag> n`, with n checked against its ranks on every rank (one message for the
// job) and the ranks' executables and start compared (dist/parallel_dims.h).
myriad::Communicator& job_world(const char* flag, int n, const char* why) {
  myriad::Communicator& world = myriad::mpi_world();
  myriad::check_on_all_ranks(world, [&] {
    MYRIAD_REQUIRE(n == world.size(), kConfig, "--", flag, " ", n, " but this job has ", world.size(), " ranks: ", why,
                   " (mpirun -np ", world.size(), " ... --", flag, " ", world.size(), ")");
  });
  myriad::start_ranks(world);
  return world;
}

// Data-parallel serving's rendezvous: every replica's (ranks 1..) advertised address reaches rank 0 (the bound
// host, or this machine's name for a wildcard, and the port it got). Collective; returns the replicas on rank 0.
std::vector<myriad::ReplicaAddress> gather_replicas(myriad::Communicator& world, const myriad::Server* replica,
                                                    const std::string& replica_host, const std::string& key) {
  std::array<char, 256> host{};
  std::string advertised = replica_host;
  if (advertised == "0.0.0.0" || advertised == "::") {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    advertised = name;
  }
  advertised.copy(host.data(), host.size() - 1);
  std::vector<char> hosts(host.size() * size_t(world.size()));
  world.all_gather(host.data(), hosts.data(), int64_t(host.size()), myriad::DType::kU8);
  std::vector<int64_t> ports(size_t(world.size()));
  const int64_t port = replica ? replica->port() : 0;
  world.all_gather(&port, ports.data(), 1, myriad::DType::kI64);
  std::vector<myriad::ReplicaAddress> replicas;
  for (int r = 1; r < world.size(); ++r)
    replicas.push_back({std::string(hosts.data() + size_t(r) * host.size()), int(ports[size_t(r)]), key});
  return replicas;
}

int run_serve(const myriad::cli::Args& args) {
  const auto dir = args.get("model");
  MYRIAD_REQUIRE(dir.has_value(), kValue, "serve needs --model DIR (see myriad serve --help)");
  MYRIAD_REQUIRE(args.positional().empty(), kValue, "serve takes no positional arguments, got '", args.positional()[0],
                 "'");
  myriad::ServerOptions opt;
  opt.model_dir = *dir;
  opt.tokenizer = args.get_or("tokenizer", "");
  opt.model_name = args.get_or("served-model-name", args.get_or("model-name", ""));
  opt.host = args.get_or("host", "127.0.0.1");
  opt.port = int(args.get_int("port", 8080, 0, 65535));
  opt.api_key = args.get_or("api-key", "");
  if (opt.api_key.empty()) {
    if (const char* k = std::getenv("MYRIAD_API_KEY")) opt.api_key = k;
  }
  myriad::EngineOptions& e = opt.engine;
  e = myriad::cli::engine_options(args, e);
  e.max_batch = args.get_int("max-batch", e.max_batch, 1, 4096);
  e.max_waiting = args.get_int("max-waiting", e.max_waiting, 0, 1 << 20);
  opt.state_dir = args.get_or("state-dir", "");
  if (!opt.state_dir.empty()) std::filesystem::create_directories(opt.state_dir);
  opt.load_states = myriad::cli::state_files(args);
  opt.default_max_tokens = args.get_int("default-max-tokens", opt.default_max_tokens, 1, 1 << 30);
  opt.strict_tools = args.has("strict-tools");
  opt.max_connections = int(args.get_int("max-connections", opt.max_connections, 1, 1 << 16));
  opt.request_timeout_s = args.get_double("request-timeout", opt.request_timeout_s, 0.001, 86400);
  opt.shutdown_grace_s = args.get_double("shutdown-grace", opt.shutdown_grace_s, 0, 86400);
  opt.max_images = args.get_int("max-images", opt.max_images, 0, 1 << 16);
  opt.image_limits.max_bytes = args.get_int("max-image-mb", opt.image_limits.max_bytes >> 20, 1, 1 << 12) << 20;
  opt.image_limits.max_pixels = args.get_int("max-image-pixels", opt.image_limits.max_pixels, 1, int64_t(1) << 32);

  // SIGINT / SIGTERM are taken here with sigtimedwait: block them before any thread starts (threads inherit it).
  // Expert followers block them too: mpirun passes them to every rank, and a follower ends when rank 0, stopping,
  // tells it to (a clean exit 0 for the whole job).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const int ep = int(args.get_int("ep", 1, 1, 1 << 20)), sp = int(args.get_int("sp", 1, 1, 1 << 20)),
            dp = int(args.get_int("dp", 1, 1, 1 << 20));
  const int64_t sp_min = args.get_int("sp-min-tokens", 1024, 1, int64_t(1) << 40);
  MYRIAD_REQUIRE(int(ep > 1) + int(sp > 1) + int(dp > 1) <= 1, kValue, "serve: --dp ", dp, ", --ep ", ep, " and --sp ",
                 sp, ": one of them (data-, expert- and sequence-parallel serving each take every rank)");
  // Under mpirun with --dp N (serve/replica_proxy.h): every rank serves the whole model with its own engine; rank
  // 0 is the front, the others internal replicas it forwards requests to.
  if (dp > 1) {
    myriad::Communicator& world = job_world("dp", dp, "every rank serves a replica");
    const std::string replica_host = args.get_or("replica-host", "127.0.0.1");
    // The replicas answer only rank 0: a random key, never printed.
    std::string key(32, '0');
    if (world.rank() == 0) {
      std::random_device rd;
      for (char& c : key) c = "0123456789abcdef"[rd() % 16];
    }
    world.broadcast(key.data(), int64_t(key.size()), myriad::DType::kU8, 0);
    std::unique_ptr<myriad::Server> replica;
    if (world.rank() != 0) {
      myriad::ServerOptions r = opt;
      r.host = replica_host;
      r.port = 0;
      r.api_key = key;
      replica = std::make_unique<myriad::Server>(r);
      replica->start();
    }
    const std::vector<myriad::ReplicaAddress> replicas = gather_replicas(world, replica.get(), replica_host, key);
    if (replica)
      return run_until_stopped(stop_signals, *replica, myriad::str("myriad serve (replica ", world.rank(), ")"), true);
    opt.replicas = replicas;
  }
  // Under mpirun with --sp N (serve/sequence_server.h): every rank holds the whole model; rank 0 serves, and long
  // prompts are prefilled by all of them side by side.
  std::unique_ptr<myriad::SequenceParallelServing> seq_parallel;
  const myriad::InferenceModel* served = nullptr;  // the loaded model, for the engine's long prefills
  if (sp > 1) {
    myriad::Communicator& world = job_world("sp", sp, "serving splits long prompts over every rank");
    seq_parallel = std::make_unique<myriad::SequenceParallelServing>(world);
    if (world.rank() != 0) {
      seq_parallel->follow(*myriad::InferenceModel::load(opt.model_dir, {}, opt.tokenizer));
      return 0;
    }
    opt.engine.long_prefill_min = sp_min;
    opt.engine.long_prefill = [&](myriad::SequenceState& state, std::span<const int32_t> prompt) {
      return seq_parallel->prefill(*served, state, prompt);
    };
    opt.loader = [&]() -> std::shared_ptr<const myriad::InferenceModel> {
      auto model = myriad::InferenceModel::load(opt.model_dir, {}, opt.tokenizer);
      const int64_t need = myriad::SequenceParallelServing::min_tokens(model->config(), sp);
      MYRIAD_REQUIRE(sp_min >= need, kValue, "--sp-min-tokens ", sp_min, " is below what ", sp,
                     " shards need (each at least the short convolution's window - 1 tokens): at least ", need);
      served = model.get();
      return model;
    };
  }
  // Under mpirun with --ep N (serve/expert_server.h): rank 0 serves, the others hold their experts and serve
  // rank 0's token copies until it stops.
  const std::unique_ptr<myriad::ExpertParallelJob> job =
      seq_parallel || dp > 1 ? nullptr : myriad::start_expert_parallel_job(ep);
  std::unique_ptr<myriad::ExpertLeaderDispatcher> leader;
  if (job) {
    auto filter = [&](const myriad::ModelConfig& c) { return job->filter(c); };
    if (!job->root()) {
      const auto model = myriad::InferenceModel::load(opt.model_dir, filter, opt.tokenizer);
      myriad::run_expert_follower(*model, *job->dispatcher, *job->world);
      return 0;
    }
    opt.loader = [&, filter]() -> std::shared_ptr<const myriad::InferenceModel> {
      auto model = myriad::InferenceModel::load(opt.model_dir, filter, opt.tokenizer);
      leader = std::make_unique<myriad::ExpertLeaderDispatcher>(*job->world, *job->groups.ep_group, model->config());
      model->set_moe_dispatcher(leader.get());
      return model;
    };
  }

  myriad::Server server(opt);
  server.start();
  const int rc = run_until_stopped(stop_signals, server, "myriad serve", job || seq_parallel || dp > 1);
  if (rc != 0) return rc;
  if (leader) leader->stop();  // the engine is joined: the followers' loop ends
  if (seq_parallel) seq_parallel->stop();
  std::printf("myriad serve: stopped\n");
  return 0;
}

}  // namespace

MYRIAD_COMMAND(
    "serve", "serve a model over an OpenAI-compatible HTTP API (chat, completions, streaming)",
    "myriad serve --model DIR [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--cache-mb N] "
    "[--max-batch N] [--load-state FILES] [--state-dir DIR]",
    myriad::cli::with_engine_options(
        {{"model", "DIR", "model directory (config.json, safetensors, tokenizer/) or a training run"},
         {"tokenizer", "DIR|FILE",
          "use this tokenizer instead of the model's own (tokenizer.model, tiktoken.model or tokenizer.json)"},
         {"model-name", "NAME",
          "the model id clients use (default: DIR's base name; for a run's checkpoint, the run's name)"},
         {"served-model-name", "NAME", "the same as --model-name (vLLM's spelling)"},
         {"host", "HOST", "address to bind (default 127.0.0.1: this machine only)"},
         {"port", "PORT", "port (default 8080; 0: any free port, printed at start)"},
         {"api-key", "KEY", "require 'Authorization: Bearer KEY' on /v1/* (default: $MYRIAD_API_KEY)"},
         {"max-batch", "N", "sequences decoded together (default 16)"},
         {"state-dir", "DIR",
          "where POST /state/save writes and POST /state/load reads sequence state files by name (default: those "
          "endpoints are off)"},
         {"ep", "N",
          "under mpirun -np N: rank 0 serves, every rank holds 1/N of the routed experts (the others serve "
          "rank 0's token copies)"},
         {"dp", "N",
          "under mpirun -np N: every rank serves the whole model with its own engine; rank 0 is the front "
          "and sends each request to the engine with the fewest in flight (N batches decoded at once)"},
         {"replica-host", "HOST",
          "with --dp: the address the replicas (ranks 1..) listen on, for rank 0 only (default 127.0.0.1; "
          "0.0.0.0 across machines, advertised by host name; they require a random key)"},
         {"sp", "N",
          "under mpirun -np N: rank 0 serves, every rank holds the whole model, and a long prompt is "
          "prefilled by all N side by side (its time to first token ~N times shorter)"},
         {"sp-min-tokens", "N",
          "with --sp: prompts of at least N tokens (and no prefix-cache hit) are prefilled by every rank "
          "(default 1024); shorter ones in chunks on rank 0"},
         {"max-waiting", "N", "queued requests before 429 (default 64)"},
         {"default-max-tokens", "N", "chat max_tokens when the request has none (default 1024)"},
         {"strict-tools", "",
          "constrain every tool call to its tool's schema (as if each tool had \"strict\": true; myriad's chat "
          "format)"},
         {"max-images", "N", "images per chat request at most (default 16; 0: none accepted)"},
         {"max-image-mb", "N", "an image's encoded size at most, in MiB (default 32)"},
         {"max-image-pixels", "N", "an image's width x height at most, from its header (default 50000000)"},
         {"max-connections", "N", "connections served at once, a thread each (default 1024; more wait for a free one)"},
         {"request-timeout", "S",
          "seconds a client has to send a request, headers and body (default 10; slower ones are "
          "disconnected, so that slow clients cannot starve the others)"},
         {"shutdown-grace", "S",
          "on SIGTERM/SIGINT, seconds running requests may finish before they are cancelled (default 10; "
          "new ones get 503 at once)"}}),
    run_serve);
