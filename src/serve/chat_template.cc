// The chat template: see chat_template.h for the exact format.
#include "serve/chat_template.h"

#include "core/error.h"

namespace myriad {

std::string render_chat(std::span<const ChatMessage> messages) {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" || m.role == "developer") {
      out += "<|system|>" + m.content;
    } else if (m.role == "user") {
      out += "<|user|>" + m.content;
    } else if (m.role == "assistant") {
      out += "<|assistant|>" + m.content + "<|endoftext|>";
    } else if (m.role == "tool") {
      out += "<|tool_result|>" + m.content + "<|/tool_result|>";
    } else {
      throw_error(ErrorKind::kValue, "messages[", i, "].role = '", m.role,
                  "': must be one of system, developer, user, assistant, tool");
    }
  }
  out += "<|assistant|>";
  return out;
}

std::vector<std::string> chat_stop_strings() {
  return {"<|user|>", "<|system|>"};
}

}  // namespace myriad
