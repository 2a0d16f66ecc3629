// DeepSeek-V3's chat format: see deepseek_chat_format.h for the grammar.
#include "data/chat/deepseek_chat_format.h"

#include <algorithm>

#include "core/error.h"

namespace myriad {

namespace {

constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kEos = "<｜end▁of▁sentence｜>";
constexpr const char* kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr const char* kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr const char* kCallBegin = "<｜tool▁call▁begin｜>";
constexpr const char* kCallEnd = "<｜tool▁call▁end｜>";
constexpr const char* kSep = "<｜tool▁sep｜>";

}  // namespace

std::vector<ChatPiece> deepseek_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                       bool generation_prompt) {
  ChatPieces out;
  out.special(kBos);
  std::string system;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_chat_role(m, i);
    if (m.role == "system" || m.role == "developer") system += (system.empty() ? "" : "\n\n") + m.content;
  }
  out.text(system);
  if (!tools.empty()) {
    std::string list =
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolSpec& t : tools) list += "\n" + python_json(t.entry());
    out.text(list + "\n</tools>\n\nFor function call returns, you should first print ");
    out.special(kCallsBegin);
    out.text("\n\nFor each function call, you should return object like:\n");
    out.special(kCallBegin);
    out.text("function");
    out.special(kSep);
    out.text("<function_name>\n```json\n<function_arguments_in_json_format>\n```");
    out.special(kCallEnd);
    out.text("\n\nAt the end of function call returns, you should print ");
    out.special(kCallsEnd);
    out.special(kEos);
  }
  bool in_results = false, first_result = true, last_user = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (m.role == "user") {
      in_results = false;  // as the template: a user turn after results does not close them
      last_user = true;
      out.special("<｜User｜>");
      out.content(m);
      out.special("<｜Assistant｜>");
    } else if (m.role == "assistant") {
      last_user = false;
      if (in_results) out.special("<｜tool▁outputs▁end｜>");  // the prompt: the model writes on after it
      in_results = false;
      out.text(m.content, true);
      if (!m.tool_calls.empty()) {
        first_result = true;
        out.special(kCallsBegin, true);
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          const ToolCall& call = m.tool_calls[k];
          check_tool_call(call, i, k);
          if (k) out.text("\n", true);
          out.special(kCallBegin, true);
          out.text("function", true);
          out.special(kSep, true);
          out.text(call.name + "\n```json\n" +
                       (call.arguments_text.empty() ? python_json(call.arguments) : call.arguments_text) + "\n```",
                   true);
          out.special(kCallEnd, true);
        }
        out.special(kCallsEnd, true);
      }
      out.special(kEos, true);
    } else if (m.role == "tool") {
      last_user = false;
      in_results = true;
      if (first_result)
        out.special("<｜tool▁outputs▁begin｜>");
      else
        out.text("\n");
      first_result = false;
      out.special("<｜tool▁output▁begin｜>");
      out.text(m.content);
      out.special("<｜tool▁output▁end｜>");
    }
  }
  if (in_results) out.special("<｜tool▁outputs▁end｜>");
  if (generation_prompt && !last_user && !in_results) out.special("<｜Assistant｜>");
  return out.list;
}

AssistantReply parse_deepseek_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  AssistantReply r;
  if (!tok.has_special(kCallsBegin)) {  // a vocabulary without DeepSeek's tool tokens: all of it is text
    r.content = tok.decode(ids);
    return r;
  }
  const int32_t calls_begin = tok.id_of(kCallsBegin), calls_end = tok.id_of(kCallsEnd),
                call_begin = tok.id_of(kCallBegin), call_end = tok.id_of(kCallEnd), sep = tok.id_of(kSep);
  auto malformed = [&](std::string why) { return malformed_reply(tok, ids, std::move(why)); };
  auto decoded = [&](auto from, auto to) { return tok.decode(std::span<const int32_t>(from, to)); };
  const auto first = std::find(ids.begin(), ids.end(), calls_begin);
  for (auto it = ids.begin(); it != first; ++it)
    if (*it == calls_end || *it == call_begin || *it == call_end || *it == sep)
      return malformed(str(tok.token_bytes(*it), " before ", kCallsBegin));
  r.content = decoded(ids.begin(), first);
  if (first == ids.end()) return r;
  auto it = first + 1;
  while (true) {
    while (it != ids.end() && all_space(tok, std::span<const int32_t>(it, it + 1))) ++it;
    if (it == ids.end()) return malformed(str("the tool calls are not closed by ", kCallsEnd));
    if (*it == calls_end) break;
    const size_t k = r.tool_calls.size();
    if (*it != call_begin)
      return malformed(str("tool call ", k, ": expected ", kCallBegin, ", found '", decoded(it, ids.end()), "'"));
    const auto s = std::find(it + 1, ids.end(), sep);
    const auto e = std::find(it + 1, ids.end(), call_end);
    if (s == ids.end() || e == ids.end() || e < s)
      return malformed(str("tool call ", k, " lacks ", kSep, " or ", kCallEnd));
    if (const std::string type = trimmed(decoded(it + 1, s)); type != "function")
      return malformed(str("tool call ", k, "'s type is '", type, "', not 'function'"));
    const std::string body = decoded(s + 1, e);
    const size_t line = body.find('\n');
    const std::string name = trimmed(body.substr(0, line));
    if (line == std::string::npos || name.empty())
      return malformed(str("tool call ", k, " has no function name on a line of its own: '", body, "'"));
    const std::string fenced = trimmed(body.substr(line + 1));
    if (fenced.size() < 10 || !fenced.starts_with("```json") || !fenced.ends_with("```"))
      return malformed(str("tool call ", k, "'s arguments are not in a ```json fence: '", fenced, "'"));
    ToolCall call{"call_" + std::to_string(k), name, nlohmann::json(), trimmed(fenced.substr(7, fenced.size() - 10))};
    if (std::string why = read_arguments(call.arguments_text, k, call.arguments); !why.empty()) return malformed(why);
    r.tool_calls.push_back(std::move(call));
    it = e + 1;
  }
  if (!all_space(tok, std::span<const int32_t>(it + 1, ids.end())))
    return malformed(str("text after ", kCallsEnd, ": '", decoded(it + 1, ids.end()), "'"));
  return r;
}

}  // namespace myriad
