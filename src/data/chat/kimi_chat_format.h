// Kimi K2's chat format (K2 and Kimi-Linear; Kimi-K2-Instruct's chat template), picked by chat_format_of for a
// tokenizer with <|im_user|> <|im_assistant|> <|im_system|> <|im_middle|> <|im_end|>:
//
//   conversation := declare? default? message* prompt?
//   declare      := <|im_system|> "tool_declare" <|im_middle|> TOOLS <|im_end|>                     when tools
//   default      := <|im_system|> "system" <|im_middle|> "You are Kimi, an AI assistant created by Moonshot AI."
//                   <|im_end|> "\n"                             when the first message is not a system message
//   message      := <|im_user|> "user" <|im_middle|> TEXT <|im_end|>
//                 | <|im_system|> "system" <|im_middle|> TEXT <|im_end|>                  system and developer
//                 | <|im_assistant|> "assistant" <|im_middle|> TEXT calls? <|im_end|>
//                 | <|im_system|> "tool" <|im_middle|> "## Return of " ID "\n" TEXT <|im_end|>
//   calls        := <|tool_calls_section_begin|> (<|tool_call_begin|> ID <|tool_call_argument_begin|> ARGS
//                   <|tool_call_end|>)+ <|tool_calls_section_end|>
//   prompt       := <|im_assistant|> "assistant" <|im_middle|>
//
// TOOLS is the OpenAI tools list as Python's json.dumps writes it (", ", ": ", non-ASCII as is; keys in the order
// the request wrote them, keep_declared_order; without it in OpenAI's order type, function / name, description,
// parameters, the schema's keys sorted). ID is functions.NAME:IDX, IDX counting the conversation's calls from 0; a
// result names the oldest unanswered call (functions.unknown:N without one). ARGS is the call's arguments as the
// message gave them, else as TOOLS. Only the template writes special tokens; contents are encoded as text.
//
// A reply: TEXT up to <|tool_calls_section_begin|>, then the calls as above (NAME from functions.NAME:IDX, the
// whole ID kept as the call's id, ARGS a JSON object kept as written) up to <|tool_calls_section_end|>, whitespace
// between the parts.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/chat/chat_format_support.h"
#include "data/chat/chat_template.h"

namespace myriad {

std::vector<ChatPiece> kimi_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                   bool generation_prompt);

AssistantReply parse_kimi_reply(const Tokenizer& tok, std::span<const int32_t> ids);

}  // namespace myriad
