// The OpenAI-compatible HTTP server: see server.h for the endpoints, the statuses and the threads. This file wires
// httplib to the engine: the routes, the API key, the error guard around every handler, the model's load, start
// and stop.
//
// Shape of a generation request: the handler parses and validates the body (parse_generation, openai_schema.h),
// submits it to the engine and gets a Job (job.h): the request id plus a small queue that the engine thread's sink
// pushes TokenEvents into (push never waits for the handler). The handler thread drains the queue, in short waits
// (kPollInterval) so that a stopping server is noticed, and renders the events with a Reply (openai_reply.h): the
// whole response at the end, or one SSE chunk per batch of events (sse.h). A Job dropped before its finish event
// (client gone, error, server stopping) cancels its request, which frees its pages at the engine's next step.
// /metrics is rendered by server_metrics.h.
#include "serve/server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/log.h"
#include "data/chat/chat_template.h"
#include "data/tokenize/tokenizer.h"
#include "serve/http_connections.h"
#include "serve/job.h"
#include "serve/openai_reply.h"
#include "serve/openai_schema.h"
#include "serve/server_metrics.h"
#include "serve/sse.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using namespace serve;  // the request and response schema, the job, SSE and /metrics: the headers above

// Compares without an early exit, so that the time taken does not tell how much of a key was right.
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b[i]));
  return diff == 0;
}

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) {
  reply_json(res, e.status, error_json(e));
  if (e.status == 429) res.set_header("Retry-After", "1");
}

}  // namespace

// ---- the server ---------------------------------------------------------------------------------------------------

struct Server::Impl {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  ServerOptions opt;
  std::unique_ptr<ReplicaRouter> router;  // with replicas (data-parallel serving)
  HttpStats stats;                        // for /metrics
  GuardedHttpServer http;
  std::thread http_thread, load_thread;
  int port = -1;
  bool started = false, stopped = false;
  std::atomic<bool> draining{false};  // stop() has begun: new generation requests get 503
  std::atomic<bool> stopping{false};  // the grace is over: running requests end too
  // Generation requests whose answer is not yet written (a stream: until its provider is dropped). The grace waits
  // for these, not only for the engine: a sequence leaves the engine before its handler has sent the last token.
  std::atomic<int> answering{0};
  struct Answering {
    std::atomic<int>& n;
    explicit Answering(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
    Answering(const Answering&) = delete;
    Answering& operator=(const Answering&) = delete;
    ~Answering() { n.fetch_sub(1); }
  };
  const int64_t created = unix_now();

  mutable std::mutex mu;  // guards state, engine, model, load_error
  State state = State::kLoading;
  std::shared_ptr<Engine> engine;
  std::shared_ptr<const InferenceModel> model;
  std::string load_error;

  explicit Impl(ServerOptions o)
      : opt(std::move(o)),
        http(std::chrono::milliseconds(int64_t(opt.request_timeout_s * 1000)), stats.connections_timed_out) {
    if (opt.model_name.empty()) opt.model_name = default_model_name(opt.model_dir);
    if (!opt.replicas.empty()) router = std::make_unique<ReplicaRouter>(opt.replicas);
  }

  // An engine's place in the router, released when the request ends (for a stream: with its provider).
  struct RouteSlot {
    ReplicaRouter& router;
    const size_t engine;
    explicit RouteSlot(ReplicaRouter& r) : router(r), engine(r.acquire()) {}
    RouteSlot(const RouteSlot&) = delete;
    RouteSlot& operator=(const RouteSlot&) = delete;
    ~RouteSlot() { router.release(engine); }
  };

  // A validated generation request for replica slot->engine: forwarded as it came, the answer relayed (a stream
  // chunk by chunk); the client going away closes the forwarded connection, which cancels it on the replica.
  void forward(const httplib::Request& req, httplib::Response& res, std::shared_ptr<RouteSlot> slot, bool stream) {
    auto call = std::make_shared<ReplicaCall>(router->replica(slot->engine), req.path, req.body);
    auto client_gone = [this] {
      if (stopping) throw ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
      if (GuardedHttpServer::peer_closed())
        throw ApiError(499, "the client closed the connection", "invalid_request_error", "", "client_closed");
    };
    int status = 0;
    while ((status = call->status(kPollInterval)) == 0) client_gone();
    if (status < 0)
      throw ApiError(503, str("replica ", slot->engine, " did not answer: ", call->error()), "server_error", "",
                     "replica_unavailable");
    std::string type = call->content_type();
    if (type.empty()) type = "application/json";
    if (!stream || status != 200) {
      std::string body;
      while (call->take(body, kPollInterval)) client_gone();
      res.status = status;
      if (status == 429) res.set_header("Retry-After", "1");
      res.set_content(body, type);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(type, [call, slot](size_t, httplib::DataSink& sink) {
      std::string part;
      while (call->take(part, kPollInterval)) {
        if (!part.empty() && !sink.write(part.data(), part.size())) {
          call->cancel();  // the client went away
          return false;
        }
        part.clear();
      }
      sink.done();
      return true;
    });
  }

  // Data-parallel serving: waits until every replica answers /health with 200 (a failed load there fails this
  // server's load with its message).
  void wait_for_replicas() {
    for (size_t i = 1; i <= opt.replicas.size(); ++i) {
      const ReplicaAddress& r = opt.replicas[i - 1];
      for (;;) {
        MYRIAD_REQUIRE(!draining, kIo, "the server stopped while replica ", i, " was loading");
        httplib::Client client(r.host, r.port);
        client.set_connection_timeout(2, 0);
        client.set_read_timeout(5, 0);
        const httplib::Result got = client.Get("/health");
        if (got && got->status == 200) break;
        if (got && got->status == 503) {
          const json health = json::parse(got->body, nullptr, false);
          MYRIAD_REQUIRE(!(string_member(health, "status") == "error"), kIo, "replica ", i, " (", r.host, ":", r.port,
                         ") failed to load: ", std::string(string_member(health, "message")));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  // The engine, or 503 while loading / after a failed load / while stopping.
  std::shared_ptr<Engine> require_engine() const {
    if (draining) throw ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
    std::lock_guard<std::mutex> lock(mu);
    if (state == State::kFailed)
      throw ApiError(503, str("the model failed to load: ", load_error), "server_error", "", "model_load_failed");
    if (!engine) throw ApiError(503, "the model is still loading", "server_error", "", "model_loading");
    return engine;
  }

  void check_api_key(const httplib::Request& req) const {
    if (opt.api_key.empty()) return;
    const std::string got = req.get_header_value("Authorization");
    if (constant_time_equal(got, "Bearer " + opt.api_key)) return;
    throw ApiError(
        401,
        got.empty() ? "missing API key: send the header 'Authorization: Bearer <key>'" : "incorrect API key provided",
        "invalid_request_error", "", "invalid_api_key");
  }

  // Every handler runs inside this: any exception becomes an error response, never a dead server.
  Handler guarded(bool v1, Handler fn) {
    return [this, v1, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      GuardedHttpServer::request_started();  // the request has been read: its deadline no longer applies
      try {
        if (v1) check_api_key(req);
        fn(req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const Error& e) {
        reply_error(res, from_error(e));
      } catch (const std::bad_alloc&) {
        reply_error(res, ApiError(503, "out of memory", "server_error", "", "out_of_memory"));
      } catch (const std::exception& e) {
        reply_error(res, ApiError(500, str("internal error: ", e.what()), "server_error"));
      } catch (...) {
        reply_error(res, ApiError(500, "internal error", "server_error"));
      }
    };
  }

  // Submits; the engine's refusals become 400 (with context_length_exceeded for a prompt that does not fit) or 429.
  std::unique_ptr<Job> submit(const std::shared_ptr<Engine>& e, const ParsedRequest& p, const InferenceModel& m) {
    try {
      return std::make_unique<Job>(e, p.gen);
    } catch (const Error& err) {
      ApiError api = from_error(err);
      const int64_t context = m.config().max_position_embeddings;
      if (err.kind() == ErrorKind::kValue && int64_t(p.gen.prompt.size()) + p.gen.max_tokens > context) {
        api.code = "context_length_exceeded";
        api.param = p.chat ? "messages" : "prompt";
      }
      throw api;
    }
  }

  void handle_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
    auto answering_now = std::make_shared<Answering>(answering);
    const json body = parse_body(req.body);
    std::shared_ptr<Engine> eng = require_engine();
    const InferenceModel& m = eng->model();
    ParsedRequest p = parse_generation(body, chat, m, opt, req.body);
    std::shared_ptr<RouteSlot> slot;
    if (router) {
      slot = std::make_shared<RouteSlot>(*router);
      if (slot->engine > 0) return forward(req, res, slot, p.stream);
    }
    std::unique_ptr<Job> job = submit(eng, p, m);
    auto reply = std::make_shared<Reply>(p, m.tokenizer(), opt.model_name);

    if (!p.stream) {
      std::vector<TokenEvent> events;
      for (;;) {
        events.clear();
        job->take(events, kPollInterval);
        // Tokens already taken are answered before the stop is: a request that finished within the grace is a 200.
        for (const TokenEvent& e : events) {
          reply->add(e);
          if (e.finish == FinishReason::kNone) continue;
          job->set_finished();
          if (e.finish != FinishReason::kStop && e.finish != FinishReason::kLength) throw finish_error(e, stopping);
          reply_json(res, 200, reply->full(finish_reason_name(e.finish)));
          return;
        }
        if (stopping) throw ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
        // A client that hung up is not waited for: the job, dropped with this throw, cancels the request and frees
        // its pages (499, nginx's "client closed request", reaches only the metrics).
        if (GuardedHttpServer::peer_closed())
          throw ApiError(499, "the client closed the connection", "invalid_request_error", "", "client_closed");
      }
    }

    // Streaming: the provider runs on this worker thread after the handler returns; it owns the job (a shared_ptr,
    // as httplib copies the provider), so that the job is dropped, and cancelled if unfinished, with the response.
    std::shared_ptr<Job> shared_job(std::move(job));
    const bool include_usage = p.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, shared_job, reply, chat, include_usage, slot,
                                                           answering_now](size_t, httplib::DataSink& sink) {
      try {
        return stream(*shared_job, *reply, chat, include_usage, sink, stopping, stats.streams_aborted);
      } catch (...) {  // never into httplib: end the connection (the job cancels when dropped)
        return false;
      }
    });
  }

  void handle_tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const InferenceModel& m = eng->model();
    const std::vector<int32_t> ids = parse_tokenize(body, m, opt, req.body);
    reply_json(res, 200,
               json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.config().max_position_embeddings}});
  }

  void handle_detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const Tokenizer& tok = eng->model().tokenizer();
    reply_json(res, 200, json{{"prompt", tok.decode(parse_detokenize(body, tok, opt.model_name))}});
  }

  // Sequence state files by name (ServerOptions::state_dir): the file's path; a 404 when the endpoints are off, a 400
  // for a name that is not a plain file name.
  std::pair<std::string, std::string> state_file(const json& body) const {
    if (opt.state_dir.empty())
      throw ApiError(404, "sequence state files are off: start the server with --state-dir DIR",
                     "invalid_request_error");
    if (router)
      throw ApiError(400, "sequence state files with --dp: each replica has its own prefix cache",
                     "invalid_request_error");
    const auto it = body.find("filename");
    if (it == body.end() || !it->is_string())
      throw ApiError(400, "give 'filename' (a string): the state file's name in the state directory",
                     "invalid_request_error", "filename");
    const std::string name = it->get<std::string>();
    const bool plain =
        !name.empty() && name.size() <= 200 && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        });
    if (!plain)
      throw ApiError(400,
                     str("filename '", name.substr(0, 64),
                         "': a plain name of letters, digits, '.', '_' and '-' (not starting with '.'), "
                         "at most 200 characters"),
                     "invalid_request_error", "filename");
    return {name, (fs::path(opt.state_dir) / name).string()};
  }

  // POST /state/save {"filename", "prompt" | "messages"}: the engine's longest prefix snapshot of that prompt (sent
  // in an earlier request) written to the file.
  void handle_state_save(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const auto [name, path] = state_file(body);
    const std::vector<int32_t> ids = parse_tokenize(body, eng->model(), opt, req.body);
    const int64_t n = eng->save_prefix(ids, path);
    if (n == 0)
      throw ApiError(400,
                     str("the server holds no prefix snapshot of this prompt (", ids.size(),
                         " tokens): send it in a request first (snapshots are taken every --prefix-every ",
                         eng->options().prefix_every, " tokens)"),
                     "invalid_request_error", "prompt");
    reply_json(res, 200,
               json{{"filename", name}, {"tokens", n}, {"prompt_tokens", ids.size()}, {"bytes", fs::file_size(path)}});
  }

  // POST /state/load {"filename"}: the file pinned in the engine's prefix cache.
  void handle_state_load(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const auto [name, path] = state_file(body);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec))
      throw ApiError(404, str("no state file '", name, "' in the state directory"), "invalid_request_error",
                     "filename");
    int64_t n = 0;
    try {
      n = eng->load_prefix(path);
    } catch (const Error& e) {
      std::string why = e.what();  // named by the client's name, not the server's path
      for (size_t at = why.find(path); at != std::string::npos; at = why.find(path)) why.replace(at, path.size(), name);
      throw ApiError(400, why, "invalid_request_error", "filename");
    }
    reply_json(res, 200, json{{"filename", name}, {"tokens", n}});
  }

  std::shared_ptr<Engine> engine_if_loaded() const {
    std::lock_guard<std::mutex> lock(mu);
    return engine;
  }

  json model_card() const {
    json card{{"id", opt.model_name}, {"object", "model"}, {"created", created}, {"owned_by", "myriad"}};
    std::lock_guard<std::mutex> lock(mu);
    if (model) card["max_model_len"] = model->config().max_position_embeddings;
    return card;
  }

  void routes() {
    http.Get("/health", guarded(false, [this](const httplib::Request&, httplib::Response& res) {
               std::lock_guard<std::mutex> lock(mu);
               if (draining)
                 reply_json(res, 503, json{{"status", "stopping"}});
               else if (state == State::kReady)
                 reply_json(res, 200, json{{"status", "ok"}, {"model", opt.model_name}});
               else if (state == State::kFailed)
                 reply_json(res, 503, json{{"status", "error"}, {"message", load_error}});
               else
                 reply_json(res, 503, json{{"status", "loading"}});
             }));
    http.Get("/metrics", guarded(false, [this](const httplib::Request&, httplib::Response& res) {
               std::shared_ptr<Engine> eng;
               {
                 std::lock_guard<std::mutex> lock(mu);
                 eng = engine;
               }
               std::string text = metrics_text(stats, eng.get());
               if (router) {
                 text +=
                     "# HELP myriad_data_parallel_requests_total Generation requests served by each engine (0: "
                     "this process, 1..: the replicas of --dp).\n# TYPE myriad_data_parallel_requests_total "
                     "counter\n";
                 for (size_t i = 0; i <= router->replicas(); ++i)
                   text += str("myriad_data_parallel_requests_total{engine=\"", i, "\"} ", router->served(i), "\n");
               }
               res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
             }));
    http.Get("/v1/models", guarded(true, [this](const httplib::Request&, httplib::Response& res) {
               reply_json(res, 200, json{{"object", "list"}, {"data", json::array({model_card()})}});
             }));
    http.Get(R"(/v1/models/(.+))", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
               const std::string id = req.matches[1];
               if (id != opt.model_name)
                 throw ApiError(404,
                                str("the model '", id, "' does not exist: this server serves '", opt.model_name, "'"),
                                "invalid_request_error", "model", "model_not_found");
               reply_json(res, 200, model_card());
             }));
    http.Post("/v1/chat/completions", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
                handle_generation(req, res, true);
              }));
    http.Post("/v1/completions", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
                handle_generation(req, res, false);
              }));
    http.Post("/state/save", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
                handle_state_save(req, res);
              }));
    http.Post("/state/load", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
                handle_state_load(req, res);
              }));
    http.Post("/tokenize", guarded(false, [this](const httplib::Request& req, httplib::Response& res) {
                handle_tokenize(req, res);
              }));
    http.Post("/detokenize", guarded(false, [this](const httplib::Request& req, httplib::Response& res) {
                handle_detokenize(req, res);
              }));
    // Runs once the request line and headers are read, before the body: the header byte budget ends there.
    http.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
      GuardedHttpServer::headers_read();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    // Responses of httplib's own (no route, body too large, bad request line) in OpenAI's shape too.
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = str("HTTP ", res.status);
          std::string code;
          if (res.status == 404) {
            message = str("no route for ", req.method, " ", req.path);
            code = "not_found";
          } else if (res.status == 413) {
            message = "the request body is too large";
          } else if (res.status == 400) {
            message = str("bad HTTP request: ", req.method, " ", req.path);
          }
          reply_json(res, res.status,
                     error_json(ApiError(res.status, message,
                                         res.status >= 500 ? "server_error" : "invalid_request_error", "", code)));
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      reply_error(res, ApiError(500, "internal error", "server_error"));
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(stats.mu);
      ++stats.counts[{endpoint_label(req.path), res.status}];
    });
  }

  void load() {
    try {
      std::shared_ptr<const InferenceModel> m =
          opt.loader ? opt.loader() : InferenceModel::load(opt.model_dir, {}, opt.tokenizer);
      MYRIAD_REQUIRE(m != nullptr, kValue, "the model loader returned no model");
      auto e = std::make_shared<Engine>(m, opt.engine);
      for (const std::string& path : opt.load_states) {
        const int64_t n = e->load_prefix(path);
        log_info("loaded the state of ", n, " tokens from ", path);
      }
      e->start();
      wait_for_replicas();
      std::lock_guard<std::mutex> lock(mu);
      model = std::move(m);
      engine = std::move(e);
      state = State::kReady;
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      load_error = e.what();
      state = State::kFailed;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      load_error = "unknown error";
      state = State::kFailed;
    }
  }
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() {
  stop();
}

void Server::start() {
  Impl& s = *impl_;
  MYRIAD_REQUIRE(!s.started, kValue, "server: start() called twice");
  s.started = true;
  ::signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the process
  MYRIAD_REQUIRE(s.opt.max_connections >= 1, kValue, "server: max_connections must be at least 1, got ",
                 s.opt.max_connections);
  MYRIAD_REQUIRE(s.opt.request_timeout_s > 0 && s.opt.shutdown_grace_s >= 0, kValue,
                 "server: request_timeout_s must be > 0 and shutdown_grace_s >= 0, got ", s.opt.request_timeout_s,
                 " and ", s.opt.shutdown_grace_s);
  const int max_connections = s.opt.max_connections;
  s.http.new_task_queue = [max_connections] { return new ConnectionThreads(max_connections); };
  s.http.set_payload_max_length(s.opt.max_body_bytes);
  s.routes();
  errno = 0;
  if (s.opt.port == 0) {
    s.port = s.http.bind_to_any_port(s.opt.host);
  } else {
    s.port = s.http.bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1;
  }
  if (s.port < 0) {
    const int err = errno;
    throw_error(ErrorKind::kIo, "server: cannot listen on ", s.opt.host, ":", s.opt.port,
                err ? str(" (", std::strerror(err), ")") : std::string());
  }
  (void)s.http.set_listen_backlog(std::min(s.opt.max_connections, 4096));  // the default of 5 stays otherwise
  s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
  s.load_thread = std::thread([&s] { s.load(); });
}

void Server::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.draining = true;  // new generation requests: 503
  // The grace: running and queued requests may finish (the engine's counts and the handlers still answering reach
  // zero) for shutdown_grace_s.
  if (const std::shared_ptr<Engine> e = s.engine_if_loaded()) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(s.opt.shutdown_grace_s * 1000));
    for (;;) {
      const EngineMetrics m = e->metrics();
      if ((m.running == 0 && m.waiting == 0 && s.answering == 0) || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  s.stopping = true;  // handlers waiting for tokens answer 503 / end their streams within kPollInterval
  s.http.stop();
  if (s.http_thread.joinable()) s.http_thread.join();  // joins the handler threads too
  if (s.load_thread.joinable()) s.load_thread.join();
  std::shared_ptr<Engine> e;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    e = s.engine;
    s.state = State::kStopped;
  }
  if (e) e->stop();
}

int Server::port() const {
  return impl_->port;
}

Server::State Server::state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->state;
}

std::string Server::load_error() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->load_error;
}

std::string default_model_name(const std::string& model_dir) {
  fs::path p(model_dir);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "runs/x/" -> "runs/x"
  // A run's checkpoint (RUN/checkpoints/step-NNNNNN) is served under the run's name, not the step's.
  const std::string base = p.filename().string();
  const bool step = base.size() > 5 && base.compare(0, 5, "step-") == 0 &&
                    base.find_first_not_of("0123456789", 5) == std::string::npos;
  if (step && p.parent_path().filename() == "checkpoints") p = p.parent_path().parent_path();
  std::string name = p.filename().string();
  return name.empty() || name == "." || name == ".." ? "myriad" : name;
}

const std::string& Server::model_name() const {
  return impl_->opt.model_name;
}

const ServerOptions& Server::options() const {
  return impl_->opt;
}

std::shared_ptr<Engine> Server::engine() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->engine;
}

}  // namespace myriad
