// Conversations in OpenAI's format, read from JSON (a chat request's "messages" and "tools", or a line of an SFT
// file), with one error per problem naming the field ("messages[2].tool_calls[0].function.arguments") and the
// rule. The server answers such an error as a 400 whose param is the field; `myriad sft` as FILE:LINE: field.
//
// Message fields read: role (required), content (a string, an array of {"type":"text","text":...} parts and, in
// user messages, {"type":"image_url","image_url":{"url":...}} parts (ChatMessage::images; the URL is kept as given),
// or null), tool_calls (assistant: [{"id", "type":"function", "function":{"name", "arguments"}}], arguments a string
// holding a JSON object, as OpenAI sends it, or the object itself), tool_call_id (tool). Other fields (name,
// refusal, ...) are ignored. Tools: [{"type":"function","function":{"name","description","parameters"}}].
//
// An SFT file (JSONL, OpenAI's fine-tuning format): one conversation per line, {"messages": [...], "tools": [...]}
// ("tools" optional); blank lines are skipped. The whole file is checked before anything is trained on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/chat/chat_template.h"

namespace myriad {

// An error in a JSON document, naming the field it is about.
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message, std::string code = "")
      : Error(ErrorKind::kValue, message), field_(std::move(field)), code_(std::move(code)) {}
  const std::string& field() const { return field_; }
  const std::string& code() const { return code_; }  // "invalid_type" for a value of the wrong JSON type

 private:
  std::string field_, code_;
};

// The "messages" array. Throws FieldError (an empty array is allowed here; the server refuses it itself).
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages);

// The "tools" array. Throws FieldError for a tool that is not a function, has no name, or a name used twice.
std::vector<ToolSpec> tool_specs_from_json(const nlohmann::json& tools);

// The OpenAI JSON of messages (tool call arguments as JSON strings), the inverse of chat_messages_from_json.
nlohmann::json chat_messages_to_json(const std::vector<ChatMessage>& messages);

struct Conversation {
  std::vector<ChatMessage> messages;
  std::vector<ToolSpec> tools;
  int64_t line = 0;  // in its file, from 1
};

// Every conversation of a JSONL file. Throws kIo for an unreadable file, kFormat "FILE:LINE: field: what" for the
// first bad line (not JSON, not an object, no messages, a bad message, no assistant message to learn from).
std::vector<Conversation> read_conversations(const std::string& path);

// Writes conversations as JSONL (atomically), each {"messages": [...], "tools": [...]}.
void write_conversations(const std::string& path, const std::vector<Conversation>& conversations);

}  // namespace myriad
