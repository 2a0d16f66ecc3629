// The OpenAI API's response side (internal to src/serve): one request's TokenEvents rendered as OpenAI JSON, the
// whole response or one streaming chunk at a time (chat.completion(.chunk), text_completion), with logprobs in
// each endpoint's own shape and the usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/tokenizer.h"
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

  // Streaming: the text and logprobs added since the last call, or nothing.
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

  const bool chat_, logprobs_, include_usage_;
  const Tokenizer& tok_;
  const std::string model_, id_;
  const int64_t created_;
  std::string text_, delta_text_;
  json delta_logprobs_, all_logprobs_, usage_;
  bool has_delta_logprobs_ = false;
  int64_t text_offset_ = 0;
};

// The error a finished-but-failed request answers with.
ApiError finish_error(const TokenEvent& e, bool stopping);

}  // namespace myriad::serve
