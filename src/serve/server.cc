// The OpenAI-compatible HTTP server: see server.h for the endpoints, the statuses and the threads.
//
// Shape of a generation request: the handler parses and validates the body (parse_generation), submits it to the
// engine and gets a Job: the request id plus a small queue that the engine thread's sink pushes TokenEvents into
// (push never waits for the handler). The handler thread drains the queue, in short waits (kPollInterval) so that a
// stopping server is noticed, and renders the events with a Reply: the whole response at the end, or one SSE chunk
// per batch of events. A Job dropped before its finish event (client gone, error, server stopping) cancels its
// request, which frees its pages at the engine's next step.
#include "serve/server.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/tokenizer.h"
#include "serve/chat_template.h"
#include "serve/text_stream.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kMaxJsonDepth = 64;                     // deeper request bodies are refused before parsing
constexpr auto kPollInterval = 100ms;                 // a waiting handler re-checks "stopping" this often
constexpr auto kPingInterval = 1s;                    // an idle stream sends ": ping" this often
constexpr int64_t kCompletionsDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions
constexpr size_t kMaxStopStrings = 16;

// An error answered in OpenAI's shape.
class ApiError : public std::runtime_error {
 public:
  ApiError(int http_status, const std::string& message, std::string error_type = "invalid_request_error",
           std::string error_param = "", std::string error_code = "")
      : std::runtime_error(message),
        status(http_status),
        type(std::move(error_type)),
        param(std::move(error_param)),
        code(std::move(error_code)) {}
  int status;
  std::string type, param, code;
};

ApiError bad_request(const std::string& message, const std::string& param = "", const std::string& code = "") {
  return ApiError(400, message, "invalid_request_error", param, code);
}

// JSON text that is always valid UTF-8 (decoded text may hold invalid bytes: they become U+FFFD).
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json null_if_empty(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json error_json(const ApiError& e) {
  return json{{"error", json{{"message", e.what()},
                             {"type", e.type},
                             {"param", null_if_empty(e.param)},
                             {"code", null_if_empty(e.code)}}}};
}

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) {
  reply_json(res, e.status, error_json(e));
  if (e.status == 429) res.set_header("Retry-After", "1");
}

// The engine's and the library's errors as HTTP errors.
ApiError from_error(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::kValue:
      return bad_request(e.what());
    case ErrorKind::kBusy:
      return ApiError(429, str("server is busy: ", e.what()), "rate_limit_error", "", "server_busy");
    default:
      return ApiError(500, str("internal error (", error_kind_name(e.kind()), "): ", e.what()), "server_error");
  }
}

uint64_t random_u64() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
  }());
  return rng();
}

std::string random_id(const char* prefix) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(random_u64()),
                static_cast<unsigned long long>(random_u64() & 0xffffffffu));
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Compares without an early exit, so that the time taken does not tell how much of a key was right.
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(b[i]));
  return diff == 0;
}

// ---- JSON request bodies ------------------------------------------------------------------------------------------

// Nesting depth of a JSON text (brackets outside strings); checked before parsing so that no body can exhaust a
// stack.
int json_depth(const std::string& s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

json parse_body(const std::string& body) {
  if (json_depth(body) > kMaxJsonDepth)
    throw bad_request(str("malformed JSON: nested deeper than ", kMaxJsonDepth, " levels"), "", "invalid_json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    std::string message = str("malformed JSON: ", e.what());
    if (body.find("NaN") != std::string::npos || body.find("Infinity") != std::string::npos)
      message += " (JSON has no NaN or Infinity)";
    throw bad_request(message, "", "invalid_json");
  }
  if (!j.is_object()) throw bad_request(str("the request body must be a JSON object, got ", j.type_name()));
  return j;
}

// A field that is present and not null (null means "default", as in OpenAI's API).
const json* field(const json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string describe(const json& v) {
  if (v.is_number() || v.is_boolean()) return v.dump();
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

[[noreturn]] void type_error(const std::string& param, const char* expected, const json& got) {
  throw bad_request(str("invalid type for '", param, "': expected ", expected, ", got ", describe(got)), param,
                    "invalid_type");
}

double get_number(const json& v, const std::string& param) {
  if (!v.is_number()) type_error(param, "a number", v);
  return v.get<double>();
}

int64_t get_integer(const json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      throw bad_request(str("'", param, "' = ", u, ": too large"), param);
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {  // 5.0 is accepted as 5
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  type_error(param, "an integer", v);
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) type_error(param, "a boolean", v);
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& param) {
  if (!v.is_string()) type_error(param, "a string", v);
  return v.get_ref<const std::string&>();
}

// messages: [{"role": "...", "content": "..." | [{"type": "text", "text": "..."}] | null}]
std::vector<ChatMessage> parse_messages(const json& v) {
  if (!v.is_array()) type_error("messages", "an array", v);
  if (v.empty()) throw bad_request("'messages' must not be empty", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string at = str("messages[", i, "]");
    if (!m.is_object()) type_error(at, "an object", m);
    const json* role = field(m, "role");
    if (!role) throw bad_request(str("'", at, ".role' is missing"), at + ".role");
    ChatMessage msg{get_string(*role, at + ".role"), ""};
    if (const json* c = field(m, "content")) {
      if (c->is_string()) {
        msg.content = c->get<std::string>();
      } else if (c->is_array()) {
        for (size_t k = 0; k < c->size(); ++k) {
          const json& part = (*c)[k];
          const std::string pat = str(at, ".content[", k, "]");
          if (!part.is_object()) type_error(pat, "an object", part);
          const json* type = field(part, "type");
          const std::string t = type ? get_string(*type, pat + ".type") : "";
          if (t != "text")
            throw bad_request(str("'", pat, ".type' = '", t, "': only text content parts are supported"),
                              pat + ".type");
          const json* text = field(part, "text");
          if (!text) throw bad_request(str("'", pat, ".text' is missing"), pat + ".text");
          msg.content += get_string(*text, pat + ".text");
        }
      } else {
        type_error(at + ".content", "a string or an array of content parts", *c);
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// ---- a generation request -----------------------------------------------------------------------------------------

struct ParsedRequest {
  bool chat = false;
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
};

// Validates the sampling parameters; a bad one is reported with its own field as `param`.
void validate_sampling(const SamplingParams& sp, bool chat) {
  try {
    validate(sp);
    return;
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kValue) throw;
    struct Field {
      const char* name;
      void (*copy)(SamplingParams& to, const SamplingParams& from);
    };
    static const Field kFields[] = {
        {"temperature", [](SamplingParams& t, const SamplingParams& f) { t.temperature = f.temperature; }},
        {"top_k", [](SamplingParams& t, const SamplingParams& f) { t.top_k = f.top_k; }},
        {"top_p", [](SamplingParams& t, const SamplingParams& f) { t.top_p = f.top_p; }},
        {"min_p", [](SamplingParams& t, const SamplingParams& f) { t.min_p = f.min_p; }},
        {"repetition_penalty",
         [](SamplingParams& t, const SamplingParams& f) { t.repetition_penalty = f.repetition_penalty; }},
        {"frequency_penalty",
         [](SamplingParams& t, const SamplingParams& f) { t.frequency_penalty = f.frequency_penalty; }},
        {"presence_penalty",
         [](SamplingParams& t, const SamplingParams& f) { t.presence_penalty = f.presence_penalty; }},
        {"top_logprobs", [](SamplingParams& t, const SamplingParams& f) { t.top_logprobs = f.top_logprobs; }},
    };
    for (const Field& f : kFields) {
      SamplingParams one;
      f.copy(one, sp);
      try {
        validate(one);
      } catch (const Error& e1) {
        const std::string param = std::string(f.name) == "top_logprobs" && !chat ? "logprobs" : f.name;
        throw bad_request(e1.what(), param);
      }
    }
    throw bad_request(e.what());
  }
}

// The bytes of a token as shown in logprobs (whole characters; a partial one becomes U+FFFD).
std::string token_string(const Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "";
  std::string bytes = tok.token_bytes(id);
  return take_complete_utf8(bytes, true);
}

json token_bytes_json(const Tokenizer& tok, int32_t id) {
  json out = json::array();
  if (id < 0 || id >= tok.vocab_size()) return out;
  for (const char c : tok.token_bytes(id)) out.push_back(int(uint8_t(c)));
  return out;
}

// OpenAI reports -9999 where a probability underflows to zero (JSON has no -inf).
double finite_logprob(float lp) {
  return std::isfinite(lp) ? double(lp) : -9999.0;
}

// One request's output as OpenAI JSON: chat.completion(.chunk) or text_completion. Events are added as they come;
// the text and logprobs since the last chunk form the next chunk.
class Reply {
 public:
  Reply(const ParsedRequest& p, const Tokenizer& tok, std::string model)
      : chat_(p.chat),
        logprobs_(p.logprobs),
        include_usage_(p.stream && p.include_usage),
        tok_(tok),
        model_(std::move(model)),
        id_(random_id(p.chat ? "chatcmpl-" : "cmpl-")),
        created_(unix_now()) {
    reset_delta_logprobs();
    all_logprobs_ = delta_logprobs_;
  }

  // The token part of an event (the finish part is the caller's).
  void add(const TokenEvent& e) {
    delta_text_ += e.text;
    text_ += e.text;
    if (e.finish != FinishReason::kNone) {
      usage_ = json{{"prompt_tokens", e.prompt_tokens},
                    {"completion_tokens", e.completion_tokens},
                    {"total_tokens", e.prompt_tokens + e.completion_tokens},
                    {"prompt_tokens_details", json{{"cached_tokens", e.cached_tokens}}}};
    }
    if (!logprobs_ || e.token < 0) return;
    has_delta_logprobs_ = true;
    const std::string s = token_string(tok_, e.token);
    if (chat_) {
      json top = json::array();
      for (const TokenLogprob& t : e.top)
        top.push_back(json{{"token", token_string(tok_, t.token)},
                           {"logprob", finite_logprob(t.logprob)},
                           {"bytes", token_bytes_json(tok_, t.token)}});
      json entry{{"token", s},
                 {"logprob", finite_logprob(e.logprob)},
                 {"bytes", token_bytes_json(tok_, e.token)},
                 {"top_logprobs", std::move(top)}};
      delta_logprobs_["content"].push_back(entry);
      all_logprobs_["content"].push_back(std::move(entry));
    } else {
      json top = json::object();
      for (const TokenLogprob& t : e.top) {
        const std::string k = token_string(tok_, t.token);
        if (!top.contains(k)) top[k] = finite_logprob(t.logprob);  // the most likely of equal strings
      }
      for (json* lp : {&delta_logprobs_, &all_logprobs_}) {
        (*lp)["tokens"].push_back(s);
        (*lp)["token_logprobs"].push_back(finite_logprob(e.logprob));
        (*lp)["top_logprobs"].push_back(top);
        (*lp)["text_offset"].push_back(text_offset_);
      }
      text_offset_ += int64_t(s.size());
    }
  }

  // Streaming: the first chat chunk (the role).
  json role_chunk() const {
    return chunk(json{{"index", 0},
                      {"delta", json{{"role", "assistant"}, {"content", ""}}},
                      {"logprobs", nullptr},
                      {"finish_reason", nullptr}});
  }

  // Streaming: the text and logprobs added since the last call, or nothing.
  std::optional<json> take_delta_chunk() {
    if (delta_text_.empty() && !has_delta_logprobs_) return std::nullopt;
    json choice = chat_ ? json{{"index", 0}, {"delta", json{{"content", delta_text_}}}}
                        : json{{"index", 0}, {"text", delta_text_}};
    choice["logprobs"] = has_delta_logprobs_ ? delta_logprobs_ : json(nullptr);
    choice["finish_reason"] = nullptr;
    delta_text_.clear();
    has_delta_logprobs_ = false;
    reset_delta_logprobs();
    return chunk(std::move(choice));
  }

  // Streaming: the last choice chunk.
  json finish_chunk(const char* reason) const {
    json choice = chat_ ? json{{"index", 0}, {"delta", json::object()}} : json{{"index", 0}, {"text", ""}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = reason;
    return chunk(std::move(choice));
  }

  // Streaming: the usage chunk (no choices).
  json usage_chunk() const {
    json c = chunk_base();
    c["choices"] = json::array();
    c["usage"] = usage_;
    return c;
  }

  // Non-streaming: the whole response.
  json full(const char* reason) const {
    json choice = chat_ ? json{{"index", 0}, {"message", json{{"role", "assistant"}, {"content", text_}}}}
                        : json{{"index", 0}, {"text", text_}};
    choice["logprobs"] = logprobs_ ? all_logprobs_ : json(nullptr);
    choice["finish_reason"] = reason;
    return json{{"id", id_},
                {"object", chat_ ? "chat.completion" : "text_completion"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_}};
  }

 private:
  json chunk_base() const {
    return json{{"id", id_},
                {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", model_}};
  }
  json chunk(json choice) const {
    json c = chunk_base();
    c["choices"] = json::array({std::move(choice)});
    if (include_usage_) c["usage"] = nullptr;
    return c;
  }
  void reset_delta_logprobs() {
    delta_logprobs_ = chat_ ? json{{"content", json::array()}}
                            : json{{"tokens", json::array()},
                                   {"token_logprobs", json::array()},
                                   {"top_logprobs", json::array()},
                                   {"text_offset", json::array()}};
  }

  const bool chat_, logprobs_, include_usage_;
  const Tokenizer& tok_;
  const std::string model_, id_;
  const int64_t created_;
  std::string text_, delta_text_;
  json delta_logprobs_, all_logprobs_, usage_;
  bool has_delta_logprobs_ = false;
  int64_t text_offset_ = 0;
};

// The per-request queue between the engine thread (push: never waits for the reader) and the handler thread.
class EventQueue {
 public:
  void push(const TokenEvent& e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(e);
    }
    cv_.notify_one();
  }
  // Moves out everything queued, waiting up to `timeout` for the first event.
  void take(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    while (!events_.empty()) {
      out.push_back(std::move(events_.front()));
      events_.pop_front();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
};

// A submitted request. Dropping it before its finish event cancels the request (its pages are freed at the
// engine's next step).
class Job {
 public:
  Job(std::shared_ptr<Engine> engine, GenerationRequest request)
      : engine_(std::move(engine)), queue_(std::make_shared<EventQueue>()) {
    id_ = engine_->submit(std::move(request), [q = queue_](const TokenEvent& e) { q->push(e); });
  }
  ~Job() {
    if (!finished_) engine_->cancel(id_);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  void take(std::vector<TokenEvent>& out, std::chrono::milliseconds timeout) { queue_->take(out, timeout); }
  void set_finished() { finished_ = true; }

 private:
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<EventQueue> queue_;
  uint64_t id_ = 0;
  bool finished_ = false;
};

// The error a finished-but-failed request answers with.
ApiError finish_error(const TokenEvent& e, bool stopping) {
  if (e.finish == FinishReason::kError)
    return ApiError(500, str("generation failed: ", e.error), "server_error", "", "generation_error");
  return ApiError(503, stopping ? "the server is stopping" : "the request was cancelled", "server_error", "",
                  "cancelled");
}

std::string sse(const json& j) {
  return "data: " + dump(j) + "\n\n";
}

// Label for /metrics: the known endpoints, else "other" (so that the label set stays bounded).
std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize"};
  for (const char* k : kKnown)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

// ---- the server ---------------------------------------------------------------------------------------------------

struct Server::Impl {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  ServerOptions opt;
  httplib::Server http;
  std::thread http_thread, load_thread;
  int port = -1;
  bool started = false, stopped = false;
  std::atomic<bool> stopping{false};
  const int64_t created = unix_now();

  mutable std::mutex mu;  // guards state, engine, model, load_error
  State state = State::kLoading;
  std::shared_ptr<Engine> engine;
  std::shared_ptr<const InferenceModel> model;
  std::string load_error;

  std::mutex stats_mu;  // guards http_counts
  std::map<std::pair<std::string, int>, uint64_t> http_counts;
  std::atomic<uint64_t> streams_aborted{0};

  explicit Impl(ServerOptions o) : opt(std::move(o)) {
    if (opt.model_name.empty()) {
      fs::path p(opt.model_dir);
      while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "runs/x/" -> "runs/x"
      opt.model_name = p.filename().string();
      if (opt.model_name.empty() || opt.model_name == ".") opt.model_name = "myriad";
    }
  }

  // The engine, or 503 while loading / after a failed load / while stopping.
  std::shared_ptr<Engine> require_engine() const {
    if (stopping) throw ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
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

  void check_model_field(const json& body) const {
    const json* v = field(body, "model");
    if (!v) return;  // optional here: there is only one model
    const std::string& m = get_string(*v, "model");
    if (m != opt.model_name)
      throw ApiError(404, str("the model '", m, "' does not exist: this server serves '", opt.model_name, "'"),
                     "invalid_request_error", "model", "model_not_found");
  }

  ParsedRequest parse_generation(const json& b, bool chat, const InferenceModel& m) const {
    ParsedRequest p;
    p.chat = chat;
    check_model_field(b);
    if (const json* v = field(b, "n")) {
      const int64_t n = get_integer(*v, "n");
      if (n != 1) throw bad_request(str("n = ", n, ": only n = 1 is supported"), "n");
    }
    if (chat) {
      if (const json* v = field(b, "tools"); v && !(v->is_array() && v->empty()))
        throw bad_request("'tools' are not supported by this server", "tools");
      if (field(b, "functions")) throw bad_request("'functions' are not supported by this server", "functions");
      if (const json* v = field(b, "response_format")) {
        const json* t = v->is_object() ? field(*v, "type") : nullptr;
        if (!t || !t->is_string() || t->get<std::string>() != "text")
          throw bad_request("only response_format {\"type\": \"text\"} is supported", "response_format");
      }
    } else {
      if (const json* v = field(b, "echo"); v && get_bool(*v, "echo"))
        throw bad_request("'echo' is not supported by this server", "echo");
      if (const json* v = field(b, "suffix"); v && !get_string(*v, "suffix").empty())
        throw bad_request("'suffix' is not supported by this server", "suffix");
      if (const json* v = field(b, "best_of"); v && get_integer(*v, "best_of") != 1)
        throw bad_request("best_of: only 1 is supported", "best_of");
    }
    if (const json* v = field(b, "ignore_eos")) p.gen.stop_at_eos = !get_bool(*v, "ignore_eos");
    if (const json* v = field(b, "stream")) p.stream = get_bool(*v, "stream");
    if (const json* v = field(b, "stream_options")) {
      if (!v->is_object()) type_error("stream_options", "an object", *v);
      if (const json* u = field(*v, "include_usage")) p.include_usage = get_bool(*u, "stream_options.include_usage");
    }

    // Sampling.
    SamplingParams& sp = p.gen.sampling;
    auto number = [&](const char* name, float& to) {
      if (const json* v = field(b, name)) {
        const double d = get_number(*v, name);  // out of float's range: +-inf (a plain cast would be undefined)
        constexpr float kInf = std::numeric_limits<float>::infinity();
        to = std::fabs(d) <= double(std::numeric_limits<float>::max()) ? float(d) : (d > 0 ? kInf : -kInf);
      }
    };
    number("temperature", sp.temperature);
    number("top_p", sp.top_p);
    number("min_p", sp.min_p);
    number("frequency_penalty", sp.frequency_penalty);
    number("presence_penalty", sp.presence_penalty);
    number("repetition_penalty", sp.repetition_penalty);
    if (const json* v = field(b, "top_k")) {
      sp.top_k = get_integer(*v, "top_k");
      if (sp.top_k == -1) sp.top_k = 0;  // -1: off (vLLM's convention)
    }
    if (const json* v = field(b, "seed"))
      sp.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(get_integer(*v, "seed"));
    else
      sp.seed = random_u64();
    if (chat) {
      if (const json* v = field(b, "logprobs")) p.logprobs = get_bool(*v, "logprobs");
      if (const json* v = field(b, "top_logprobs")) {
        sp.top_logprobs = get_integer(*v, "top_logprobs");
        if (sp.top_logprobs > 0 && !p.logprobs)
          throw bad_request("top_logprobs needs \"logprobs\": true", "top_logprobs");
      }
    } else if (const json* v = field(b, "logprobs")) {
      p.logprobs = true;
      sp.top_logprobs = get_integer(*v, "logprobs");
    }
    validate_sampling(sp, chat);

    if (const json* v = field(b, "stop")) {
      if (v->is_string()) {
        p.gen.stop.push_back(v->get<std::string>());
      } else if (v->is_array()) {
        if (v->size() > kMaxStopStrings)
          throw bad_request(str("'stop' has ", v->size(), " strings: at most ", kMaxStopStrings), "stop");
        for (const json& s : *v) p.gen.stop.push_back(get_string(s, "stop"));
      } else {
        type_error("stop", "a string or an array of strings", *v);
      }
    }

    // The prompt.
    const Tokenizer& tok = m.tokenizer();
    if (chat) {
      const json* v = field(b, "messages");
      if (!v) throw bad_request("'messages' is missing", "messages");
      const std::vector<ChatMessage> messages = parse_messages(*v);
      std::string prompt;
      try {
        prompt = render_chat(messages);
      } catch (const Error& e) {
        throw bad_request(e.what(), "messages");
      }
      p.gen.prompt = tok.encode(prompt);
      for (std::string& s : chat_stop_strings()) p.gen.stop.push_back(std::move(s));
    } else {
      const json* v = field(b, "prompt");
      if (!v) throw bad_request("'prompt' is missing", "prompt");
      p.gen.prompt = parse_prompt(*v, tok);
      if (p.gen.prompt.empty()) p.gen.prompt = {kEndOfTextId};  // an empty prompt starts a new document
    }

    const int64_t context = m.config().max_position_embeddings;
    const json* mt = field(b, "max_completion_tokens");
    const char* mt_name = "max_completion_tokens";
    if (!mt) {
      mt = field(b, "max_tokens");
      mt_name = "max_tokens";
    }
    if (mt) {
      const int64_t n = get_integer(*mt, mt_name);
      if (n <= 0) throw bad_request(str(mt_name, " = ", n, ": must be at least 1"), mt_name);
      p.gen.max_tokens = n;
    } else if (chat) {
      p.gen.max_tokens = std::max<int64_t>(1, std::min(opt.default_max_tokens, context - int64_t(p.gen.prompt.size())));
    } else {
      p.gen.max_tokens = kCompletionsDefaultMaxTokens;
    }
    return p;
  }

  // prompt: a string, a list of one string, a list of token ids, or a list of one list of token ids.
  static std::vector<int32_t> parse_prompt(const json& v, const Tokenizer& tok) {
    if (v.is_string()) return tok.encode(v.get_ref<const std::string&>());
    if (!v.is_array()) type_error("prompt", "a string, an array of strings or an array of token ids", v);
    if (v.empty()) return {};
    auto ids = [](const json& a) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < a.size(); ++i) {
        const int64_t id = get_integer(a[i], "prompt");
        if (id < 0 || id > std::numeric_limits<int32_t>::max())
          throw bad_request(str("prompt[", i, "] = ", id, ": not a token id"), "prompt");
        out.push_back(int32_t(id));
      }
      return out;
    };
    if (v[0].is_number()) return ids(v);
    if (v.size() != 1)
      throw bad_request(str("'prompt' holds ", v.size(), " prompts: only one prompt per request is supported"),
                        "prompt");
    if (v[0].is_string()) return tok.encode(v[0].get_ref<const std::string&>());
    if (v[0].is_array()) return ids(v[0]);
    type_error("prompt", "a string, an array of strings or an array of token ids", v[0]);
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
    const json body = parse_body(req.body);
    std::shared_ptr<Engine> eng = require_engine();
    const InferenceModel& m = eng->model();
    ParsedRequest p = parse_generation(body, chat, m);
    std::unique_ptr<Job> job = submit(eng, p, m);
    auto reply = std::make_shared<Reply>(p, m.tokenizer(), opt.model_name);

    if (!p.stream) {
      std::vector<TokenEvent> events;
      for (;;) {
        events.clear();
        job->take(events, kPollInterval);
        if (stopping) throw ApiError(503, "the server is stopping", "server_error", "", "server_stopping");
        for (const TokenEvent& e : events) {
          reply->add(e);
          if (e.finish == FinishReason::kNone) continue;
          job->set_finished();
          if (e.finish != FinishReason::kStop && e.finish != FinishReason::kLength) throw finish_error(e, stopping);
          reply_json(res, 200, reply->full(finish_reason_name(e.finish)));
          return;
        }
      }
    }

    // Streaming: the provider runs on this worker thread after the handler returns; it owns the job (a shared_ptr,
    // as httplib copies the provider), so that the job is dropped, and cancelled if unfinished, with the response.
    std::shared_ptr<Job> shared_job(std::move(job));
    const bool include_usage = p.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [this, shared_job, reply, chat, include_usage](size_t, httplib::DataSink& sink) {
          try {
            return stream(*shared_job, *reply, chat, include_usage, sink);
          } catch (...) {  // never into httplib: end the connection (the job cancels when dropped)
            return false;
          }
        });
  }

  // Writes one request's SSE stream. Returns false when the client went away (the request is then cancelled).
  bool stream(Job& job, Reply& reply, bool chat, bool include_usage, httplib::DataSink& sink) {
    auto send = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
    auto gone = [&] {
      streams_aborted.fetch_add(1);
      return false;
    };
    if (chat && !send(sse(reply.role_chunk()))) return gone();
    auto last_write = SteadyClock::now();
    std::vector<TokenEvent> events;
    for (;;) {
      events.clear();
      job.take(events, kPollInterval);
      const TokenEvent* fin = nullptr;
      for (const TokenEvent& e : events) {
        reply.add(e);
        if (e.finish != FinishReason::kNone) {
          fin = &e;
          break;
        }
      }
      if (auto chunk = reply.take_delta_chunk()) {
        if (!send(sse(*chunk))) return gone();
        last_write = SteadyClock::now();
      }
      if (!fin && stopping) {  // the engine will cancel it: end the stream now
        if (!send(sse(error_json(ApiError(503, "the server is stopping", "server_error", "", "server_stopping")))))
          return gone();
        send("data: [DONE]\n\n");
        sink.done();
        return true;
      }
      if (fin) {
        job.set_finished();
        bool ok;
        if (fin->finish == FinishReason::kStop || fin->finish == FinishReason::kLength) {
          ok = send(sse(reply.finish_chunk(finish_reason_name(fin->finish))));
          if (ok && include_usage) ok = send(sse(reply.usage_chunk()));
        } else {
          ok = send(sse(error_json(finish_error(*fin, stopping))));
        }
        if (!ok || !send("data: [DONE]\n\n")) return gone();
        sink.done();
        return true;
      }
      if (SteadyClock::now() - last_write >= kPingInterval) {
        if (!send(": ping\n\n")) return gone();
        last_write = SteadyClock::now();
      }
    }
  }

  void handle_tokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const InferenceModel& m = eng->model();
    check_model_field(body);
    std::vector<int32_t> ids;
    if (const json* v = field(body, "messages")) {
      try {
        ids = m.tokenizer().encode(render_chat(parse_messages(*v)));
      } catch (const Error& e) {
        throw bad_request(e.what(), "messages");
      }
    } else if (const json* pr = field(body, "prompt")) {
      ids = m.tokenizer().encode(get_string(*pr, "prompt"));
    } else {
      throw bad_request("give 'prompt' (a string) or 'messages'", "prompt");
    }
    reply_json(res, 200,
               json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m.config().max_position_embeddings}});
  }

  void handle_detokenize(const httplib::Request& req, httplib::Response& res) {
    const json body = parse_body(req.body);
    const std::shared_ptr<Engine> eng = require_engine();
    const Tokenizer& tok = eng->model().tokenizer();
    check_model_field(body);
    const json* v = field(body, "tokens");
    if (!v) throw bad_request("'tokens' is missing", "tokens");
    if (!v->is_array()) type_error("tokens", "an array of token ids", *v);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v->size(); ++i) {
      const int64_t id = get_integer((*v)[i], "tokens");
      if (id < 0 || id >= tok.vocab_size())
        throw bad_request(str("tokens[", i, "] = ", id, ": outside the vocabulary [0, ", tok.vocab_size(), ")"),
                          "tokens");
      ids.push_back(int32_t(id));
    }
    reply_json(res, 200, json{{"prompt", tok.decode(ids)}});
  }

  json model_card() const {
    json card{{"id", opt.model_name}, {"object", "model"}, {"created", created}, {"owned_by", "myriad"}};
    std::lock_guard<std::mutex> lock(mu);
    if (model) card["max_model_len"] = model->config().max_position_embeddings;
    return card;
  }

  std::string metrics_text() {
    std::ostringstream o;
    auto head = [&](const char* name, const char* type, const char* help) {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
    };
    auto line = [&](const std::string& name, double v) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.10g", v);
      o << name << ' ' << buf << '\n';
    };
    head("myriad_http_requests_total", "counter", "HTTP responses, by endpoint and status.");
    {
      std::lock_guard<std::mutex> lock(stats_mu);
      for (const auto& [key, n] : http_counts)
        line(str("myriad_http_requests_total{endpoint=\"", key.first, "\",status=\"", key.second, "\"}"), double(n));
    }
    head("myriad_http_streams_aborted_total", "counter", "Streams whose client went away before the end.");
    line("myriad_http_streams_aborted_total", double(streams_aborted.load()));

    std::shared_ptr<Engine> eng;
    {
      std::lock_guard<std::mutex> lock(mu);
      eng = engine;
    }
    head("myriad_model_ready", "gauge", "1 once the model is loaded and the engine runs.");
    line("myriad_model_ready", eng ? 1 : 0);
    const EngineMetrics m = eng ? eng->metrics() : EngineMetrics{};
    auto counter = [&](const char* name, const char* help, double v) {
      head(name, "counter", help);
      line(name, v);
    };
    auto gauge = [&](const char* name, const char* help, double v) {
      head(name, "gauge", help);
      line(name, v);
    };
    counter("myriad_requests_submitted_total", "Generation requests accepted by the engine.", double(m.requests_total));
    counter("myriad_requests_finished_total", "Generation requests that ended (stop or length).",
            double(m.requests_finished));
    counter("myriad_requests_cancelled_total", "Generation requests cancelled (client gone, shutdown).",
            double(m.requests_cancelled));
    counter("myriad_requests_rejected_total", "Generation requests refused by the engine (busy).",
            double(m.requests_rejected));
    counter("myriad_prompt_tokens_total", "Prompt tokens of admitted requests.", double(m.prompt_tokens));
    counter("myriad_generation_tokens_total", "Tokens generated.", double(m.generated_tokens));
    counter("myriad_prefix_cache_hits_total", "Requests that resumed from a cached prompt prefix.",
            double(m.prefix_hits));
    counter("myriad_prefix_cache_tokens_reused_total", "Prompt tokens taken from the prefix cache.",
            double(m.prefix_tokens_reused));
    counter("myriad_engine_steps_total", "Engine steps (one batched forward each).", double(m.steps));
    gauge("myriad_requests_running", "Sequences in the running batch.", double(m.running));
    gauge("myriad_requests_waiting", "Requests queued for admission.", double(m.waiting));
    gauge("myriad_cache_bytes_used", "Bytes of sequence state in use (KDA states and MLA pages).",
          double(m.cache_bytes_used));
    gauge("myriad_cache_bytes_reserved", "Bytes of sequence state reserved by admitted requests.",
          double(m.cache_bytes_reserved));
    gauge("myriad_cache_bytes_budget", "The sequence state budget (--cache-mb).", double(m.cache_bytes_budget));
    gauge("myriad_prefix_cache_bytes", "Bytes held by prefix snapshots.", double(m.prefix_cache_bytes));
    auto histogram = [&](const char* name, const char* help, const LatencyHistogram& h) {
      head(name, "histogram", help);
      uint64_t cumulative = 0;
      for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
        cumulative += h.counts[i];
        char le[32];
        std::snprintf(le, sizeof(le), "%g", LatencyHistogram::kBounds[i]);
        line(str(name, "_bucket{le=\"", le, "\"}"), double(cumulative));
      }
      cumulative += h.counts[LatencyHistogram::kBuckets];
      line(str(name, "_bucket{le=\"+Inf\"}"), double(cumulative));
      line(str(name, "_sum"), h.sum);
      line(str(name, "_count"), double(h.count));
    };
    histogram("myriad_time_to_first_token_seconds", "Time from submission to the first generated token.",
              m.time_to_first_token);
    histogram("myriad_time_per_output_token_seconds", "Time between consecutive generated tokens of a request.",
              m.time_per_output_token);
    return o.str();
  }

  void routes() {
    http.Get("/health", guarded(false, [this](const httplib::Request&, httplib::Response& res) {
               std::lock_guard<std::mutex> lock(mu);
               if (stopping)
                 reply_json(res, 503, json{{"status", "stopping"}});
               else if (state == State::kReady)
                 reply_json(res, 200, json{{"status", "ok"}, {"model", opt.model_name}});
               else if (state == State::kFailed)
                 reply_json(res, 503, json{{"status", "error"}, {"message", load_error}});
               else
                 reply_json(res, 503, json{{"status", "loading"}});
             }));
    http.Get("/metrics", guarded(false, [this](const httplib::Request&, httplib::Response& res) {
               res.set_content(metrics_text(), "text/plain; version=0.0.4; charset=utf-8");
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
    http.Post("/tokenize", guarded(false, [this](const httplib::Request& req, httplib::Response& res) {
                handle_tokenize(req, res);
              }));
    http.Post("/detokenize", guarded(false, [this](const httplib::Request& req, httplib::Response& res) {
                handle_detokenize(req, res);
              }));
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
      std::lock_guard<std::mutex> lock(stats_mu);
      ++http_counts[{endpoint_label(req.path), res.status}];
    });
  }

  void load() {
    try {
      std::shared_ptr<const InferenceModel> m = opt.loader ? opt.loader() : InferenceModel::load(opt.model_dir);
      MYRIAD_REQUIRE(m != nullptr, kValue, "the model loader returned no model");
      auto e = std::make_shared<Engine>(m, opt.engine);
      e->start();
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
  const EngineOptions& eo = s.opt.engine;
  const int64_t threads =
      s.opt.http_threads > 0 ? s.opt.http_threads : std::min<int64_t>(512, eo.max_batch + eo.max_waiting + 8);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
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
  s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
  s.load_thread = std::thread([&s] { s.load(); });
}

void Server::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
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

const std::string& Server::model_name() const {
  return impl_->opt.model_name;
}

std::shared_ptr<Engine> Server::engine() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->engine;
}

}  // namespace myriad
