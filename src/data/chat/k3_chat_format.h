// Kimi K3's chat format: the tags of K3's Python renderer (encoding_k3.py), facts read from the Jinja port of it
// that llama.cpp bundles (models/templates/Kimi-K3.jinja). Picked by chat_format_of for a tokenizer with the
// specials <|open|> <|sep|> <|close|> <|end_of_msg|>. With the renderer's defaults (thinking on, thinking_effort
// "max"):
//
//   conversation := declare? effort message* choice? prompt?
//   OPEN(t, a..)  := <|open|> t ( ' ' k '="' v '"')* <|sep|>       attribute values with & and " escaped
//   CLOSE(t)      := <|close|> t <|sep|>
//   declare       := OPEN(message, role=system, type=tool-declare) "# Tools\nHere are the available tools,
//                    described in JSONSchema.\n\n```json\n" SORTED(tools) "\n```" CLOSE(message) <|end_of_msg|>
//   effort        := OPEN(message, role=system, type=thinking-effort) "`thinking_effort` guides on how much to think
//                    in your thinking channel (not including the response channel), supported values include
//                    `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=max`."
//                    CLOSE(message) <|end_of_msg|>
//   user, system  := OPEN(message, role=R) TEXT CLOSE(message) <|end_of_msg|>      (developer as system)
//   assistant     := OPEN(message, role=assistant) OPEN(think) REASONING CLOSE(think) OPEN(response) TEXT
//                    CLOSE(response) calls? CLOSE(message) <|end_of_msg|>
//   calls         := OPEN(tools) (OPEN(call, tool=NAME, index=I) args CLOSE(call))+ CLOSE(tools)   I from 1
//   args          := OPEN(json, type=object) TEXT CLOSE(json)                      arguments given as a string
//                  | (OPEN(argument, key=K, type=T) VALUE CLOSE(argument))*        as an object: T boolean, null,
//                                                                                  number, string, object, array;
//                                                                                  VALUE a string as is, else JSON
//   tool          := OPEN(message, role=tool, tool=NAME, index=I) TEXT CLOSE(message) <|end_of_msg|>
//   choice        := OPEN(message, role=system, type=tool-choice) "The system is invoked with `tool_choice=required`.\n
//                    You MUST call tools in the next message." (none: "...`tool_choice=none`.\nYou MUST NOT call
//                    any tools in the next message.") CLOSE(message) <|end_of_msg|>   after the messages
//   prompt        := OPEN(message, role=assistant) OPEN(think)
// SORTED is compact JSON with every object's keys sorted (case-insensitively, as Jinja's dictsort); the other JSON
// (argument values) is Python's json.dumps. A run of tool messages after an assistant's calls is written in the
// calls' order when every message names a call's id (tool=that call's name), else as given (tool=the call at the
// same position); I counts the results since that assistant message, from 1. Only the template writes specials.
//
// Images and videos inside a message are framed by the media specials (data/chat/chat_template.cc, MediaWrap::kK3).
// Leaves out: the renderer's options (thinking off, other efforts, response_format system messages, message names,
// systems that add tools); an assistant's argument object is written with its keys sorted (the JSON parser keeps them
// so), where the renderer keeps the object's own order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "data/chat/chat_format_support.h"
#include "data/chat/chat_template.h"

namespace myriad {

// The conversation's pieces. Throws kValue naming messages[i] for what the format cannot render (a tool result
// whose call cannot be found, tool calls on a message that is not an assistant's).
std::vector<ChatPiece> k3_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                 bool generation_prompt, ToolChoice tool_choice = ToolChoice::kAuto);

// A reply generated after the prompt (inside the think channel), without <|end_of_msg|>: its reasoning, the
// response channel's text as content, and the calls (name, arguments as a JSON object; a json block's text kept
// as arguments_text). A reply that ends inside the think or the response channel (cut by max_tokens) is what it
// wrote so far. Anything else is malformed: all of it is content and `error` says what.
AssistantReply parse_k3_reply(const Tokenizer& tok, std::span<const int32_t> ids);

}  // namespace myriad
