// The chat template (docs/design.md §3): how a conversation becomes tokens, and how an assistant reply's tokens become
// its text and tool calls. One template for POST /v1/chat/completions, POST /tokenize {"messages": ...}, `myriad chat`,
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
// TEXT is a message's content, unchanged, encoded with Specials::kAsText (data/tokenize/tokenizer.h): a user message or
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
// Images: a user message's images (ChatMessage::images) are written where they stand in its TEXT as one image
// marker each (rendered "<|image|>"; encoded as the model's media_placeholder_token_id, in every format), which
// the server and `myriad chat` expand to the image's run of placeholders. Leaves out: names, several choices.
//
// Other models' formats (ChatFormat), picked from the special tokens of the tokenizer they ship (chat_format_of):
//   k3 (<|open|> <|sep|> <|close|> <|end_of_msg|>): Kimi K3's tagged messages with think and response channels,
//     see data/chat/k3_chat_format.h.
//   kimi (K2 / Kimi-Linear, the tokenizer has <|im_middle|>): Kimi-K2-Instruct's chat template with its tools,
//     calls and results; see data/chat/kimi_chat_format.h.
//   deepseek-v3 (<｜User｜> <｜Assistant｜>): DeepSeek-V3-0324's template, with calls and results, and tools declared
//     in the system prompt; see data/chat/deepseek_chat_format.h.
//   chatml (<|im_start|>): <|im_start|>ROLE\nTEXT<|im_end|>\n per turn, calls and results as Qwen's templates write
//     them; see data/chat/chatml_chat_format.h. Generation prompt: <|im_start|>assistant\n.
// Role names and the newlines are text; only the markers are special tokens; contents are encoded with
// Specials::kAsText as in myriad's format. A reply ends at the format's end of turn (chat_stop_strings). Every
// format has tool calls and declarations.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/tokenize/tokenizer.h"

namespace myriad {

enum class ChatFormat { kMyriad, kKimi, kK3, kDeepSeekV3, kChatMl };
const char* chat_format_name(ChatFormat f);  // "myriad", "kimi", "k3", "deepseek-v3", "chatml"
// The format of a tokenizer's model, from its special tokens (above); myriad's SentencePiece is kMyriad. Throws
// kUnsupported naming the formats it knows when the tokenizer has none of their markers.
ChatFormat chat_format_of(const Tokenizer& tok);

struct ToolCall {
  std::string id;            // not rendered; "call_<n>" when a reply is parsed
  std::string name;          // the function's name
  nlohmann::json arguments;  // a JSON object
  // The arguments' text as a message gave it (OpenAI's string) or a kimi reply wrote it: rendered verbatim by the
  // kimi format, returned as is by the server; empty: written from `arguments`
  std::string arguments_text = {};
  // The arguments as OpenAI's messages carry them: arguments_text, else compact JSON.
  std::string arguments_string() const { return arguments_text.empty() ? arguments.dump() : arguments_text; }
};

// An image of a message (an OpenAI content part of type image_url): where it stands in the message's content (a
// byte offset: the text of the parts before it) and its URL as given (a data: URI; data/media/image.h reads it). The
// template writes one image marker there, which the caller expands to the image's run of tokens.
struct ChatImage {
  size_t at = 0;
  std::string url;
  std::string field = {};  // where it was read ("messages[0].content[1].image_url.url"), for errors; not rendered
  // The decoded image's size in pixels, once known (0: not decoded): the k3 format writes it ("image 320x240").
  int64_t width = 0, height = 0;
  bool video = false;  // a video_url part (frames in chunks; the kimi and k3 formats write "video")
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;  // "system", "developer" (same as system), "user", "assistant", "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only; not rendered
  std::string reasoning_content;     // assistant only: its thinking (rendered by the k3 format's think channel)
  std::vector<ChatImage> images;     // user only: its images, in order, each at its place in `content`
};

// A tool the model may call: its name and its parameters' JSON schema (rendered: the property names, sorted).
struct ToolSpec {
  std::string name;
  std::string description;    // not rendered
  nlohmann::json parameters;  // the JSON schema ({"type":"object","properties":{...}}); may be null
  // This tool's entry of the "tools" list as written (compact JSON, keys in their order; keep_declared_order), for
  // the formats that render the list (kimi, k3); empty: built from the fields above
  std::string declaration = {};
  // OpenAI's function "strict": the arguments follow the schema exactly; served with constrained decoding
  // (data/chat/tool_call_grammar.h). Not rendered.
  bool strict = false;
  // The entry {"type": "function", "function": {...}}: `declaration` when set, else from the fields.
  nlohmann::ordered_json entry() const;
  std::vector<std::string> argument_names() const;
};

// Sets each tool's `declaration` from the raw JSON text (a request body, a conversations line) whose "tools" list
// they were read from, keys in the order written: the parsed json keeps keys sorted, the kimi format renders the
// list as Python's json.dumps would. Leaves them unset when the text has no such list of the same length.
void keep_declared_order(std::vector<ToolSpec>& tools, std::string_view raw_json);

// A request's tool_choice where the format writes it into the conversation (k3: a system message before the
// generation prompt). The other formats ignore it: the server forces or bans their tool-call marker instead.
enum class ToolChoice : uint8_t { kAuto, kNone, kRequired };

struct ChatTokens {
  std::vector<int32_t> ids;
  // Per token: 1 for the tokens of an assistant turn after its <|assistant|> (content, calls and the closing
  // <|endoftext|>): what supervised fine-tuning predicts; 0 for the rest (system, user, tool results, markers).
  std::vector<uint8_t> assistant;
};

// Throws kUnsupported naming the token when the tokenizer lacks one its format writes tool calls or results with
// (a ChatML vocabulary without <tool_call>, say). encode_chat checks it for a conversation with tools or calls.
void require_tool_tokens(const Tokenizer& tok);

// The conversation's tokens, with the generation prompt when asked. Each image of a user message is one
// image_token (the model's media_placeholder_token_id) at its place, whatever the format; kValue when a message
// has images and image_token is not given. Throws kValue naming messages[i] for an
// unknown role, tool calls on a message that is not the assistant's, or a call whose arguments are not an object.
// The format is chat_format_of(tok).
ChatTokens encode_chat(const Tokenizer& tok, std::span<const ChatMessage> messages,
                       std::span<const ToolSpec> tools = {}, bool generation_prompt = true,
                       ToolChoice tool_choice = ToolChoice::kAuto, std::optional<int32_t> image_token = {});

// The same conversation as text (each special token as its text): for display and logs. Not for encoding:
// encode(render_chat(...)) would parse special-token text inside the contents.
std::string render_chat(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools = {},
                        bool generation_prompt = true, ChatFormat format = ChatFormat::kMyriad,
                        ToolChoice tool_choice = ToolChoice::kAuto);

// Stop strings that end a chat reply besides <|endoftext|>: the start of another turn.
std::vector<std::string> chat_stop_strings(ChatFormat format = ChatFormat::kMyriad);

// An assistant reply's tokens (after the generation prompt, without the closing end of turn), read by the format's
// grammar (chat_format_of(tok)). myriad: content up to the first <|tool_call|>, then calls, each CALL a JSON object
// with a string "name" and an object "arguments", separated by nothing but whitespace. kimi: content up to
// <|tool_calls_section_begin|>, then the calls as above (NAME from functions.NAME:IDX, the whole ID kept as the
// call's id; ARGS a JSON object) up to <|tool_calls_section_end|>, whitespace between. Anything else (an unclosed
// call, bad JSON, text after the calls, a closing marker with nothing open) makes the reply malformed: `error`
// says what and where, `content` is the whole reply as text and there are no calls (a model's malformed call is
// text, never an exception). k3, deepseek-v3, chatml: see data/<format>_chat_format.h. A name or argument that is
// not UTF-8 makes a call malformed too. A tokenizer without the format's call tokens: all of it is content.
struct AssistantReply {
  std::string content;
  std::string reasoning;  // k3: the think channel
  std::vector<ToolCall> tool_calls;
  std::string error;  // empty when well-formed
};
AssistantReply parse_assistant_reply(const Tokenizer& tok, std::span<const int32_t> ids);

// The text of one call as the template writes it: {"name":...,"arguments":{...}}.
std::string tool_call_text(const ToolCall& call);

// The special token that opens a reply's tool calls: <|tool_call|> (myriad), <|tool_calls_section_begin|> (kimi),
// <｜tool▁calls▁begin｜> (deepseek-v3), <tool_call> (chatml). Throws kUnsupported naming the format for the others (k3
// opens them with a tag of several tokens).
const char* tool_calls_marker(ChatFormat f);
// The special token that starts tool results where the model could write it right after its calls, so that a
// reply with calls must stop there: <|tool_result|> (myriad), <｜tool▁outputs▁begin｜> (deepseek-v3); else nullptr.
const char* tool_results_marker(ChatFormat f);
// The tokens that start a call of `name` in a reply (tool_choice naming a function): the marker, then myriad's
// {"name":NAME,"arguments": or kimi's <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>, IDX =
// calls_before (the conversation's calls so far), or deepseek-v3's <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
// "\n```json\n", or chatml's "\n{\"name\": \"NAME\", \"arguments\": ". The format is chat_format_of(tok).
std::vector<int32_t> forced_call_start(const Tokenizer& tok, const std::string& name, size_t calls_before);

}  // namespace myriad
