// The ChatML chat format: see chatml_chat_format.h for the grammar.
#include "data/chat/chatml_chat_format.h"

#include "core/error.h"

namespace myriad {

std::vector<ChatPiece> chatml_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool generation_prompt) {
  ChatPieces out;
  size_t first = 0;
  if (!tools.empty()) {
    out.special("<|im_start|>");
    std::string head = "system\n";
    if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
      head += messages[0].content + "\n\n";
      first = 1;
    }
    head +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const ToolSpec& t : tools) head += "\n" + python_json(t.entry());
    out.text(head +
             "\n</tools>\n\nFor each function call, return a json object with function name and arguments within ");
    out.special("<tool_call>");
    out.special("</tool_call>");
    out.text(" XML tags:\n");
    out.special("<tool_call>");
    out.text("\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n");
    out.special("</tool_call>");
    out.special("<|im_end|>");
    out.text("\n");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_chat_role(m, i);
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (i < first) continue;
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") {
        out.special("<|im_start|>");
        out.text("user");
      }
      out.text("\n");
      out.special("<tool_response>");
      out.text("\n" + m.content + "\n");
      out.special("</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") {
        out.special("<|im_end|>");
        out.text("\n");
      }
      continue;
    }
    const bool assistant = m.role == "assistant";
    out.special("<|im_start|>");
    out.text((m.role == "developer" ? std::string("system") : m.role) + "\n");
    out.content(m, assistant);
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      const ToolCall& call = m.tool_calls[k];
      check_tool_call(call, i, k);
      if (k || !m.content.empty()) out.text("\n", true);
      out.special("<tool_call>", true);
      out.text("\n{\"name\": \"" + call.name + "\", \"arguments\": " +
                   (call.arguments_text.empty() ? python_json(call.arguments) : call.arguments_text) + "}\n",
               true);
      out.special("</tool_call>", true);
    }
    out.special("<|im_end|>", assistant);
    out.text("\n");
  }
  if (generation_prompt) {
    out.special("<|im_start|>");
    out.text("assistant\n");
  }
  return out.list;
}

AssistantReply parse_chatml_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  if (!tok.has_special("<tool_call>") || !tok.has_special("</tool_call>")) {  // no calls in this vocabulary
    AssistantReply r;
    r.content = tok.decode(ids);
    return r;
  }
  AssistantReply r = parse_json_calls(tok, ids, "<tool_call>", "</tool_call>");
  if (!r.tool_calls.empty() && r.content.ends_with('\n')) r.content.pop_back();  // the template's, before a call
  return r;
}

}  // namespace myriad
