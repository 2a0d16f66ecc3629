// What the chat formats (chat_template.cc and the <format>_chat_format.cc files) share: the piece a rendered
// conversation is made of, the checks of a message, reading a reply's arguments, and JSON written as the formats'
// templates write it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat/chat_template.h"

namespace myriad {

// One piece of a rendered conversation: a special token (by its text) or text, and whether it belongs to an
// assistant turn (what supervised fine-tuning predicts). encode_chat and render_chat read a list of these.
struct ChatPiece {
  std::string text;
  bool special = false;
  bool assistant = false;
  bool image = false;  // an image's marker (special): encode_chat writes the model's image token
};

// How a format frames an image's marker (the run of media_placeholder_token_id the image's tokens take):
//   kNone: the marker alone (myriad's, ChatML's and DeepSeek's formats);
//   kKimi: <|media_begin|>image<|media_content|> MARKER <|media_end|> (Kimi-VL and K2.5's templates; the marker is
//          their <|media_pad|>);
//   kK3:   the same with the image's size after "image" when it is known: <|media_begin|>image 320x240<|media_content|>
//          (K3's processor writes width x height of the image given).
enum class MediaWrap { kNone, kKimi, kK3 };
// The special tokens a wrap writes (empty for kNone).
std::vector<const char*> media_wrap_tokens(MediaWrap wrap);

// A message's content as pieces: its text, with an image marker at each image's place (ChatMessage::images).
void append_content(std::vector<ChatPiece>& out, const ChatMessage& m, bool assistant = false,
                    MediaWrap wrap = MediaWrap::kNone);

// A rendered conversation as it is written: special tokens by their text, and text (empty text adds nothing).
struct ChatPieces {
  std::vector<ChatPiece> list;
  void special(const char* s, bool assistant = false) { list.push_back({s, true, assistant}); }
  void text(std::string s, bool assistant = false) {
    if (!s.empty()) list.push_back({std::move(s), false, assistant});
  }
  void content(const ChatMessage& m, bool assistant = false, MediaWrap wrap = MediaWrap::kNone) {
    append_content(list, m, assistant, wrap);
  }
};

// The checks every format makes of a message: its role (kValue naming messages[i]) and call k's name and
// arguments (an object).
void check_chat_role(const ChatMessage& m, size_t i);
void check_tool_call(const ToolCall& call, size_t i, size_t k);

// Whether every one of the tokens is whitespace (what formats allow between calls).
bool all_space(const Tokenizer& tok, std::span<const int32_t> ids);
// s without the spaces, tabs and line breaks at either end.
std::string trimmed(std::string_view s);
// A reply that is not of the format's grammar: all of it is the content, `why` the error, no calls.
AssistantReply malformed_reply(const Tokenizer& tok, std::span<const int32_t> ids, std::string why);
// Reads the arguments of a reply's call k into `out`: "" when they are a JSON object, else why not.
std::string read_arguments(const std::string& body, size_t k, nlohmann::json& out);

// A reply whose calls are JSON objects {"name": ..., "arguments": {...}} between two special tokens (myriad's
// <|tool_call|> ... <|/tool_call|>, ChatML's <tool_call> ... </tool_call>): the content up to the first call, then
// the calls with nothing but whitespace between and after; anything else makes it malformed (with the reason).
AssistantReply parse_json_calls(const Tokenizer& tok, std::span<const int32_t> ids, const char* open_marker,
                                const char* close_marker);

// JSON as Python's json.dumps writes it with ensure_ascii=False (what Hugging Face's `tojson` filter gives a
// template): ", " between items, ": " after keys, non-ASCII as is; keys in the json's own order.
std::string python_json(const nlohmann::json& v);
std::string python_json(const nlohmann::ordered_json& v);

}  // namespace myriad
