// The chat template (DESIGN §3): how a conversation becomes tokens, and how an assistant reply's tokens become its
// text and tool calls. One template for POST /v1/chat/completions, POST /tokenize {"messages": ...}, `myriad chat`,
// SFT (data/conversations.h) and the agent's episodes, so a conversation gives the same tokens everywhere.
//
// The grammar, exactly (no spaces or newlines are added anywhere):
//
//   conversation := tools? message* "<|assistant|>"?          the last part: the generation prompt
//   tools        := "<|system|>" "tools:" (" " TOOL)+          when tools are given; TOOL = name "(" a1 "," a2 ")",
//                                                              the parameters' property names, sorted
//   message      := system | user | assistant | tool
//   system       := "<|system|>" TEXT                          role "system" or "developer"
//   user         := "<|user|>" TEXT
//   assistant    := "<|assistant|>" TEXT call* "<|endoftext|>"
//   call         := "<|tool_call|>" CALL "<|/tool_call|>"
//   CALL         := {"name":NAME,"arguments":ARGS}               compact JSON, ARGS an object with sorted keys
//   tool         := "<|tool_result|>" TEXT "<|/tool_result|>"  results follow the calls in their order
//
// TEXT is a message's content, unchanged, encoded with Specials::kAsText (data/tokenizer.h): a user message or
// a tool result that contains "<|assistant|>" or "<|tool_result|>" is text, never a turn; only the template emits
// special tokens. Tool call ids and function names of tool messages are not rendered (results are matched to
// calls by order). E.g. user "Price of 2 apples?", assistant call lookup_price {"item":"apple"}, tool "0.5":
//
//   <|user|>Price of 2 apples?<|assistant|><|tool_call|>{"name":"lookup_price","arguments":{"item":"apple"}}
//   <|/tool_call|><|endoftext|><|tool_result|>0.5<|/tool_result|><|assistant|>          (one line)
//
// A reply ends at <|endoftext|> (the engine's end of sequence) or where the model starts another turn
// (chat_stop_strings()); neither is part of the reply. No <s> is added.
//
// Leaves out: images (<|image|> is reserved), names, several choices.
//
// Other models' formats (ChatFormat), picked from the special tokens of the tokenizer they ship (chat_format_of):
//   kimi (K2 / Kimi-Linear, the tokenizer has <|im_middle|>): each turn is <|im_user|> / <|im_assistant|> /
//     <|im_system|> (system and the rest), the role name as text, <|im_middle|>, the content, <|im_end|>. When the
//     first message is not a system message, the default system turn "You are Kimi, an AI assistant created by
//     Moonshot AI." comes first. Generation prompt: <|im_assistant|>assistant<|im_middle|>.
//   deepseek-v3 (<｜User｜>): <｜begin▁of▁sentence｜>, the system contents, then <｜User｜>TEXT and
//     <｜Assistant｜>TEXT<｜end▁of▁sentence｜> per turn. Generation prompt: <｜Assistant｜>.
//   chatml (<|im_start|>): <|im_start|>ROLE\nTEXT<|im_end|>\n per turn. Generation prompt: <|im_start|>assistant\n.
// Role names and the newlines are text; only the markers are special tokens; contents are encoded with
// Specials::kAsText as in myriad's format. A reply ends at the format's end of turn (chat_stop_strings). Tool
// calls and tool declarations exist only in myriad's format so far: the others refuse tools and tool messages
// with kUnsupported naming the format.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace myriad {

enum class ChatFormat { kMyriad, kKimi, kDeepSeekV3, kChatMl };
const char* chat_format_name(ChatFormat f);  // "myriad", "kimi", "deepseek-v3", "chatml"
// The format of a tokenizer's model, from its special tokens (above); myriad's SentencePiece is kMyriad. Throws
// kUnsupported naming the formats it knows when the tokenizer has none of their markers.
ChatFormat chat_format_of(const Tokenizer& tok);

struct ToolCall {
  std::string id;            // not rendered; "call_<n>" when a reply is parsed
  std::string name;          // the function's name
  nlohmann::json arguments;  // a JSON object
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;  // "system", "developer" (same as system), "user", "assistant", "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only; not rendered
};

// A tool the model may call: its name and its parameters' JSON schema (rendered: the property names, sorted).
struct ToolSpec {
  std::string name;
  std::string description;    // not rendered
  nlohmann::json parameters;  // the JSON schema ({"type":"object","properties":{...}}); may be null
  std::vector<std::string> argument_names() const;
};

struct ChatTokens {
  std::vector<int32_t> ids;
  // Per token: 1 for the tokens of an assistant turn after its <|assistant|> (content, calls and the closing
  // <|endoftext|>): what supervised fine-tuning predicts; 0 for the rest (system, user, tool results, markers).
  std::vector<uint8_t> assistant;
};

// The conversation's tokens, with the generation prompt when asked. Throws kValue naming messages[i] for an
// unknown role, tool calls on a message that is not the assistant's, or a call whose arguments are not an object.
// The format is chat_format_of(tok).
ChatTokens encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages,
                       std::span<const ToolSpec> tools = {}, bool generation_prompt = true);

// The same conversation as text (each special token as its text): for display and logs. Not for encoding:
// encode(render_chat(...)) would parse special-token text inside the contents.
std::string render_chat(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools = {},
                        bool generation_prompt = true, ChatFormat format = ChatFormat::kMyriad);

// Stop strings that end a chat reply besides <|endoftext|>: the start of another turn.
std::vector<std::string> chat_stop_strings(ChatFormat format = ChatFormat::kMyriad);

// An assistant reply's tokens (after "<|assistant|>", without the closing <|endoftext|>), read by the grammar:
// content up to the first <|tool_call|>, then calls, each CALL a JSON object with a string "name" and an object
// "arguments", separated by nothing but whitespace. Anything else (an unclosed call, bad JSON, text after a
// call, a <|/tool_call|> with no call open) makes the reply malformed: `error` says what and where, `content` is the
// whole reply as text and there are no calls (a model's malformed call is text, never an exception).
struct AssistantReply {
  std::string content;
  std::vector<ToolCall> tool_calls;
  std::string error;  // empty when well-formed
};
AssistantReply parse_assistant_reply(const Tokenizer& tok, std::span<const int32_t> ids);

// The text of one call as the template writes it: {"name":...,"arguments":{...}}.
std::string tool_call_text(const ToolCall& call);

}  // namespace myriad
