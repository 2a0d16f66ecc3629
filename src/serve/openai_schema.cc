// The OpenAI API's request side: see openai_schema.h.
#include "serve/openai_schema.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/json_fields.h"
#include "data/chat/tool_call_grammar.h"
#include "data/tokenize/tokenizer.h"

namespace myriad::serve {
namespace {

constexpr int kMaxJsonDepth = 64;                     // deeper request bodies are refused before parsing
constexpr int64_t kCompletionsDefaultMaxTokens = 16;  // OpenAI's default for /v1/completions
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxLogitBias = 1024;  // logit_bias entries

json null_if_empty(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

}  // namespace

ApiError bad_request(const std::string& message, const std::string& param, const std::string& code) {
  return ApiError(400, message, "invalid_request_error", param, code);
}

json error_json(const ApiError& e) {
  return json{{"error", json{{"message", e.what()},
                             {"type", e.type},
                             {"param", null_if_empty(e.param)},
                             {"code", null_if_empty(e.code)}}}};
}

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

// ---- JSON request bodies ------------------------------------------------------------------------------------------

// The nesting is checked before parsing, so that no body can exhaust a stack.
json parse_body(const std::string& body) {
  if (json_nesting_depth(body) > kMaxJsonDepth)
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

const json* field(const json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

namespace {

std::string describe(const json& v) {
  if (v.is_number() || v.is_boolean()) return v.dump();
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

}  // namespace

void type_error(const std::string& param, const char* expected, const json& got) {
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

std::vector<ChatMessage> parse_messages(const json& v) {
  if (v.is_array() && v.empty()) throw bad_request("'messages' must not be empty", "messages");
  try {
    return chat_messages_from_json(v);
  } catch (const FieldError& e) {
    throw bad_request(e.what(), e.field(), e.code());
  }
}

ImageInput chat_images(std::vector<ChatMessage>& messages, const InferenceModel& m, const ServerOptions& opt) {
  ImageInput out;
  int64_t count = 0;
  for (ChatMessage& msg : messages)
    for (ChatImage& image : msg.images) {
      if (++count > opt.max_images)
        throw bad_request(str(image.field, ": more than ", opt.max_images, " images in one request"), image.field);
      try {
        require_vision(m.config(), image.field);
        const std::string bytes = image_bytes_from_url(image.url, image.field, opt.image_limits);
        if (image.video) {
          const Video video = decode_video(bytes, image.field, {.image = opt.image_limits});
          image.width = video.width;
          image.height = video.height;
          add_video(out, *m.config().vision_config, video);
          continue;
        }
        Image decoded = decode_image(bytes, image.field, opt.image_limits);
        image.width = decoded.width;  // the k3 chat format writes the size
        image.height = decoded.height;
        add_image(out, *m.config().vision_config, std::move(decoded));
      } catch (const Error& e) {
        throw bad_request(e.what(), image.field);
      }
    }
  return out;
}

// ---- a generation request -----------------------------------------------------------------------------------------

namespace {

// The image token encode_chat writes for the request's images: the model's placeholder (none without images).
std::optional<int32_t> image_token(const InferenceModel& m, const ImageInput& images) {
  if (images.empty()) return std::nullopt;
  return int32_t(*m.config().media_placeholder_token_id);
}

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

// prompt: a string, a list of one string, a list of token ids, or a list of one list of token ids.
std::vector<int32_t> parse_prompt(const json& v, const Tokenizer& tok, int64_t vocab) {
  if (v.is_string()) return tok.encode(v.get_ref<const std::string&>());
  if (!v.is_array()) type_error("prompt", "a string, an array of strings or an array of token ids", v);
  if (v.empty()) return {};
  auto ids = [vocab](const json& a) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t id = get_integer(a[i], "prompt");
      if (id < 0 || id >= vocab)
        throw bad_request(str("prompt[", i, "] = ", id, ": outside the vocabulary [0, ", vocab, ")"), "prompt");
      out.push_back(int32_t(id));
    }
    return out;
  };
  if (v[0].is_number()) return ids(v);
  if (v.size() != 1)
    throw bad_request(str("'prompt' holds ", v.size(), " prompts: only one prompt per request is supported"), "prompt");
  if (v[0].is_string()) return tok.encode(v[0].get_ref<const std::string&>());
  if (v[0].is_array()) return ids(v[0]);
  type_error("prompt", "a string, an array of strings or an array of token ids", v[0]);
}

}  // namespace

void check_model_field(const json& body, const std::string& model_name) {
  const json* v = field(body, "model");
  if (!v) return;  // optional here: there is only one model
  const std::string& m = get_string(*v, "model");
  if (m != model_name)
    throw ApiError(404, str("the model '", m, "' does not exist: this server serves '", model_name, "'"),
                   "invalid_request_error", "model", "model_not_found");
}

namespace {

// tool_choice ("none", "auto", "required", {"type": "function", "function": {"name": ...}}; default "auto" with
// tools) and parallel_tool_calls. "none" bans the format's tool-call marker (logit bias -100, the reply is plain
// text); "required" and a named function start the reply with it (forced_call_start; calls_before: the
// conversation's calls so far, which kimi's call ids count).
void parse_tool_choice(const json& b, const std::vector<ToolSpec>& tools, const Tokenizer& tok, size_t calls_before,
                       ParsedRequest& p) {
  const json* choice = field(b, "tool_choice");
  if (const json* v = field(b, "parallel_tool_calls")) p.parallel_tool_calls = get_bool(*v, "parallel_tool_calls");
  if (tools.empty()) {
    if (choice && !(choice->is_string() && choice->get<std::string>() == "none"))
      throw bad_request("'tool_choice' needs 'tools'", "tool_choice");
    return;
  }
  if (chat_format_of(tok) == ChatFormat::kK3) {  // K3's renderer writes none / required as a system message
    const std::string c = !choice ? "auto" : choice->is_string() ? choice->get<std::string>() : "";
    if (c != "auto" && c != "none" && c != "required")
      throw bad_request(
          "in the k3 chat format tool_choice is \"auto\", \"none\" or \"required\" (K3's renderer has "
          "no named choice)",
          "tool_choice");
    p.tool_calls = c != "none";
    p.rendered_choice = c == "none" ? ToolChoice::kNone : c == "required" ? ToolChoice::kRequired : ToolChoice::kAuto;
    return;
  }
  const int32_t open = tok.id_of(tool_calls_marker(chat_format_of(tok)));
  if (!choice || (choice->is_string() && choice->get<std::string>() == "auto")) {
    p.tool_calls = true;
  } else if (choice->is_string() && choice->get<std::string>() == "none") {
    p.gen.sampling.logit_bias.emplace_back(open, -100.0f);
  } else if (choice->is_string() && choice->get<std::string>() == "required") {
    p.tool_calls = true;
    p.forced = {open};
  } else if (choice->is_object()) {
    const json* fn = field(*choice, "function");
    const json* type = field(*choice, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "function" || !fn || !fn->is_object())
      throw bad_request(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}",
          "tool_choice");
    const json* name = field(*fn, "name");
    if (!name) throw bad_request("'tool_choice.function.name' is missing", "tool_choice.function.name");
    const std::string& n = get_string(*name, "tool_choice.function.name");
    if (std::none_of(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == n; }))
      throw bad_request(str("'tool_choice.function.name' = '", n, "' is not one of the tools"),
                        "tool_choice.function.name");
    p.tool_calls = true;
    p.forced = forced_call_start(tok, n, calls_before);
  } else {
    throw bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
  }
}

// Strict tools (a tool's "strict": true, or every tool with --strict-tools): the reply is sampled under the
// tool-call grammar (data/chat/tool_call_grammar.h), which starts after the forced start of a tool_choice.
void constrain_tool_calls(const std::vector<ToolSpec>& tools, ChatFormat format, const Tokenizer& tok,
                          const ServerOptions& opt, ParsedRequest& p) {
  const auto strict = std::find_if(tools.begin(), tools.end(), [](const ToolSpec& t) { return t.strict; });
  if (strict == tools.end() && !(opt.strict_tools && !tools.empty())) return;
  const std::string param =
      strict != tools.end() ? str("tools[", strict - tools.begin(), "].function.strict") : std::string("tools");
  if (format != ChatFormat::kMyriad)
    throw bad_request(str("strict tool calls (constrained decoding) are built for myriad's chat format; this model's "
                          "is ",
                          chat_format_name(format)),
                      param);
  ToolCallGrammarOptions go;
  go.strict_all = opt.strict_tools;
  go.calls_allowed = p.tool_calls;
  go.parallel_calls = p.parallel_tool_calls;
  try {
    p.gen.sampling.tool_grammar = std::make_shared<ToolCallGrammar>(tok, tools, go);
  } catch (const Error& e) {
    throw bad_request(e.what(), param);
  }
  p.gen.sampling.tool_grammar_start = p.forced;
}

}  // namespace

ParsedRequest parse_generation(const json& b, bool chat, const InferenceModel& m, const ServerOptions& opt,
                               std::string_view raw_body) {
  ParsedRequest p;
  p.chat = chat;
  check_model_field(b, opt.model_name);
  if (const json* v = field(b, "n")) {
    const int64_t n = get_integer(*v, "n");
    if (n != 1) throw bad_request(str("n = ", n, ": only n = 1 is supported"), "n");
  }
  if (chat) {
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
  if (const json* v = field(b, "logit_bias")) {
    // {"<token id>": bias}: ids as decimal strings within the vocabulary, biases in [-100, 100] (as OpenAI).
    if (!v->is_object()) type_error("logit_bias", "an object mapping token ids to biases", *v);
    if (v->size() > kMaxLogitBias)
      throw bad_request(str("'logit_bias' has ", v->size(), " entries: at most ", kMaxLogitBias), "logit_bias");
    for (const auto& [key, bias] : v->items()) {
      const bool digits = !key.empty() && key.size() <= 9 &&
                          std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (!digits)
        throw bad_request(str("logit_bias key '", key, "' is not a token id (a non-negative integer)"), "logit_bias");
      const int64_t id = std::stoll(key);
      if (id >= m.vocab_size())
        throw bad_request(str("logit_bias token id ", id, " is outside the vocabulary [0, ", m.vocab_size(), ")"),
                          "logit_bias");
      if (!bias.is_number()) type_error("logit_bias", "numbers as biases", bias);
      const double x = bias.get<double>();
      if (!(x >= -100 && x <= 100))
        throw bad_request(str("logit_bias for token ", id, " is ", x, ": must be in [-100, 100]"), "logit_bias");
      sp.logit_bias.emplace_back(int32_t(id), float(x));
    }
  }

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
    std::vector<ChatMessage> messages = parse_messages(*v);  // chat_images sets the images' sizes
    std::vector<ToolSpec> tools;
    if (const json* t = field(b, "tools")) {
      try {
        tools = tool_specs_from_json(*t);
      } catch (const FieldError& e) {
        throw bad_request(e.what(), e.field(), e.code());
      }
    }
    ChatFormat format = ChatFormat::kMyriad;
    try {
      format = chat_format_of(tok);
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
    if (!tools.empty()) {
      try {
        require_tool_tokens(tok);
      } catch (const Error& e) {
        throw bad_request(e.what(), "tools");
      }
    }
    size_t calls_before = 0;
    for (const ChatMessage& msg : messages) calls_before += msg.tool_calls.size();
    if (format != ChatFormat::kMyriad && format != ChatFormat::kK3 && !tools.empty())
      keep_declared_order(tools, raw_body);  // the formats that write the tools list as the request did
    parse_tool_choice(b, tools, tok, calls_before, p);
    const ImageInput images = chat_images(messages, m, opt);
    try {
      p.gen.prompt = encode_chat(tok, messages, tools, true, p.rendered_choice, image_token(m, images)).ids;
      if (!images.empty()) {
        p.gen.prompt = expand_image_placeholders(p.gen.prompt, *image_token(m, images), images.tokens);
        p.gen.image_patches = images.patches(*m.config().vision_config);
        p.gen.image_grids = images.grids;
      }
    } catch (const Error& e) {
      throw bad_request(e.what(), "messages");
    }
    p.gen.prompt.insert(p.gen.prompt.end(), p.forced.begin(), p.forced.end());
    constrain_tool_calls(tools, format, tok, opt, p);
    for (std::string& s : chat_stop_strings(format)) p.gen.stop.push_back(std::move(s));
    // the model must not write the results itself (a kimi result is a new turn: its stop strings end it already)
    if (const char* results = tool_results_marker(format); p.tool_calls && results) p.gen.stop.push_back(results);
  } else {
    const json* v = field(b, "prompt");
    if (!v) throw bad_request("'prompt' is missing", "prompt");
    p.gen.prompt = parse_prompt(*v, tok, m.vocab_size());
    if (p.gen.prompt.empty()) {  // an empty prompt starts a new document
      const int32_t eot = tok.loaded() ? tok.end_of_text_id() : kEndOfTextId;
      if (eot < 0) throw bad_request("'prompt' is empty and the tokenizer has no end-of-text token", "prompt");
      p.gen.prompt = {eot};
    }
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

std::vector<int32_t> parse_tokenize(const json& body, const InferenceModel& m, const ServerOptions& opt,
                                    std::string_view raw_body) {
  const Tokenizer& tok = m.tokenizer();
  check_model_field(body, opt.model_name);
  if (const json* v = field(body, "messages")) {
    std::vector<ChatMessage> messages = parse_messages(*v);  // chat_images sets the images' sizes
    std::vector<ToolSpec> tools;
    if (const json* t = field(body, "tools")) {
      try {
        tools = tool_specs_from_json(*t);
      } catch (const FieldError& e) {
        throw bad_request(e.what(), e.field(), e.code());
      }
      keep_declared_order(tools, raw_body);
    }
    const ImageInput images = chat_images(messages, m, opt);
    try {
      const std::vector<int32_t> ids =
          encode_chat(tok, messages, tools, true, ToolChoice::kAuto, image_token(m, images)).ids;
      return images.empty() ? ids : expand_image_placeholders(ids, *image_token(m, images), images.tokens);
    } catch (const Error& e) {
      throw bad_request(e.what(), tools.empty() ? "messages" : "tools");
    }
  }
  if (const json* pr = field(body, "prompt")) return tok.encode(get_string(*pr, "prompt"));
  throw bad_request("give 'prompt' (a string) or 'messages'", "prompt");
}

std::vector<int32_t> parse_detokenize(const json& body, const Tokenizer& tok, const std::string& model_name) {
  check_model_field(body, model_name);
  const json* v = field(body, "tokens");
  if (!v) throw bad_request("'tokens' is missing", "tokens");
  if (!v->is_array()) type_error("tokens", "an array of token ids", *v);
  std::vector<int32_t> ids;
  ids.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const int64_t id = get_integer((*v)[i], "tokens");
    if (id < 0 || id >= tok.vocab_size())
      throw bad_request(str("tokens[", i, "] = ", id, ": outside the vocabulary [0, ", tok.vocab_size(), ")"),
                        "tokens");
    ids.push_back(int32_t(id));
  }
  return ids;
}

}  // namespace myriad::serve
