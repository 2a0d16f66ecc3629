// The chat template: see chat_template.h for the grammar.
#include "data/chat_template.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

namespace {

// The template as a list of pieces: a special token (by its text) or message text, each marked with whether an
// assistant turn's tokens (trained in SFT) hold it. encode_chat and render_chat both read this list.
struct Piece {
  std::string text;
  bool special = false;
  bool assistant = false;
};

void check_arguments(const ToolCall& call, size_t i, size_t k) {
  MYRIAD_REQUIRE(call.arguments.is_object(), kValue, "messages[", i, "].tool_calls[", k,
                 "].arguments: must be a JSON object, got ", call.arguments.type_name());
  MYRIAD_REQUIRE(!call.name.empty(), kValue, "messages[", i, "].tool_calls[", k, "].name: must not be empty");
}

std::vector<Piece> template_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                   bool generation_prompt) {
  std::vector<Piece> out;
  auto special = [&](const char* s, bool assistant = false) { out.push_back({s, true, assistant}); };
  auto text = [&](std::string s, bool assistant = false) {
    if (!s.empty()) out.push_back({std::move(s), false, assistant});
  };
  if (!tools.empty()) {
    std::string line = "tools:";
    for (const ToolSpec& t : tools) {
      line += " " + t.name + "(";
      const std::vector<std::string> args = t.argument_names();
      for (size_t a = 0; a < args.size(); ++a) line += (a ? "," : "") + args[a];
      line += ")";
    }
    special("<|system|>");
    text(line);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (m.role == "system" || m.role == "developer") {
      special("<|system|>");
      text(m.content);
    } else if (m.role == "user") {
      special("<|user|>");
      text(m.content);
    } else if (m.role == "assistant") {
      special("<|assistant|>");
      text(m.content, true);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        check_arguments(m.tool_calls[k], i, k);
        special("<|tool_call|>", true);
        text(tool_call_text(m.tool_calls[k]), true);
        special("<|/tool_call|>", true);
      }
      special("<|endoftext|>", true);
    } else if (m.role == "tool") {
      special("<|tool_result|>");
      text(m.content);
      special("<|/tool_result|>");
    } else {
      throw_error(ErrorKind::kValue, "messages[", i, "].role = '", m.role,
                  "': must be one of system, developer, user, assistant, tool");
    }
  }
  if (generation_prompt) special("<|assistant|>");
  return out;
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

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

ChatTokens encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                       bool generation_prompt) {
  ChatTokens out;
  for (const Piece& p : template_pieces(messages, tools, generation_prompt)) {
    if (p.special) {
      out.ids.push_back(tok.id_of(p.text));
    } else {
      const std::vector<int32_t> ids = tok.encode(p.text, Specials::kAsText);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    }
    out.assistant.resize(out.ids.size(), p.assistant ? 1 : 0);
  }
  return out;
}

std::string render_chat(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                        bool generation_prompt) {
  std::string out;
  for (const Piece& p : template_pieces(messages, tools, generation_prompt)) out += p.text;
  return out;
}

std::vector<std::string> chat_stop_strings() {
  return {"<|user|>", "<|system|>"};
}

AssistantReply parse_assistant_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  const int32_t open = tok.id_of("<|tool_call|>"), close = tok.id_of("<|/tool_call|>");
  AssistantReply r;
  const auto first_call = std::find(ids.begin(), ids.end(), open);
  r.content = tok.decode(std::span<const int32_t>(ids.begin(), first_call));
  auto malformed = [&](std::string why) {
    AssistantReply bad;
    bad.content = tok.decode(ids);
    bad.error = std::move(why);
    return bad;
  };
  if (std::find(ids.begin(), first_call, close) != first_call)
    return malformed("<|/tool_call|> without a <|tool_call|> before it");
  for (auto it = first_call; it != ids.end();) {
    if (*it != open) {  // between or after calls: whitespace only
      const std::string t = tok.token_bytes(*it);
      if (!std::all_of(t.begin(), t.end(), is_space))
        return malformed(str("text after tool call ", r.tool_calls.size(), ": '",
                             tok.decode(std::span<const int32_t>(it, ids.end())), "'"));
      ++it;
      continue;
    }
    const auto end = std::find(it + 1, ids.end(), close);
    const size_t k = r.tool_calls.size();
    if (end == ids.end()) return malformed(str("tool call ", k, " is not closed by <|/tool_call|>"));
    const std::string body = tok.decode(std::span<const int32_t>(it + 1, end));
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
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

}  // namespace myriad
