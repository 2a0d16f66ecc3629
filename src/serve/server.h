// The OpenAI-compatible HTTP server (docs/design.md §3) over one Engine: cpp-httplib for HTTP, nlohmann for JSON.
//
// Endpoints (bodies are JSON; errors are {"error": {"message", "type", "param", "code"}} with the status below):
//   POST /v1/chat/completions   messages -> chat template (data/chat/chat_template.h) -> generation. User messages may
//     carry images as content parts {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} (PNG,
//     JPEG, BMP, GIF) for a model with a vision tower; a remote http(s) URL is refused (nothing is fetched: SSRF),
//     as are more than max_images, an image over image_limits, or any image for a model without a vision tower
//     (400, param naming the part). The images of the requests that start in an engine step are encoded together;
//     prefix reuse keys them by their decoded content.
//   POST /v1/completions        prompt: a string, a list of one string, token ids, or a list of one list of ids
//     Both: non-streaming, or with "stream": true Server-Sent Events: "data: {json}\n\n" chunks
//     (chat.completion.chunk / text_completion) with one id throughout, the role in the first chat delta,
//     finish_reason on the last choice chunk, a usage chunk (choices: []) when stream_options.include_usage,
//     then "data: [DONE]\n\n". While no token arrives for a second, a comment line ": ping" is sent (SSE clients
//     ignore it); it is how a client that went away is noticed before the next token.
//     Fields: model, max_tokens / max_completion_tokens (> 0; default: chat min(default_max_tokens, context left),
//     completions 16 as OpenAI), temperature, top_p, top_k, min_p, frequency_penalty, presence_penalty,
//     repetition_penalty, seed (default: a random one), stop (string or list), n (1 only), stream,
//     stream_options.include_usage, logprobs + top_logprobs (chat) / logprobs: n (completions), user (ignored);
//     and, beyond OpenAI's set (as vLLM): top_k (-1 or 0: off), min_p, repetition_penalty, ignore_eos (generation
//     continues through <|endoftext|>: for benchmarks and tests).
//     Other fields are ignored, except those whose meaning cannot be honoured (echo, suffix, best_of > 1, tools,
//     a response_format other than text): 400 saying so.
//   GET  /v1/models, /v1/models/{id}   the served model (its id: options.model_name)
//   GET  /health       200 {"status": "ok"} when the model is loaded; 503 while loading (or if the load failed)
//   GET  /metrics      Prometheus text format (HTTP requests by endpoint and status, engine counters, latency
//                      histograms, running / waiting requests, cache bytes; with replicas, requests per engine)
//   POST /tokenize     {"prompt": "..."} or {"messages": [...]} -> {"tokens": [...], "count": n, "max_model_len"}
//   POST /detokenize   {"tokens": [...]} -> {"prompt": "..."}
// Statuses: 400 malformed JSON, wrong types (param names the field), bad values, a prompt too long for the context
// (code context_length_exceeded); 401 a missing or wrong API key (only /v1/*, only with options.api_key);
// 404 an unknown model (code model_not_found) or route; 413 a body over max_body_bytes; 429 the engine's queue is
// full (Retry-After: 1); 503 the model is still loading or the server is stopping; 500 anything else. Every
// handler catches everything: no input stops the server.
//
// Threads: httplib's worker pool runs the handlers (one per connection while it is active); the engine thread
// generates and hands each request's events to its handler through a per-request queue (never blocking the engine
// thread). A handler whose client goes away (a failed write) cancels its request, which frees its pages.
// Connections (serve/http_connections.h): a thread each, up to max_connections; a client has request_timeout_s to
// send each request, so slow clients cannot starve the others.
// A client that goes away is noticed within kPollInterval while it waits for a whole response (its socket reads end
// of file), or at the next write of a stream; its request is cancelled, which frees its pages.
// Leaves out: n > 1, echo, remote image URLs, video, TLS (bind to loopback, or put a proxy in front).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/media/image.h"
#include "serve/engine.h"
#include "serve/replica_proxy.h"

namespace myriad {

struct ServerOptions {
  std::string model_dir;
  std::string tokenizer;   // a tokenizer directory or file instead of the model's own; empty: the model's
  std::string model_name;  // the id clients send as "model"; default: default_model_name(model_dir)
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (Server::port() tells which)
  std::string api_key;  // non-empty: "Authorization: Bearer <api_key>" required on /v1/*
  EngineOptions engine;
  // Sequence state files (infer/sequence_file.h) loaded into the engine's prefix cache before it serves; one that
  // fails (another model's, damaged) fails the load as a bad model does.
  std::vector<std::string> load_states;
  // Where POST /state/save writes and POST /state/load reads sequence state files, by a plain file name (letters,
  // digits, '.', '_', '-'); empty: those endpoints answer 404. Not with replicas (each has its own prefix cache).
  std::string state_dir;
  // Connections served at once, each on its own thread (started when needed; idle ones end); more wait for one.
  int max_connections = 1024;
  // A client must send each request (headers and body) within this many seconds of connecting, or of the end of
  // its previous response; a slower one is disconnected (counted in /metrics), so that slow clients cannot hold
  // the threads the others need.
  double request_timeout_s = 10;
  // On stop (SIGTERM): new generation requests get 503 at once while running ones may finish for up to this many
  // seconds; then whatever still runs is cancelled (streams end, waiting handlers answer 503).
  double shutdown_grace_s = 10;
  size_t max_body_bytes = 16u << 20;  // larger request bodies get 413
  int64_t default_max_tokens = 1024;  // chat requests without max_tokens get min(this, context left)
  // Constrained decoding of tool calls for every request with tools (data/chat/tool_call_grammar.h), as if each tool
  // said "strict": true; without it only requests with a strict tool are constrained.
  bool strict_tools = false;
  // Images in chat requests (image_url parts with data: URIs): at most max_images per request, each within
  // image_limits (encoded bytes; width x height checked from the header before decoding); more is a 400.
  int64_t max_images = 16;
  ImageLimits image_limits;
  // Loads the model; default InferenceModel::load(model_dir). Tests use it to hold or fail the load.
  std::function<std::shared_ptr<const InferenceModel>()> loader;
  // Data-parallel serving (serve/replica_proxy.h): servers of the same model this one forwards generation requests
  // to (each goes to the engine, this one's or a replica's, with the fewest in flight). The server is ready once
  // its own model and every replica are.
  std::vector<ReplicaAddress> replicas;
};

// The served model's id when none is given: the base name of the model directory, or for a run's checkpoint
// (RUN/checkpoints/step-NNNNNN) the run's name; "myriad" when there is none.
std::string default_model_name(const std::string& model_dir);

class Server {
 public:
  enum class State { kLoading, kReady, kFailed, kStopped };

  explicit Server(ServerOptions options);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (kIo when it cannot: port in use, bad host), starts answering on a background thread (health:
  // 503) and loads the model on another; once loaded the engine starts and the state becomes kReady.
  void start();
  // Refuses new generation requests (503), lets running ones finish for up to shutdown_grace_s, then stops accepting
  // connections, ends the remaining streams and waiting handlers (503), stops the engine and joins every thread.
  // Idempotent.
  void stop();

  int port() const;  // the bound port (after start())
  State state() const;
  std::string load_error() const;  // with kFailed: the load's error message
  const std::string& model_name() const;
  const ServerOptions& options() const;
  // The engine once loaded (null before): for tests and the CLI's status line.
  std::shared_ptr<Engine> engine() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace myriad
