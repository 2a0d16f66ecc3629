// Constrained decoding of tool calls (issue 15; what llama.cpp's server does with a grammar and OpenAI with
// "strict": true): a mask over the vocabulary, applied by the sampler before it draws (infer/sampling.h), that
// lets a reply be only what the chat template's grammar (data/chat/chat_template.h) can read as content and calls:
//
//   reply := TEXT call* END             call := <|tool_call|> CALL <|/tool_call|>
//   CALL  := {"name":NAME,"arguments":ARGS}    compact JSON, no whitespace
//   END   := <|endoftext|> | </s>
//
// NAME is one of the request's tools (as a JSON string); ARGS is a JSON object that satisfies the tool's
// parameters schema (data/chat/json_schema.h: the declared properties in sorted order, the required ones present, each
// value of its type) for a strict tool, any JSON object for the others. Inside CALL no special token is allowed;
// in TEXT every special token but <|tool_call|> and END is masked (no forged turns); after a call only another
// call (when parallel calls are allowed) or END. Without calls allowed (tool_choice "none") the reply is TEXT END.
// Containers nest at most 31 deep inside a call. Numbers have at most 18 integer digits, 17 fraction digits and a
// 2-digit exponent, so each reads as an int64 or a finite double. Strings are well-formed UTF-8 (the parser calls a
// call with invalid UTF-8 malformed), checked byte by byte: a byte-fallback token may carry part of a character.
//
// The grammar is compiled once per request (the tools, the tokenizer's bytes per token); each sequence keeps a
// ToolCallMatcher (its place in the grammar: the region and a stack of JSON frames, a few dozen bytes each).
// mask() tries the tokens of the vocabulary whose logit is finite against a copy of the state, inside a call
// (elsewhere only the special tokens matter): a token's first byte is tried once per byte value, and inside a
// string a token of plain text needs no trial at all.
//
// myriad's chat format only (SentencePiece vocabulary layout: ids below kFirstByteId are special); the other
// formats' call syntax (kimi, k3, deepseek-v3, chatml) is not constrained: construction throws kUnsupported.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/chat/chat_template.h"
#include "data/chat/json_schema.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {

struct ToolCallGrammarOptions {
  bool strict_all = false;     // every tool's arguments held to its schema (else only the tools with `strict`)
  bool calls_allowed = true;   // false: tool_choice "none" (TEXT END)
  bool parallel_calls = true;  // false: at most one call
};

class ToolCallGrammar {
 public:
  ToolCallGrammar(const Tokenizer& tok, const std::vector<ToolSpec>& tools, ToolCallGrammarOptions options = {});

  const std::string& token_bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_special(int32_t id) const { return id < first_text_; }
  int64_t vocab_size() const { return int64_t(bytes_.size()); }

 private:
  friend class ToolCallMatcher;
  std::vector<std::string> bytes_;  // per token id (empty for special ones)
  // per token id: 1 when its bytes may stand anywhere inside a string (whole UTF-8 characters, no quote, backslash
  // or control byte): mask() lets those through without feeding them
  std::vector<uint8_t> plain_;
  int32_t first_text_ = 0;          // ids below are special tokens
  int32_t open_ = -1, close_ = -1;  // <|tool_call|>, <|/tool_call|>
  std::vector<int32_t> ends_;       // <|endoftext|>, </s>
  std::vector<std::string> names_;  // each tool's name as a JSON string, in the tools' order
  std::vector<JsonSchema> arguments_;
  ToolCallGrammarOptions options_;
};

class ToolCallMatcher {
 public:
  explicit ToolCallMatcher(std::shared_ptr<const ToolCallGrammar> grammar);

  bool allows(int32_t token) const;
  // Sets every token the grammar does not allow here to -inf (ids past the grammar's vocabulary too).
  void mask(std::span<float> logits) const;
  // Moves past `token` (sampled, or a forced start of the reply); throws kValue when the grammar does not allow it.
  void accept(int32_t token);

  // The state of the JSON inside a call: a stack of frames.
  struct Frame {
    uint8_t kind = 0, phase = 0;
    int16_t last = -1;  // object: the last property written; call: the tool
    int32_t pos = 0;    // literals: bytes matched; number: its state; string: escape digits left; call: bytes matched
    const JsonSchema* schema = nullptr;  // the value's schema (null: any value)
    int32_t node = 0;
    const std::vector<std::string>* literals = nullptr;
    // literals: the candidates still matching (bits); string: [0] continuation bytes left of a UTF-8 character,
    // [1] the next one's range (lo << 8 | hi); number: [0] the digits of the current part
    uint64_t alive[2] = {0, 0};
  };

 private:
  enum class Region : uint8_t { kContent, kCall, kCallDone, kBetween, kEnded };
  bool feed(std::vector<Frame>& frames, char c) const;
  bool feed_bytes(std::vector<Frame>& frames, const std::string& bytes) const;
  std::shared_ptr<const ToolCallGrammar> g_;
  Region region_ = Region::kContent;
  int calls_ = 0;
  std::vector<Frame> frames_;
  mutable std::vector<Frame> scratch_;  // mask(): the state copied per candidate token (capacity reused)
};

}  // namespace myriad
