// Kimi K2's chat format: see kimi_chat_format.h for the grammar.
#include "data/chat/kimi_chat_format.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

namespace {

// The tools as the request's list, keys as written (ToolSpec::entry).
std::string kimi_tool_declaration(std::span<const ToolSpec> tools) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ToolSpec& t : tools) list.push_back(t.entry());
  return python_json(list);
}

}  // namespace

std::vector<ChatPiece> kimi_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                   bool generation_prompt) {
  ChatPieces out;
  auto open = [&](const char* marker, const std::string& role) {
    out.special(marker);
    out.text(role);
    out.special("<|im_middle|>");
  };
  if (!tools.empty()) {
    open("<|im_system|>", "tool_declare");
    out.text(kimi_tool_declaration(tools));
    out.special("<|im_end|>");
  }
  if (messages.empty() || (messages[0].role != "system" && messages[0].role != "developer")) {
    open("<|im_system|>", "system");
    out.text("You are Kimi, an AI assistant created by Moonshot AI.");
    out.special("<|im_end|>");
    out.text("\n");  // the template's own line break after this turn
  }
  size_t calls = 0;                  // calls so far: each call's index in its id
  std::vector<std::string> pending;  // ids of calls whose results have not come yet, in order
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_chat_role(m, i);
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (m.role == "user") {
      open("<|im_user|>", "user");
      out.content(m, false, MediaWrap::kKimi);
      out.special("<|im_end|>");
    } else if (m.role == "assistant") {
      open("<|im_assistant|>", "assistant");
      out.text(m.content, true);
      if (!m.tool_calls.empty()) {
        out.special("<|tool_calls_section_begin|>", true);
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          check_tool_call(m.tool_calls[k], i, k);
          const std::string id = "functions." + m.tool_calls[k].name + ":" + std::to_string(calls++);
          pending.push_back(id);
          out.special("<|tool_call_begin|>", true);
          out.text(id, true);
          out.special("<|tool_call_argument_begin|>", true);
          const ToolCall& call = m.tool_calls[k];
          out.text(call.arguments_text.empty() ? python_json(call.arguments) : call.arguments_text, true);
          out.special("<|tool_call_end|>", true);
        }
        out.special("<|tool_calls_section_end|>", true);
      }
      out.special("<|im_end|>", true);
    } else if (m.role == "tool") {
      std::string id = "functions.unknown:" + std::to_string(calls);  // a result without a call: as the template
      if (!pending.empty()) {
        id = pending.front();
        pending.erase(pending.begin());
      }
      open("<|im_system|>", "tool");
      out.text("## Return of " + id + "\n" + m.content);
      out.special("<|im_end|>");
    } else {
      open("<|im_system|>", "system");
      out.text(m.content);
      out.special("<|im_end|>");
    }
  }
  if (generation_prompt) open("<|im_assistant|>", "assistant");
  return out.list;
}

AssistantReply parse_kimi_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  const int32_t section = tok.id_of("<|tool_calls_section_begin|>"),
                section_end = tok.id_of("<|tool_calls_section_end|>"), begin = tok.id_of("<|tool_call_begin|>"),
                args = tok.id_of("<|tool_call_argument_begin|>"), end = tok.id_of("<|tool_call_end|>");
  auto malformed = [&](std::string why) { return malformed_reply(tok, ids, std::move(why)); };
  const auto first = std::find(ids.begin(), ids.end(), section);
  for (auto it = ids.begin(); it != first; ++it)
    if (*it == section_end || *it == begin || *it == args || *it == end)
      return malformed(str(tok.token_bytes(*it), " before <|tool_calls_section_begin|>"));
  AssistantReply r;
  r.content = tok.decode(std::span<const int32_t>(ids.begin(), first));
  if (first == ids.end()) return r;
  auto it = first + 1;
  auto skip_space = [&](auto stop) {
    auto e = it;
    while (e != ids.end() && e != stop && all_space(tok, std::span<const int32_t>(e, e + 1))) ++e;
    return e;
  };
  while (true) {
    it = skip_space(ids.end());
    if (it == ids.end()) return malformed("the tool calls are not closed by <|tool_calls_section_end|>");
    if (*it == section_end) break;
    const size_t k = r.tool_calls.size();
    if (*it != begin)
      return malformed(str("tool call ", k, ": expected <|tool_call_begin|>, found '",
                           tok.decode(std::span<const int32_t>(it, ids.end())), "'"));
    const auto a = std::find(it + 1, ids.end(), args);
    const auto e = std::find(it + 1, ids.end(), end);
    if (a == ids.end() || e == ids.end() || e < a)
      return malformed(str("tool call ", k, " lacks <|tool_call_argument_begin|> or <|tool_call_end|>"));
    const std::string id = trimmed(tok.decode(std::span<const int32_t>(it + 1, a)));
    std::string name = id.rfind("functions.", 0) == 0 ? id.substr(10) : id;
    if (const size_t colon = name.rfind(':'); colon != std::string::npos && colon + 1 < name.size() &&
                                              name.find_first_not_of("0123456789", colon + 1) == std::string::npos)
      name.resize(colon);
    if (name.empty()) return malformed(str("tool call ", k, " has no function name: '", id, "'"));
    nlohmann::json arguments;
    const std::string text = tok.decode(std::span<const int32_t>(a + 1, e));
    if (std::string why = read_arguments(text, k, arguments); !why.empty()) return malformed(why);
    r.tool_calls.push_back({id, name, std::move(arguments), text});
    it = e + 1;
  }
  if (!all_space(tok, std::span<const int32_t>(it + 1, ids.end())))
    return malformed(
        str("text after <|tool_calls_section_end|>: '", tok.decode(std::span<const int32_t>(it + 1, ids.end())), "'"));
  return r;
}

}  // namespace myriad
