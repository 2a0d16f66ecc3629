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

void refuse_tools(ChatFormat format, std::span<const ChatMessage> messages, std::span<const ToolSpec> tools) {
  MYRIAD_REQUIRE(tools.empty(), kUnsupported, "tools: tool calling in the ", chat_format_name(format),
                 " chat format is not implemented (myriad's own format has it)");
  for (size_t i = 0; i < messages.size(); ++i)
    MYRIAD_REQUIRE(messages[i].tool_calls.empty() && messages[i].role != "tool", kUnsupported, "messages[", i,
                   "]: tool calls and tool results in the ", chat_format_name(format),
                   " chat format are not implemented (myriad's own format has them)");
}

void check_role(const ChatMessage& m, size_t i) {
  MYRIAD_REQUIRE(
      m.role == "system" || m.role == "developer" || m.role == "user" || m.role == "assistant" || m.role == "tool",
      kValue, "messages[", i, "].role = '", m.role, "': must be one of system, developer, user, assistant, tool");
}

// Kimi K2 / Kimi-Linear: <|im_{class}|>{role}<|im_middle|>{content}<|im_end|>.
std::vector<Piece> kimi_pieces(std::span<const ChatMessage> messages, bool generation_prompt) {
  std::vector<Piece> out;
  auto turn = [&](const char* marker, const std::string& role, const std::string& content, bool assistant) {
    out.push_back({marker, true, false});
    out.push_back({role, false, false});
    out.push_back({"<|im_middle|>", true, false});
    if (!content.empty()) out.push_back({content, false, assistant});
    out.push_back({"<|im_end|>", true, assistant});
  };
  if (messages.empty() || (messages[0].role != "system" && messages[0].role != "developer"))
    turn("<|im_system|>", "system", "You are Kimi, an AI assistant created by Moonshot AI.", false);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m, i);
    if (m.role == "user")
      turn("<|im_user|>", "user", m.content, false);
    else if (m.role == "assistant")
      turn("<|im_assistant|>", "assistant", m.content, true);
    else
      turn("<|im_system|>", "system", m.content, false);
  }
  if (generation_prompt) {
    out.push_back({"<|im_assistant|>", true, false});
    out.push_back({"assistant", false, false});
    out.push_back({"<|im_middle|>", true, false});
  }
  return out;
}

// DeepSeek-V3: <｜begin▁of▁sentence｜>{system}<｜User｜>{user}<｜Assistant｜>{assistant}<｜end▁of▁sentence｜>.
std::vector<Piece> deepseek_pieces(std::span<const ChatMessage> messages, bool generation_prompt) {
  std::vector<Piece> out;
  out.push_back({"<｜begin▁of▁sentence｜>", true, false});
  std::string system;
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    if (messages[i].role == "system" || messages[i].role == "developer")
      system += (system.empty() ? "" : "\n\n") + messages[i].content;
  }
  if (!system.empty()) out.push_back({system, false, false});
  for (const ChatMessage& m : messages) {
    if (m.role == "user") {
      out.push_back({"<｜User｜>", true, false});
      if (!m.content.empty()) out.push_back({m.content, false, false});
    } else if (m.role == "assistant") {
      out.push_back({"<｜Assistant｜>", true, false});
      if (!m.content.empty()) out.push_back({m.content, false, true});
      out.push_back({"<｜end▁of▁sentence｜>", true, true});
    }
  }
  if (generation_prompt) out.push_back({"<｜Assistant｜>", true, false});
  return out;
}

// ChatML: <|im_start|>{role}\n{content}<|im_end|>\n.
std::vector<Piece> chatml_pieces(std::span<const ChatMessage> messages, bool generation_prompt) {
  std::vector<Piece> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m, i);
    const bool assistant = m.role == "assistant";
    out.push_back({"<|im_start|>", true, false});
    out.push_back({(m.role == "developer" ? std::string("system") : m.role) + "\n", false, false});
    if (!m.content.empty()) out.push_back({m.content, false, assistant});
    out.push_back({"<|im_end|>", true, assistant});
    out.push_back({"\n", false, false});
  }
  if (generation_prompt) {
    out.push_back({"<|im_start|>", true, false});
    out.push_back({"assistant\n", false, false});
  }
  return out;
}

std::vector<Piece> myriad_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
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

std::vector<Piece> template_pieces(ChatFormat format, std::span<const ChatMessage> messages,
                                   std::span<const ToolSpec> tools, bool generation_prompt) {
  if (format == ChatFormat::kMyriad) return myriad_pieces(messages, tools, generation_prompt);
  refuse_tools(format, messages, tools);
  switch (format) {
    case ChatFormat::kKimi:
      return kimi_pieces(messages, generation_prompt);
    case ChatFormat::kDeepSeekV3:
      return deepseek_pieces(messages, generation_prompt);
    default:
      return chatml_pieces(messages, generation_prompt);
  }
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kMyriad:
      return "myriad";
    case ChatFormat::kKimi:
      return "kimi";
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
  if (has_all({"<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"}))
    return ChatFormat::kKimi;
  if (has_all({"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"}))
    return ChatFormat::kDeepSeekV3;
  if (has_all({"<|im_start|>", "<|im_end|>"})) return ChatFormat::kChatMl;
  if (has_all({"<|system|>", "<|user|>", "<|assistant|>", "<|endoftext|>"})) return ChatFormat::kMyriad;
  throw_error(ErrorKind::kUnsupported, "chat: the ", tokenizer_kind_name(tok.kind()),
              " tokenizer has the special tokens of no chat format myriad knows (kimi: <|im_user|> <|im_assistant|> "
              "<|im_system|> <|im_middle|> <|im_end|>; deepseek-v3: <｜User｜> <｜Assistant｜>; chatml: <|im_start|> "
              "<|im_end|>)");
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

ChatTokens encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                       bool generation_prompt) {
  ChatTokens out;
  for (const Piece& p : template_pieces(chat_format_of(tok), messages, tools, generation_prompt)) {
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

std::string render_chat(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools, bool generation_prompt,
                        ChatFormat format) {
  std::string out;
  for (const Piece& p : template_pieces(format, messages, tools, generation_prompt)) out += p.text;
  return out;
}

std::vector<std::string> chat_stop_strings(ChatFormat format) {
  switch (format) {
    case ChatFormat::kMyriad:
      return {"<|user|>", "<|system|>"};
    case ChatFormat::kKimi:
      return {"<|im_end|>", "<|im_user|>", "<|im_system|>", "<|im_assistant|>"};
    case ChatFormat::kDeepSeekV3:
      return {"<｜end▁of▁sentence｜>", "<｜User｜>"};
    case ChatFormat::kChatMl:
      return {"<|im_end|>", "<|im_start|>"};
  }
  return {};
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
