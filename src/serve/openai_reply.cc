// The OpenAI API's response side: see openai_reply.h.
#include "serve/openai_reply.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "serve/text_stream.h"

namespace myriad::serve {

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::string random_id(const char* prefix) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(random_u64()),
                static_cast<unsigned long long>(random_u64() & 0xffffffffu));
  return buf;
}

// The bytes of a token as shown in logprobs (whole characters; a partial one becomes U+FFFD).
std::string token_string(const Tokenizer& tok, int32_t id) {
  if (id < 0 || id >= tok.vocab_size()) return "";
  std::string bytes = tok.token_bytes(id);
  return take_complete_utf8(bytes, true);
}

json token_bytes_json(const Tokenizer& tok, int32_t id) {
  json out = json::array();
  if (id < 0 || id >= tok.vocab_size()) return out;
  for (const char c : tok.token_bytes(id)) out.push_back(int(uint8_t(c)));
  return out;
}

// OpenAI reports -9999 where a probability underflows to zero (JSON has no -inf).
double finite_logprob(float lp) {
  return std::isfinite(lp) ? double(lp) : -9999.0;
}

}  // namespace

Reply::Reply(const ParsedRequest& p, const Tokenizer& tok, std::string model)
    : chat_(p.chat),
      logprobs_(p.logprobs),
      include_usage_(p.stream && p.include_usage),
      tool_calls_(p.chat && p.tool_calls),
      parallel_(p.parallel_tool_calls),
      structured_(p.chat && chat_format_of(tok) == ChatFormat::kK3),
      tok_(tok),
      model_(std::move(model)),
      id_(random_id(p.chat ? "chatcmpl-" : "cmpl-")),
      created_(unix_now()) {
  reset_delta_logprobs();
  all_logprobs_ = delta_logprobs_;
  if (structured_) {
    k3_open_ = tok.id_of("<|open|>");
    k3_close_ = tok.id_of("<|close|>");
    k3_sep_ = tok.id_of("<|sep|>");
  } else if (tool_calls_) {
    calls_marker_text_ = tool_calls_marker(chat_format_of(tok));
    calls_marker_ = tok.id_of(calls_marker_text_);
  }
  if (tool_calls_ && !p.forced.empty()) {  // the forced start of a call: part of the reply, not of the content
    ids_ = p.forced;
    holding_ = true;
    held_ = tok.decode(p.forced);
    text_ = held_;
  }
}

void Reply::add_structured(const TokenEvent& e) {
  auto hold_from = [&](size_t at) {
    k3_at_ = K3At::kHeld;
    k3_held_from_ = at;
  };
  if (k3_at_ == K3At::kHeld) return;
  if (e.token == k3_open_ || e.token == k3_close_) {
    k3_tag_ = e.token == k3_open_ ? 1 : -1;
    k3_tag_text_.clear();
    k3_tag_start_ = text_.size();
  } else if (k3_tag_ != 0 && e.token == k3_sep_) {
    const std::string name = k3_tag_text_.substr(0, k3_tag_text_.find(' '));
    const bool opening = k3_tag_ > 0;
    k3_tag_ = 0;
    if (k3_at_ == K3At::kThink && !opening && name == "think")
      k3_at_ = K3At::kBetween;
    else if (k3_at_ == K3At::kBetween && opening && name == "response")
      k3_at_ = K3At::kResponse;
    else if (k3_at_ == K3At::kResponse && !opening && name == "response")
      k3_at_ = K3At::kBetween;
    else if (!(k3_at_ == K3At::kBetween && !opening && name == "message"))
      hold_from(k3_tag_start_);  // the calls, or something out of the grammar: read when the reply ends
  } else if (k3_tag_ != 0) {
    k3_tag_text_ += e.text;
  } else if (k3_at_ == K3At::kThink) {
    delta_reasoning_ += e.text;
  } else if (k3_at_ == K3At::kResponse) {
    delta_text_ += e.text;
  } else if (e.text.find_first_not_of(" \t\r\n") != std::string::npos) {  // text between the channels
    hold_from(text_.size());
  }
}

void Reply::add(const TokenEvent& e) {
  if (e.token >= 0) ids_.push_back(e.token);
  if (structured_) {
    add_structured(e);
  } else if (tool_calls_ && !holding_ && e.token == calls_marker_) {
    // The text before the marker (in this event) is content; the marker and what follows are held.
    const size_t at = e.text.find(calls_marker_text_);
    const std::string before = at == std::string::npos ? e.text : e.text.substr(0, at);
    delta_text_ += before;
    held_ += e.text.substr(before.size());
    holding_ = true;
  } else if (holding_) {
    held_ += e.text;
  } else {
    delta_text_ += e.text;
  }
  text_ += e.text;
  if (e.finish != FinishReason::kNone) {
    if (holding_ || structured_) finish_tool_calls();
    usage_ = json{{"prompt_tokens", e.prompt_tokens},
                  {"completion_tokens", e.completion_tokens},
                  {"total_tokens", e.prompt_tokens + e.completion_tokens},
                  {"prompt_tokens_details", json{{"cached_tokens", e.cached_tokens}}}};
  }
  if (!logprobs_ || e.token < 0) return;
  has_delta_logprobs_ = true;
  const std::string s = token_string(tok_, e.token);
  if (chat_) {
    json top = json::array();
    for (const TokenLogprob& t : e.top)
      top.push_back(json{{"token", token_string(tok_, t.token)},
                         {"logprob", finite_logprob(t.logprob)},
                         {"bytes", token_bytes_json(tok_, t.token)}});
    json entry{{"token", s},
               {"logprob", finite_logprob(e.logprob)},
               {"bytes", token_bytes_json(tok_, e.token)},
               {"top_logprobs", std::move(top)}};
    delta_logprobs_["content"].push_back(entry);
    all_logprobs_["content"].push_back(std::move(entry));
  } else {
    json top = json::object();
    for (const TokenLogprob& t : e.top) {
      const std::string k = token_string(tok_, t.token);
      if (!top.contains(k)) top[k] = finite_logprob(t.logprob);  // the most likely of equal strings
    }
    for (json* lp : {&delta_logprobs_, &all_logprobs_}) {
      (*lp)["tokens"].push_back(s);
      (*lp)["token_logprobs"].push_back(finite_logprob(e.logprob));
      (*lp)["top_logprobs"].push_back(top);
      (*lp)["text_offset"].push_back(text_offset_);
    }
    text_offset_ += int64_t(s.size());
  }
}

json Reply::role_chunk() const {
  return chunk(json{{"index", 0},
                    {"delta", json{{"role", "assistant"}, {"content", ""}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}});
}

void Reply::finish_tool_calls() {
  // The reply's tokens without the end-of-turn markers the engine may have kept (stop strings are tokens too).
  std::vector<int32_t> ids = ids_;
  const ChatFormat format = chat_format_of(tok_);
  std::vector<int32_t> ends = tok_.stop_ids();  // the engine's end of sequence (myriad: <|endoftext|>, </s>)
  for (const std::string& s : chat_stop_strings(format)) ends.push_back(tok_.id_of(s));
  if (const char* results = tool_results_marker(format); results && tok_.has_special(results))
    ends.push_back(tok_.id_of(results));
  while (!ids.empty() && std::find(ends.begin(), ends.end(), ids.back()) != ends.end()) ids.pop_back();
  AssistantReply r = parse_assistant_reply(tok_, ids);
  if (!r.error.empty()) {  // malformed: all of it is text, as generated (k3: what was not streamed yet)
    if (structured_ && k3_at_ == K3At::kHeld) delta_text_ += text_.substr(k3_held_from_);
    delta_text_ += held_;
    held_.clear();
    return;
  }
  if (structured_) {  // the channels were streamed as they came
    parsed_ = true;
    reasoning_ = r.reasoning;
    content_ = r.content;
    if (!tool_calls_) r.tool_calls.clear();  // calls the request did not offer tools for: not returned
  }
  if (r.tool_calls.empty()) {
    if (!structured_) delta_text_ += held_;
    held_.clear();
    return;
  }
  if (!parallel_) r.tool_calls.resize(1);
  content_ = r.content;
  calls_ = std::move(r.tool_calls);
  const std::string base = random_id("call_");
  for (size_t i = 0; i < calls_.size(); ++i) {
    calls_[i].id = base + "_" + std::to_string(i);
    const json head = {{"index", i},
                       {"id", calls_[i].id},
                       {"type", "function"},
                       {"function", {{"name", calls_[i].name}, {"arguments", ""}}}};
    const json args = {{"index", i}, {"function", {{"arguments", calls_[i].arguments_string()}}}};
    for (const json& d : {head, args})
      tool_chunks_.push_back(json{{"index", 0},
                                  {"delta", {{"tool_calls", json::array({d})}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}});
  }
  held_.clear();
}

const char* Reply::reason(const char* engine_reason) const {
  return calls_.empty() ? engine_reason : "tool_calls";
}

std::optional<json> Reply::take_delta_chunk() {
  if (delta_text_.empty() && !has_delta_logprobs_ && delta_reasoning_.empty()) {
    if (tool_chunks_.empty()) return std::nullopt;
    json c = chunk(std::move(tool_chunks_.front()));
    tool_chunks_.erase(tool_chunks_.begin());
    return c;
  }
  json choice =
      chat_ ? json{{"index", 0}, {"delta", json{{"content", delta_text_}}}} : json{{"index", 0}, {"text", delta_text_}};
  if (!delta_reasoning_.empty() && chat_) {
    choice["delta"]["reasoning_content"] = delta_reasoning_;
    delta_reasoning_.clear();
  }
  choice["logprobs"] = has_delta_logprobs_ ? delta_logprobs_ : json(nullptr);
  choice["finish_reason"] = nullptr;
  delta_text_.clear();
  has_delta_logprobs_ = false;
  reset_delta_logprobs();
  return chunk(std::move(choice));
}

json Reply::finish_chunk(const char* reason) const {
  json choice = chat_ ? json{{"index", 0}, {"delta", json::object()}} : json{{"index", 0}, {"text", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = this->reason(reason);
  return chunk(std::move(choice));
}

json Reply::usage_chunk() const {
  json c = chunk_base();
  c["choices"] = json::array();
  c["usage"] = usage_;
  return c;
}

json Reply::full(const char* reason) const {
  json choice = chat_ ? json{{"index", 0}, {"message", json{{"role", "assistant"}, {"content", text_}}}}
                      : json{{"index", 0}, {"text", text_}};
  if (parsed_) {
    choice["message"]["content"] = content_;
    choice["message"]["reasoning_content"] = reasoning_;
  }
  if (!calls_.empty()) {
    json& msg = choice["message"];
    msg["content"] = content_.empty() ? json(nullptr) : json(content_);
    msg["tool_calls"] = json::array();
    for (const ToolCall& c : calls_)
      msg["tool_calls"].push_back(
          {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments_string()}}}});
  }
  choice["logprobs"] = logprobs_ ? all_logprobs_ : json(nullptr);
  choice["finish_reason"] = this->reason(reason);
  return json{{"id", id_},
              {"object", chat_ ? "chat.completion" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array({std::move(choice)})},
              {"usage", usage_}};
}

json Reply::chunk_base() const {
  return json{{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_}};
}

json Reply::chunk(json choice) const {
  json c = chunk_base();
  c["choices"] = json::array({std::move(choice)});
  if (include_usage_) c["usage"] = nullptr;
  return c;
}

void Reply::reset_delta_logprobs() {
  delta_logprobs_ = chat_ ? json{{"content", json::array()}}
                          : json{{"tokens", json::array()},
                                 {"token_logprobs", json::array()},
                                 {"top_logprobs", json::array()},
                                 {"text_offset", json::array()}};
}

ApiError finish_error(const TokenEvent& e, bool stopping) {
  if (e.finish == FinishReason::kError)
    return ApiError(500, str("generation failed: ", e.error), "server_error", "", "generation_error");
  return ApiError(503, stopping ? "the server is stopping" : "the request was cancelled", "server_error", "",
                  "cancelled");
}

}  // namespace myriad::serve
