// The OpenAI API's request side (internal to src/serve): errors in OpenAI's shape, request bodies parsed with
// typed field getters (a wrong type or value is a 400 whose param names the field), and a generation request
// (/v1/chat/completions, /v1/completions) validated into a GenerationRequest. server.h lists the fields.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/chat/chat_template.h"
#include "data/chat/conversation.h"
#include "infer/image_input.h"
#include "serve/engine.h"
#include "serve/server.h"

namespace myriad::serve {

using json = nlohmann::json;

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

ApiError bad_request(const std::string& message, const std::string& param = "", const std::string& code = "");

json error_json(const ApiError& e);

// The engine's and the library's errors as HTTP errors.
ApiError from_error(const Error& e);

// From a per-thread generator seeded by std::random_device: default seeds, response ids.
uint64_t random_u64();

// ---- JSON request bodies ------------------------------------------------------------------------------------------

// The body as a JSON object; malformed JSON (or nesting deeper than a stack should take) is a 400 invalid_json.
json parse_body(const std::string& body);

// A field that is present and not null (null means "default", as in OpenAI's API).
const json* field(const json& obj, const char* name);

[[noreturn]] void type_error(const std::string& param, const char* expected, const json& got);
double get_number(const json& v, const std::string& param);
int64_t get_integer(const json& v, const std::string& param);
bool get_bool(const json& v, const std::string& param);
const std::string& get_string(const json& v, const std::string& param);

// messages: [{"role": "...", "content": "..." | [{"type": "text", "text": "..."}] | null}]
std::vector<ChatMessage> parse_messages(const json& v);

// The images of a chat's user messages (image_url parts), decoded and patched for the model, in order. A 400 whose
// param names the part (messages[i].content[k].image_url.url) for a model without a vision tower, a URL that is
// not a data: URI (remote URLs are never fetched), bad data, an image over opt.image_limits, or more than
// opt.max_images images. Each image's decoded size is set in `messages` (the k3 chat format writes it).
ImageInput chat_images(std::vector<ChatMessage>& messages, const InferenceModel& m, const ServerOptions& opt);

// ---- a generation request -----------------------------------------------------------------------------------------

struct ParsedRequest {
  bool chat = false;
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  // Tool calling (chat with "tools"): whether the reply is read for tool calls (tool_choice auto, required or a
  // named function; not "none"), the tokens appended to the prompt to force a call (required: <|tool_call|>;
  // a named function: also {"name":"NAME","arguments": ) which the reply is read as starting with, and whether
  // more than one call is kept (parallel_tool_calls).
  bool tool_calls = false;
  std::vector<int32_t> forced;
  bool parallel_tool_calls = true;
  // k3: none / required are written into the conversation (a system message) instead of forced tokens
  ToolChoice rendered_choice = ToolChoice::kAuto;
};

// "model", when given, must be the served model (404 model_not_found).
void check_model_field(const json& body, const std::string& model_name);

// A /v1/chat/completions (chat) or /v1/completions body, validated against the model (its context, tokenizer) and
// the server's options (the served model's name, default_max_tokens).
// raw_body: the text b was parsed from (the kimi format renders tool declarations with their keys as written).
ParsedRequest parse_generation(const json& b, bool chat, const InferenceModel& m, const ServerOptions& opt,
                               std::string_view raw_body = {});

// ---- /tokenize and /detokenize ------------------------------------------------------------------------------------

// {"prompt": "..."} or {"messages": [...]} (the chat template's ids) -> the ids:
// {"messages": [...], "tools": [...]} renders the conversation (with its tools) as a chat completion would, without
// the forced start of a tool_choice; {"prompt": "..."} encodes the text (special tokens parsed).
// Images count as the completion would take them (each image's run of placeholders): see chat_images.
std::vector<int32_t> parse_tokenize(const json& body, const InferenceModel& m, const ServerOptions& opt,
                                    std::string_view raw_body = {});
// {"tokens": [...]} -> the ids, each inside the vocabulary.
std::vector<int32_t> parse_detokenize(const json& body, const Tokenizer& tok, const std::string& model_name);

}  // namespace myriad::serve
