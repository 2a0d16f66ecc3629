// The chat template (DESIGN §3): how a conversation [{role, content}] becomes one prompt string. The same template
// is used by POST /v1/chat/completions, POST /tokenize {"messages": ...} and `myriad chat`, so a conversation gives
// the same tokens everywhere.
//
// The template, exactly (no spaces or newlines are added anywhere; a message's content is inserted unchanged):
//
//   system or developer   "<|system|>" content
//   user                  "<|user|>" content
//   assistant             "<|assistant|>" content "<|endoftext|>"
//   tool                  "<|tool_result|>" content "<|/tool_result|>"
//
// in the order given, followed by "<|assistant|>" (the generation prompt). E.g. system "Be brief.", user "Hi",
// assistant "Hello!", user "2+2?" renders as
//
//   <|system|>Be brief.<|user|>Hi<|assistant|>Hello!<|endoftext|><|user|>2+2?<|assistant|>
//
// A reply ends at <|endoftext|> (the engine's end of sequence), or where the model starts a new turn
// (chat_stop_strings(): "<|user|>", "<|system|>"); neither is part of the reply. No <s> is added: the tokenizer's
// encode() of the string is the prompt.
//
// NOTE: the tokenizer encodes the text of a special token as that token wherever it occurs (train/tokenizer.h), so
// a message that contains "<|assistant|>" literally starts a turn; the template does not escape it.
// Leaves out: tool calls inside assistant messages, images, names.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace myriad {

struct ChatMessage {
  std::string role;  // "system", "developer" (same as system), "user", "assistant", "tool"
  std::string content;
};

// Renders the conversation with the generation prompt. Throws kValue for an unknown role, naming
// messages[i].role, the value and the roles allowed; an empty conversation is allowed (just "<|assistant|>").
std::string render_chat(std::span<const ChatMessage> messages);

// Stop strings that end a chat reply besides <|endoftext|>: the start of another turn.
std::vector<std::string> chat_stop_strings();

}  // namespace myriad
