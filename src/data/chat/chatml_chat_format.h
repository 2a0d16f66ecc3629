// The ChatML chat format: <|im_start|>ROLE\nTEXT<|im_end|>\n per message, picked by chat_format_of for a
// tokenizer with <|im_start|> and <|im_end|> (and none of the formats before it). Tool calls as Qwen's chat
// templates write them (Qwen2.5-Instruct's, Qwen3's; the Hermes function-calling convention), which need the
// tokenizer's <tool_call>, </tool_call>, <tool_response> and </tool_response> tokens:
//
//   conversation := header message* prompt?
//   header       := with tools: <|im_start|> "system\n" (FIRST "\n\n")? "# Tools\n\nYou may call one or more
//                   functions to assist with the user query.\n\nYou are provided with function signatures within
//                   <tools></tools> XML tags:\n<tools>" ("\n" TOOL)* "\n</tools>\n\nFor each function call, return
//                   a json object with function name and arguments within <tool_call></tool_call> XML tags:\n
//                   <tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
//                   <|im_end|> "\n"                  FIRST: the first message's content when it is a system one
//                   (which is then not written again); without tools nothing
//   message      := <|im_start|> ROLE "\n" TEXT <|im_end|> "\n"       system (developer as system), user, assistant
//   assistant    := with calls: <|im_start|> "assistant\n" TEXT ("\n"? call)+ <|im_end|> "\n", "\n" before every
//                   call but a first one with no TEXT
//   call         := <tool_call> "\n{\"name\": \"" NAME "\", \"arguments\": " ARGS "}\n" </tool_call>
//   tools        := a run of tool messages: <|im_start|> "user" ("\n" <tool_response> "\n" TEXT "\n"
//                   <tool_response>)+ <|im_end|> "\n"
//   prompt       := <|im_start|> "assistant\n"
//
// TOOL is the OpenAI tools entry as Python's json.dumps writes it (keys as the request wrote them), ARGS the call's
// arguments as the message gave them (OpenAI's string), else json.dumps of them. Qwen2.5's default system prompt
// ("You are Qwen, created by Alibaba Cloud...") is its model's identity, not ChatML's: it is not written, as
// Qwen3's template does not. Only the template writes special tokens; contents are encoded as text.
//
// A reply: TEXT, then optionally calls <tool_call> JSON </tool_call>, whitespace between and after, each JSON an
// object of exactly "name" (a string) and "arguments" (an object); the line break before the first call is not
// part of the content.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/chat/chat_format_support.h"
#include "data/chat/chat_template.h"

namespace myriad {

std::vector<ChatPiece> chatml_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                     bool generation_prompt);

AssistantReply parse_chatml_reply(const Tokenizer& tok, std::span<const int32_t> ids);

}  // namespace myriad
