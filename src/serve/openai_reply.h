// The OpenAI API's response side (internal to src/serve): one request's TokenEvents rendered as OpenAI JSON, the
// whole response or one streaming chunk at a time (chat.completion(.chunk), text_completion), with logprobs in
// each endpoint's own shape and the usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/chat/chat_template.h"
#include "data/tokenize/tokenizer.h"
#include "serve/engine.h"
#include "serve/openai_schema.h"

namespace myriad::serve {

// JSON text that is always valid UTF-8 (decoded text may hold invalid bytes: they become U+FFFD).
std::string dump(const json& j);

// Seconds since the Unix epoch: the "created" of responses and model cards.
int64_t unix_now();

// One request's output as OpenAI JSON: chat.completion(.chunk) or text_completion. Events are added as they come;
// the text and logprobs since the last chunk form the next chunk.
class Reply {
 public:
  Reply(const ParsedRequest& p, const Tokenizer& tok, std::string model);

  // The token part of an event (the finish part is the caller's).
  void add(const TokenEvent& e);

  // Streaming: the first chat chunk (the role).
  json role_chunk() const;

  // Streaming: the text and logprobs added since the last call, or nothing; call until nothing (the tool calls of
  // a finished reply come as several chunks).
  std::optional<json> take_delta_chunk();

  // Streaming: the last choice chunk.
  json finish_chunk(const char* reason) const;

  // Streaming: the usage chunk (no choices).
  json usage_chunk() const;

  // Non-streaming: the whole response.
  json full(const char* reason) const;

 private:
  json chunk_base() const;
  json chunk(json choice) const;
  void reset_delta_logprobs();

  // Tool calls (ParsedRequest::tool_calls): from the format's tool-call marker on, the text is held back; when the
  // reply finishes it is read by the template's grammar (parse_assistant_reply): calls become message.tool_calls (and
  // streamed deltas: each call's id, type and name, then its arguments) with finish_reason "tool_calls"; a
  // malformed reply is returned as text, as it came.
  void finish_tool_calls();
  const char* reason(const char* engine_reason) const;

  const bool chat_, logprobs_, include_usage_, tool_calls_, parallel_;
  // k3: a reply is tagged channels. It streams by channel as it comes (the think channel's text as
  // reasoning_content deltas, the response channel's as content); from a tools tag on (or anything out of the
  // grammar) it is held. When it finishes it is read whole (parse_assistant_reply): calls, and for the whole
  // response the content and reasoning; a malformed reply's held part is sent as content.
  void add_structured(const TokenEvent& e);
  enum class K3At : uint8_t { kThink, kResponse, kBetween, kHeld };
  const bool structured_;
  // Looked up once: the format's tool-call marker (a request with tools, formats but k3) and k3's tag tokens.
  int32_t calls_marker_ = -1, k3_open_ = -1, k3_close_ = -1, k3_sep_ = -1;
  const char* calls_marker_text_ = "";
  K3At k3_at_ = K3At::kThink;
  int k3_tag_ = 0;               // inside a tag: +1 after <|open|>, -1 after <|close|>
  std::string k3_tag_text_;      // the tag's name and attributes so far
  size_t k3_tag_start_ = 0;      // where in text_ the tag began
  size_t k3_held_from_ = 0;      // kHeld: where in text_ holding began
  std::string delta_reasoning_;  // streaming: the think channel's text since the last chunk
  bool parsed_ = false;          // structured: the reply was read (content_ holds the response channel)
  std::string reasoning_;        // structured: the think channel
  const Tokenizer& tok_;
  const std::string model_, id_;
  const int64_t created_;
  std::string text_, delta_text_;
  json delta_logprobs_, all_logprobs_, usage_;
  bool has_delta_logprobs_ = false;
  int64_t text_offset_ = 0;
  std::vector<int32_t> ids_;       // the reply's tokens (the forced ones first)
  bool holding_ = false;           // a <|tool_call|> was seen: text is held back
  std::string held_;               // text held back since then
  std::string content_;            // with calls: the text before them
  std::vector<ToolCall> calls_;    // parsed when the reply finished
  std::vector<json> tool_chunks_;  // streaming: the calls' delta chunks still to send
};

// The error a finished-but-failed request answers with.
ApiError finish_error(const TokenEvent& e, bool stopping);

}  // namespace myriad::serve
