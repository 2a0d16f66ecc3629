// What the chat formats (chat_template.cc, k3_chat_format.cc) share: the piece a rendered conversation is made of,
// and JSON written as the formats' templates write it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace myriad {

// One piece of a rendered conversation: a special token (by its text) or text, and whether it belongs to an
// assistant turn (what supervised fine-tuning predicts). encode_chat and render_chat read a list of these.
struct ChatPiece {
  std::string text;
  bool special = false;
  bool assistant = false;
};

// JSON as Python's json.dumps writes it with ensure_ascii=False (what Hugging Face's `tojson` filter gives a
// template): ", " between items, ": " after keys, non-ASCII as is; keys in the json's own order.
std::string python_json(const nlohmann::json& v);
std::string python_json(const nlohmann::ordered_json& v);

}  // namespace myriad
