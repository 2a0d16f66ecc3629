// DeepSeek-V3's chat format: the chat template of DeepSeek-V3-0324 (its tokenizer_config.json; V3.1 and later
// share its turns and add thinking), picked by chat_format_of for a tokenizer with <｜User｜> and <｜Assistant｜>.
// Writing ▁ for the template's U+2581 and BOS/EOS for <｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜>:
//
//   conversation := BOS SYSTEM tools? turn* prompt?
//   SYSTEM       := the system (and developer) messages' contents joined by "\n\n", wherever they stand
//   tools        := "\n\n# Tools\n\n...<tools>" ("\n" TOOL)* "\n</tools>\n\n" instructions          when tools
//   user         := <｜User｜> TEXT <｜Assistant｜>
//   assistant    := after results: <｜tool▁outputs▁end｜> TEXT EOS, else TEXT EOS                  no tool calls
//                 | outputs_end? TEXT <｜tool▁calls▁begin｜> call ("\n" call)* <｜tool▁calls▁end｜> EOS
//   call         := <｜tool▁call▁begin｜> "function" <｜tool▁sep｜> NAME "\n```json\n" ARGS "\n```" <｜tool▁call▁end｜>
//   tool         := first after calls: <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜> TEXT <｜tool▁output▁end｜>,
//                   later "\n" <｜tool▁output▁begin｜> TEXT <｜tool▁output▁end｜>
//   end          := <｜tool▁outputs▁end｜> when the conversation ends on a result
//   prompt       := <｜Assistant｜> when the last turn is neither a user's (which opened it) nor a result
//
// ARGS is the call's arguments as the message gave them (OpenAI's string), else Python's json.dumps of them.
// DeepSeek-V3's template declares no tools; with tools, myriad appends them to the system prompt in the words of
// vLLM's DeepSeek-V3 tool template (examples/tool_chat_template_deepseekv3.jinja): TOOL is the OpenAI tools
// entry as Python's json.dumps writes it (keys as the request wrote them), the instructions name the call syntax
// above with its special tokens; the stray indentation and blank lines that template's Jinja layout leaves are not
// reproduced. Only the template writes special tokens; contents are encoded as text.
//
// A reply (after the prompt): TEXT, then optionally <｜tool▁calls▁begin｜> and calls as above (whitespace between)
// up to <｜tool▁calls▁end｜>; TYPE must be "function", the fence "```json" ... "```" (whitespace around it free),
// ARGS a JSON object, kept as written in arguments_text.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/chat/chat_format_support.h"
#include "data/chat/chat_template.h"

namespace myriad {

std::vector<ChatPiece> deepseek_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                       bool generation_prompt);

AssistantReply parse_deepseek_reply(const Tokenizer& tok, std::span<const int32_t> ids);

}  // namespace myriad
