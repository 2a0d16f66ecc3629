// The chat template: see chat_template.h for the grammar.
#include "data/chat/chat_template.h"

#include <algorithm>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/utf8.h"
#include "data/chat/chat_format_support.h"
#include "data/chat/chatml_chat_format.h"
#include "data/chat/deepseek_chat_format.h"
#include "data/chat/k3_chat_format.h"
#include "data/chat/kimi_chat_format.h"

namespace myriad {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

void check_tool_call(const ToolCall& call, size_t i, size_t k) {
  MYRIAD_REQUIRE(call.arguments.is_object(), kValue, "messages[", i, "].tool_calls[", k,
                 "].arguments: must be a JSON object, got ", call.arguments.type_name());
  MYRIAD_REQUIRE(!call.name.empty(), kValue, "messages[", i, "].tool_calls[", k, "].name: must not be empty");
}

std::vector<const char*> media_wrap_tokens(MediaWrap wrap) {
  if (wrap == MediaWrap::kNone) return {};
  return {"<|media_begin|>", "<|media_content|>", "<|media_end|>"};
}

void append_content(std::vector<ChatPiece>& out, const ChatMessage& m, bool assistant, MediaWrap wrap) {
  size_t at = 0;
  auto text = [&](size_t end) {
    if (end > at) out.push_back({m.content.substr(at, end - at), false, assistant});
    at = end;
  };
  for (const ChatImage& image : m.images) {
    text(std::min(image.at, m.content.size()));
    if (wrap == MediaWrap::kNone) {
      out.push_back({"<|image|>", true, assistant, true});
      continue;
    }
    out.push_back({"<|media_begin|>", true, assistant});
    const bool sized = wrap == MediaWrap::kK3 && image.width > 0 && image.height > 0;
    const char* kind = image.video ? "video" : "image";
    out.push_back({sized ? str(kind, " ", image.width, "x", image.height) : std::string(kind), false, assistant});
    out.push_back({"<|media_content|>", true, assistant});
    out.push_back({"<|media_pad|>", true, assistant, true});
    out.push_back({"<|media_end|>", true, assistant});
  }
  text(m.content.size());
}

void check_chat_role(const ChatMessage& m, size_t i) {
  MYRIAD_REQUIRE(
      m.role == "system" || m.role == "developer" || m.role == "user" || m.role == "assistant" || m.role == "tool",
      kValue, "messages[", i, "].role = '", m.role, "': must be one of system, developer, user, assistant, tool");
}

bool all_space(const Tokenizer& tok, std::span<const int32_t> ids) {
  return std::all_of(ids.begin(), ids.end(), [&](int32_t id) {
    const std::string t = tok.token_bytes(id);
    return std::all_of(t.begin(), t.end(), is_space);
  });
}

std::string trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
}

AssistantReply malformed_reply(const Tokenizer& tok, std::span<const int32_t> ids, std::string why) {
  AssistantReply bad;
  bad.content = tok.decode(ids);
  bad.error = std::move(why);
  return bad;
}

std::string read_arguments(const std::string& body, size_t k, nlohmann::json& out) {
  out = parse_json_or_discarded(body);
  if (out.is_discarded()) return str("tool call ", k, "'s arguments are not valid JSON: '", body, "'");
  if (!out.is_object()) return str("tool call ", k, "'s arguments are not a JSON object: '", body, "'");
  return "";
}

AssistantReply parse_json_calls(const Tokenizer& tok, std::span<const int32_t> ids, const char* open_marker,
                                const char* close_marker) {
  const int32_t open = tok.id_of(open_marker), close = tok.id_of(close_marker);
  AssistantReply r;
  const auto first_call = std::find(ids.begin(), ids.end(), open);
  r.content = tok.decode(std::span<const int32_t>(ids.begin(), first_call));
  auto malformed = [&](std::string why) { return malformed_reply(tok, ids, std::move(why)); };
  if (std::find(ids.begin(), first_call, close) != first_call)
    return malformed(str(close_marker, " without a ", open_marker, " before it"));
  for (auto it = first_call; it != ids.end();) {
    if (*it != open) {  // between or after calls: whitespace only
      if (!all_space(tok, std::span<const int32_t>(it, it + 1)))
        return malformed(str("text after tool call ", r.tool_calls.size(), ": '",
                             tok.decode(std::span<const int32_t>(it, ids.end())), "'"));
      ++it;
      continue;
    }
    const auto end = std::find(it + 1, ids.end(), close);
    const size_t k = r.tool_calls.size();
    if (end == ids.end()) return malformed(str("tool call ", k, " is not closed by ", close_marker));
    const std::string body = tok.decode(std::span<const int32_t>(it + 1, end));
    const nlohmann::json j = parse_json_or_discarded(body);
    if (j.is_discarded()) return malformed(str("tool call ", k, " is not valid JSON: '", body, "'"));
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty())
      return malformed(str("tool call ", k, " has no \"name\" string: '", body, "'"));
    if (!j.contains("arguments") || !j["arguments"].is_object())
      return malformed(str("tool call ", k, "'s \"arguments\" is not a JSON object: '", body, "'"));
    if (j.size() != 2) return malformed(str("tool call ", k, " has fields besides name and arguments: '", body, "'"));
    r.tool_calls.push_back({"call_" + std::to_string(k), j["name"].get<std::string>(), j["arguments"]});
    it = end + 1;
  }
  return r;
}

namespace {

using Piece = ChatPiece;

template <class Json>
std::string python_json_of(const Json& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it)
      out += (it == v.begin() ? "" : ", ") + Json(it.key()).dump() + ": " + python_json_of(it.value());
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_json_of(v[i]);
    return out + "]";
  }
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::vector<Piece> myriad_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                 bool generation_prompt) {
  ChatPieces out;
  if (!tools.empty()) {
    std::string line = "tools:";
    for (const ToolSpec& t : tools) {
      line += " " + t.name + "(";
      const std::vector<std::string> args = t.argument_names();
      for (size_t a = 0; a < args.size(); ++a) line += (a ? "," : "") + args[a];
      line += ")";
    }
    out.special("<|system|>");
    out.text(line);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (m.role == "system" || m.role == "developer") {
      out.special("<|system|>");
      out.text(m.content);
    } else if (m.role == "user") {
      out.special("<|user|>");
      out.content(m);
    } else if (m.role == "assistant") {
      out.special("<|assistant|>");
      out.text(m.content, true);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        check_tool_call(m.tool_calls[k], i, k);
        out.special("<|tool_call|>", true);
        out.text(tool_call_text(m.tool_calls[k]), true);
        out.special("<|/tool_call|>", true);
      }
      out.special("<|endoftext|>", true);
    } else if (m.role == "tool") {
      out.special("<|tool_result|>");
      out.text(m.content);
      out.special("<|/tool_result|>");
    } else {
      throw_error(ErrorKind::kValue, "messages[", i, "].role = '", m.role,
                  "': must be one of system, developer, user, assistant, tool");
    }
  }
  if (generation_prompt) out.special("<|assistant|>");
  return out.list;
}

std::vector<Piece> template_pieces(ChatFormat format, std::span<const ChatMessage> messages,
                                   std::span<const ToolSpec> tools, bool generation_prompt, ToolChoice tool_choice) {
  if (format == ChatFormat::kMyriad) return myriad_pieces(messages, tools, generation_prompt);
  if (format == ChatFormat::kKimi) return kimi_pieces(messages, tools, generation_prompt);
  if (format == ChatFormat::kK3) return k3_pieces(messages, tools, generation_prompt, tool_choice);
  if (format == ChatFormat::kDeepSeekV3) return deepseek_pieces(messages, tools, generation_prompt);
  return chatml_pieces(messages, tools, generation_prompt);
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kMyriad:
      return "myriad";
    case ChatFormat::kKimi:
      return "kimi";
    case ChatFormat::kK3:
      return "k3";
    case ChatFormat::kDeepSeekV3:
      return "deepseek-v3";
    case ChatFormat::kChatMl:
      return "chatml";
  }
  return "?";
}

ChatFormat chat_format_of(const Tokenizer& tok) {
  auto has_all = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return tok.has_special(n); });
  };
  if (tok.kind() == TokenizerKind::kSentencePiece) return ChatFormat::kMyriad;
  if (has_all({"<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"})) return ChatFormat::kK3;
  if (has_all({"<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"}))
    return ChatFormat::kKimi;
  if (has_all({"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}))
    return ChatFormat::kDeepSeekV3;
  if (has_all({"<|im_start|>", "<|im_end|>"})) return ChatFormat::kChatMl;
  if (has_all({"<|system|>", "<|user|>", "<|assistant|>", "<|endoftext|>"})) return ChatFormat::kMyriad;
  throw_error(ErrorKind::kUnsupported, "chat: the ", tokenizer_kind_name(tok.kind()),
              " tokenizer has the special tokens of no chat format myriad knows (k3: <|open|> <|sep|> <|close|> "
              "<|end_of_msg|>; kimi: <|im_user|> <|im_assistant|> "
              "<|im_system|> <|im_middle|> <|im_end|>; deepseek-v3: <｜User｜> <｜Assistant｜>; chatml: <|im_start|> "
              "<|im_end|>)");
}

void keep_declared_order(std::vector<ToolSpec>& tools, std::string_view raw_json) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(raw_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  const auto list = j.find("tools");
  if (list == j.end() || !list->is_array() || list->size() != tools.size()) return;
  for (size_t i = 0; i < tools.size(); ++i) tools[i].declaration = (*list)[i].dump();
}

nlohmann::ordered_json ToolSpec::entry() const {
  if (!declaration.empty()) return nlohmann::ordered_json::parse(declaration);
  // OpenAI's field order; the schema's keys as the parsed json holds them (sorted)
  nlohmann::ordered_json fn = {{"name", name}};
  if (!description.empty()) fn["description"] = description;
  if (!parameters.is_null()) fn["parameters"] = nlohmann::ordered_json::parse(parameters.dump());
  return {{"type", "function"}, {"function", std::move(fn)}};
}

std::vector<std::string> ToolSpec::argument_names() const {
  std::vector<std::string> out;
  if (!parameters.is_object()) return out;
  const auto it = parameters.find("properties");
  if (it == parameters.end() || !it->is_object()) return out;
  // nlohmann::json keeps object keys sorted; the schema's own order is not kept by the parser, so sorted it is.
  for (const auto& [k, v] : it->items()) out.push_back(k);
  return out;
}

std::string tool_call_text(const ToolCall& call) {
  // Built by hand: nlohmann::json would sort "arguments" before "name".
  return "{\"name\":" + nlohmann::json(call.name).dump() + ",\"arguments\":" + call.arguments.dump() + "}";
}

namespace {

// The special tokens a format writes tool declarations, calls and results with (beyond its turns).
MediaWrap media_wrap(ChatFormat f) {
  return f == ChatFormat::kKimi ? MediaWrap::kKimi : f == ChatFormat::kK3 ? MediaWrap::kK3 : MediaWrap::kNone;
}

std::vector<const char*> tool_tokens(ChatFormat f) {
  switch (f) {
    case ChatFormat::kKimi:
      return {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
    case ChatFormat::kDeepSeekV3:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",    "<｜tool▁call▁begin｜>",
              "<｜tool▁call▁end｜>",    "<｜tool▁sep｜>",          "<｜tool▁outputs▁begin｜>",
              "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"};
    case ChatFormat::kChatMl:
      return {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"};
    default:
      return {};  // myriad's and k3's are among their turn tokens
  }
}

}  // namespace

void require_tool_tokens(const Tokenizer& tok) {
  const ChatFormat format = chat_format_of(tok);
  for (const char* t : tool_tokens(format))
    MYRIAD_REQUIRE(tok.has_special(t), kUnsupported, "tools: the ", chat_format_name(format),
                   " chat format writes tool calls and results with ", t, ", which this tokenizer does not have");
}

ChatTokens encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                       bool generation_prompt, ToolChoice tool_choice, std::optional<int32_t> image_token) {
  const ChatFormat format = chat_format_of(tok);
  const bool uses_tools = !tools.empty() || std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) {
    return !m.tool_calls.empty() || m.role == "tool";
  });
  if (uses_tools) require_tool_tokens(tok);
  const bool has_images =
      std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return !m.images.empty(); });
  if (has_images)
    for (const char* t : media_wrap_tokens(media_wrap(format)))
      MYRIAD_REQUIRE(tok.has_special(t), kUnsupported, "images: the ", chat_format_name(format),
                     " chat format frames an image with <|media_begin|>, <|media_content|> and <|media_end|>; this "
                     "tokenizer has no ",
                     t);
  ChatTokens out;
  for (const Piece& p : template_pieces(format, messages, tools, generation_prompt, tool_choice)) {
    if (p.image) {
      MYRIAD_REQUIRE(image_token.has_value(), kValue,
                     "the conversation holds an image, but there is no image token to write it with (the model "
                     "has no vision tower)");
      out.ids.push_back(*image_token);
    } else if (p.special) {
      out.ids.push_back(tok.id_of(p.text));
    } else {
      const std::vector<int32_t> ids = tok.encode(p.text, Specials::kAsText);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    }
    out.assistant.resize(out.ids.size(), p.assistant ? 1 : 0);
  }
  return out;
}

std::string render_chat(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools, bool generation_prompt,
                        ChatFormat format, ToolChoice tool_choice) {
  std::string out;
  for (const Piece& p : template_pieces(format, messages, tools, generation_prompt, tool_choice)) out += p.text;
  return out;
}

std::vector<std::string> chat_stop_strings(ChatFormat format) {
  switch (format) {
    case ChatFormat::kMyriad:
      return {"<|user|>", "<|system|>"};
    case ChatFormat::kKimi:
      return {"<|im_end|>", "<|im_user|>", "<|im_system|>", "<|im_assistant|>"};
    case ChatFormat::kK3:
      return {"<|end_of_msg|>"};
    case ChatFormat::kDeepSeekV3:
      return {"<｜end▁of▁sentence｜>", "<｜User｜>"};
    case ChatFormat::kChatMl:
      return {"<|im_end|>", "<|im_start|>"};
  }
  return {};
}

namespace {

AssistantReply parse_myriad_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  return parse_json_calls(tok, ids, "<|tool_call|>", "<|/tool_call|>");
}

bool json_is_utf8(const nlohmann::json& v) {
  if (v.is_string()) return is_valid_utf8(v.get_ref<const std::string&>());
  if (v.is_array()) return std::all_of(v.begin(), v.end(), json_is_utf8);
  if (v.is_object())
    for (const auto& [key, value] : v.items())
      if (!is_valid_utf8(key) || !json_is_utf8(value)) return false;
  return true;
}

// Why the reply's calls cannot be calls, or "": a model can write any bytes, and a name or an argument that is not
// UTF-8 names no tool and cannot travel as JSON.
std::string ill_formed_call(const AssistantReply& r) {
  for (size_t k = 0; k < r.tool_calls.size(); ++k) {
    const ToolCall& c = r.tool_calls[k];
    if (!is_valid_utf8(c.id) || !is_valid_utf8(c.name)) return str("tool call ", k, "'s name is not valid UTF-8");
    if (!json_is_utf8(c.arguments)) return str("tool call ", k, "'s arguments are not valid UTF-8");
  }
  return "";
}

AssistantReply parse_format_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  switch (chat_format_of(tok)) {
    case ChatFormat::kMyriad:
      return parse_myriad_reply(tok, ids);
    case ChatFormat::kKimi:
      return parse_kimi_reply(tok, ids);
    case ChatFormat::kK3:
      return parse_k3_reply(tok, ids);
    case ChatFormat::kDeepSeekV3:
      return parse_deepseek_reply(tok, ids);
    case ChatFormat::kChatMl:
      return parse_chatml_reply(tok, ids);
    default:
      break;
  }
  AssistantReply r;  // no tool calls in the format: all of it is text
  r.content = tok.decode(ids);
  return r;
}

}  // namespace

AssistantReply parse_assistant_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  AssistantReply r = parse_format_reply(tok, ids);
  if (std::string why = ill_formed_call(r); !why.empty()) {
    r = AssistantReply();
    r.content = tok.decode(ids);
    r.error = std::move(why);
  }
  return r;
}

const char* tool_calls_marker(ChatFormat f) {
  switch (f) {
    case ChatFormat::kMyriad:
      return "<|tool_call|>";
    case ChatFormat::kKimi:
      return "<|tool_calls_section_begin|>";
    case ChatFormat::kDeepSeekV3:
      return "<｜tool▁calls▁begin｜>";
    case ChatFormat::kChatMl:
      return "<tool_call>";
    default:
      throw_error(ErrorKind::kUnsupported, "the ", chat_format_name(f),
                  " chat format has no single token that starts tool calls (k3 opens them with a tag)");
  }
}

const char* tool_results_marker(ChatFormat f) {
  return f == ChatFormat::kMyriad       ? "<|tool_result|>"
         : f == ChatFormat::kDeepSeekV3 ? "<｜tool▁outputs▁begin｜>"
                                        : nullptr;
}

std::vector<int32_t> forced_call_start(const Tokenizer& tok, const std::string& name, size_t calls_before) {
  const ChatFormat f = chat_format_of(tok);
  std::vector<int32_t> out = {tok.id_of(tool_calls_marker(f))};
  std::string head;
  if (f == ChatFormat::kKimi) {
    out.push_back(tok.id_of("<|tool_call_begin|>"));
    head = "functions." + name + ":" + std::to_string(calls_before);
  } else if (f == ChatFormat::kChatMl) {
    head = "\n{\"name\": \"" + name + "\", \"arguments\": ";
  } else if (f == ChatFormat::kDeepSeekV3) {
    out.push_back(tok.id_of("<｜tool▁call▁begin｜>"));
    const std::vector<int32_t> type = tok.encode("function", Specials::kAsText);
    out.insert(out.end(), type.begin(), type.end());
    out.push_back(tok.id_of("<｜tool▁sep｜>"));
    head = name + "\n```json\n";
  } else {
    head = "{\"name\":" + nlohmann::json(name).dump() + ",\"arguments\":";
  }
  const std::vector<int32_t> ids = tok.encode(head, Specials::kAsText);
  out.insert(out.end(), ids.begin(), ids.end());
  if (f == ChatFormat::kKimi) out.push_back(tok.id_of("<|tool_call_argument_begin|>"));
  return out;
}

std::string python_json(const nlohmann::json& v) {
  return python_json_of(v);
}

std::string python_json(const nlohmann::ordered_json& v) {
  return python_json_of(v);
}

}  // namespace myriad
