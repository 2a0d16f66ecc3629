// What the chat formats (chat_template.cc, k3_chat_format.cc, deepseek_chat_format.cc) share: the piece a rendered
// conversation is made of, the checks of a message, reading a reply's arguments, and JSON written as the formats'
// templates write it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "data/chat_template.h"

namespace myriad {

// One piece of a rendered conversation: a special token (by its text) or text, and whether it belongs to an
// assistant turn (what supervised fine-tuning predicts). encode_chat and render_chat read a list of these.
struct ChatPiece {
  std::string text;
  bool special = false;
  bool assistant = false;
};

// The checks every format makes of a message: its role (kValue naming messages[i]) and call k's name and
// arguments (an object).
void check_chat_role(const ChatMessage& m, size_t i);
void check_tool_call(const ToolCall& call, size_t i, size_t k);

// Whether every one of the tokens is whitespace (what formats allow between calls).
bool all_space(const Tokenizer& tok, std::span<const int32_t> ids);
// Reads the arguments of a reply's call k into `out`: "" when they are a JSON object, else why not.
std::string read_arguments(const std::string& body, size_t k, nlohmann::json& out);

// JSON as Python's json.dumps writes it with ensure_ascii=False (what Hugging Face's `tojson` filter gives a
// template): ", " between items, ": " after keys, non-ASCII as is; keys in the json's own order.
std::string python_json(const nlohmann::json& v);
std::string python_json(const nlohmann::ordered_json& v);

}  // namespace myriad
