// Tool calls in OpenAI responses (serve/openai_reply.h): a reply's token events, as the engine sends them, become
// message.tool_calls with finish_reason "tool_calls", or streamed deltas that merge (as OpenAI's clients merge
// them) into the same calls; the content before the calls stays content; malformed calls come back as text;
// parallel_tool_calls false keeps one call; a forced start (tool_choice) is read as part of the reply; K3's tagged
// replies become content, reasoning_content and tool_calls.
#include "serve/openai_reply.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/byte_level_fixture.h"

namespace myriad::serve {
namespace {

class ReplyToolsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::vector<std::string> texts;
    for (int i = 0; i < 60; ++i)
      texts.push_back("Let me look up the price " + std::to_string(i) +
                      " {\"name\":\"lookup_price\",\"arguments\":{\"item\":\"apple\"}}");
    tok_ = new Tokenizer(Tokenizer::train_from_texts(texts, 400));
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  // Feeds the reply's tokens one event each (text = the token's bytes), then the finish event; returns the
  // streamed chunks.
  static std::vector<json> feed(Reply& r, const std::string& reply, const Tokenizer* tok = nullptr) {
    if (!tok) tok = tok_;
    std::vector<json> chunks;
    for (int32_t id : tok->encode(reply)) {
      TokenEvent e;
      e.token = id;
      e.text = tok->token_bytes(id);
      r.add(e);
      while (auto c = r.take_delta_chunk()) chunks.push_back(*c);
    }
    TokenEvent fin;
    fin.finish = FinishReason::kStop;
    r.add(fin);
    while (auto c = r.take_delta_chunk()) chunks.push_back(*c);
    return chunks;
  }
  // Merges streamed deltas as the openai client does: content concatenated, tool calls by index (id, name once;
  // arguments concatenated).
  static json merge(const std::vector<json>& chunks) {
    json m = {{"content", ""}, {"tool_calls", json::array()}};
    for (const json& c : chunks) {
      const json& d = c["choices"][0]["delta"];
      if (d.contains("content")) m["content"] = m["content"].get<std::string>() + d["content"].get<std::string>();
      if (d.contains("reasoning_content"))
        m["reasoning_content"] = m.value("reasoning_content", "") + d["reasoning_content"].get<std::string>();
      if (!d.contains("tool_calls")) continue;
      for (const json& t : d["tool_calls"]) {
        const size_t i = t["index"].get<size_t>();
        while (m["tool_calls"].size() <= i) m["tool_calls"].push_back({{"id", ""}, {"name", ""}, {"arguments", ""}});
        json& call = m["tool_calls"][i];
        if (t.contains("id")) call["id"] = t["id"];
        if (t.contains("function") && t["function"].contains("name")) call["name"] = t["function"]["name"];
        if (t.contains("function") && t["function"].contains("arguments"))
          call["arguments"] = call["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
      }
    }
    return m;
  }
  static ParsedRequest chat_with_tools() {
    ParsedRequest p;
    p.chat = true;
    p.stream = true;
    p.tool_calls = true;
    return p;
  }
  static Tokenizer* tok_;
};
Tokenizer* ReplyToolsTest::tok_ = nullptr;

const std::string kTwoCalls =
    "Let me look.<|tool_call|>{\"name\":\"lookup_price\",\"arguments\":{\"item\":\"apple\"}}<|/tool_call|>"
    "<|tool_call|>{\"name\":\"calculator\",\"arguments\":{\"expression\":\"3*0.5\"}}<|/tool_call|>";

TEST_F(ReplyToolsTest, CallsBecomeToolCallsWholeAndStreamed) {
  Reply r(chat_with_tools(), *tok_, "m");
  const json merged = merge(feed(r, kTwoCalls));
  const json full = r.full("stop");
  const json& msg = full["choices"][0]["message"];
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["content"], "Let me look.");
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "lookup_price");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"item", "apple"}}));
  EXPECT_EQ(msg["tool_calls"][1]["function"]["name"], "calculator");
  EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
  // The stream says the same.
  EXPECT_EQ(merged["content"], "Let me look.");
  ASSERT_EQ(merged["tool_calls"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(merged["tool_calls"][i]["id"], msg["tool_calls"][i]["id"]);
    EXPECT_EQ(merged["tool_calls"][i]["name"], msg["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(merged["tool_calls"][i]["arguments"], msg["tool_calls"][i]["function"]["arguments"]);
  }
  EXPECT_EQ(r.finish_chunk("stop")["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(ReplyToolsTest, MalformedCallsAreText) {
  const std::string bad = "Hmm<|tool_call|>{\"name\": lookup<|/tool_call|>";
  Reply r(chat_with_tools(), *tok_, "m");
  const json merged = merge(feed(r, bad));
  const json full = r.full("stop");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(full["choices"][0]["message"]["content"], bad);
  EXPECT_FALSE(full["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(merged["content"], bad);
  EXPECT_TRUE(merged["tool_calls"].empty());
}

TEST_F(ReplyToolsTest, WithoutToolsTheMarkersAreJustText) {
  ParsedRequest p = chat_with_tools();
  p.tool_calls = false;
  Reply r(p, *tok_, "m");
  feed(r, kTwoCalls);
  EXPECT_EQ(r.full("stop")["choices"][0]["message"]["content"], kTwoCalls);
  EXPECT_EQ(r.full("stop")["choices"][0]["finish_reason"], "stop");
}

TEST_F(ReplyToolsTest, ParallelFalseKeepsOneCallAndForcedStartsAreRead) {
  ParsedRequest p = chat_with_tools();
  p.parallel_tool_calls = false;
  Reply one(p, *tok_, "m");
  feed(one, kTwoCalls);
  EXPECT_EQ(one.full("stop")["choices"][0]["message"]["tool_calls"].size(), 1u);

  // tool_choice {"function": {"name": "calculator"}}: the prompt ended in the forced start; the model wrote the rest.
  ParsedRequest f = chat_with_tools();
  f.forced = tok_->encode("<|tool_call|>{\"name\":\"calculator\",\"arguments\":");
  Reply forced(f, *tok_, "m");
  const json merged = merge(feed(forced, "{\"expression\":\"1+2\"}}<|/tool_call|>"));
  const json msg = forced.full("stop")["choices"][0]["message"];
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "calculator");
  EXPECT_TRUE(msg["content"].is_null());
  EXPECT_EQ(merged["tool_calls"][0]["name"], "calculator");
}

// K3's tagged replies: held whole, then the response channel is the content, the think channel reasoning_content,
// the tools channel the calls (when the request offered tools); a reply that is not of that form is text.
TEST_F(ReplyToolsTest, K3ChannelsBecomeContentReasoningAndCalls) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / ("myriad_k3_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, bool>> added;
  for (const char* s : {"<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"}) added.emplace_back(s, true);
  std::ofstream(dir / "tokenizer.json") << myriad::hand_written_tokenizer_json(added).dump();
  const Tokenizer k3 = Tokenizer::load(dir.string());
  std::filesystem::remove_all(dir);
  const std::string reply =
      "Look.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Rome"
      "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>";
  Reply r(chat_with_tools(), k3, "m");
  const json merged = merge(feed(r, reply, &k3));
  const json full = r.full("stop");
  const json& msg = full["choices"][0]["message"];
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["content"], "Checking.");
  EXPECT_EQ(msg["reasoning_content"], "Look.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Rome"}}));
  EXPECT_EQ(merged["content"], "Checking.");  // the stream says the same
  EXPECT_EQ(merged["reasoning_content"], "Look.");
  ASSERT_EQ(merged["tool_calls"].size(), 1u);
  EXPECT_EQ(merged["tool_calls"][0]["name"], "get_weather");
  // Without tools in the request: the content and reasoning only.
  ParsedRequest p = chat_with_tools();
  p.tool_calls = false;
  Reply plain(p, k3, "m");
  feed(plain, reply, &k3);
  const json pm = plain.full("stop")["choices"][0];
  EXPECT_EQ(pm["message"]["content"], "Checking.");
  EXPECT_FALSE(pm["message"].contains("tool_calls"));
  EXPECT_EQ(pm["finish_reason"], "stop");
  // The channels stream as they come: the reasoning before the content, each in pieces.
  Reply streamed(chat_with_tools(), k3, "m");
  const std::vector<json> chunks = feed(streamed, reply, &k3);
  size_t reasoning_chunks = 0, first_content = chunks.size();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& d = chunks[i]["choices"][0]["delta"];
    if (d.contains("reasoning_content")) ++reasoning_chunks;
    if (d.contains("content") && !d["content"].get<std::string>().empty()) first_content = std::min(first_content, i);
  }
  EXPECT_GE(reasoning_chunks, 1u);
  EXPECT_LT(first_content, chunks.size() - 2);  // content before the end, then the calls' two chunks
  // Cut short by max_tokens while thinking: the reasoning so far, no content.
  Reply cut(chat_with_tools(), k3, "m");
  const json cm = merge(feed(cut, "thinking forever", &k3));
  EXPECT_EQ(cut.full("length")["choices"][0]["message"]["reasoning_content"], "thinking forever");
  EXPECT_EQ(cut.full("length")["choices"][0]["message"]["content"], "");
  EXPECT_EQ(cm["reasoning_content"], "thinking forever");
  // Out of the grammar (text between the channels): the whole reply is the content, as generated; streamed, what
  // had not gone out as reasoning.
  const std::string bad_reply = "x<|close|>think<|sep|>oops";
  Reply bad(chat_with_tools(), k3, "m");
  const json bm = merge(feed(bad, bad_reply, &k3));
  EXPECT_EQ(bad.full("stop")["choices"][0]["message"]["content"], bad_reply);
  EXPECT_EQ(bm["reasoning_content"], "x");
  EXPECT_EQ(bm["content"], "oops");
}

// DeepSeek-V3's calls: the content streams up to <｜tool▁calls▁begin｜>, the calls come whole at the end; the
// <｜tool▁outputs▁begin｜> the reply stops at (when the engine keeps the stop token) is not part of them.
TEST_F(ReplyToolsTest, DeepSeekCallsAfterStreamedContent) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / ("myriad_ds_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, bool>> added;
  for (const char* s : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                        "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                        "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>"})
    added.emplace_back(s, true);
  std::ofstream(dir / "tokenizer.json") << myriad::hand_written_tokenizer_json(added).dump();
  const Tokenizer ds = Tokenizer::load(dir.string());
  std::filesystem::remove_all(dir);
  const std::string reply =
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜tool▁outputs▁begin｜>";
  Reply r(chat_with_tools(), ds, "m");
  const std::vector<json> chunks = feed(r, reply, &ds);
  const json merged = merge(chunks);
  const json full = r.full("stop");
  const json& msg = full["choices"][0]["message"];
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["content"], "Checking.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Rome\"}");  // as the model wrote them
  EXPECT_EQ(merged["content"], "Checking.");
  ASSERT_EQ(merged["tool_calls"].size(), 1u);
  EXPECT_EQ(merged["tool_calls"][0]["arguments"], "{\"city\": \"Rome\"}");
  // The content went out before the calls were read.
  ASSERT_FALSE(chunks.empty());
  EXPECT_TRUE(chunks.front()["choices"][0]["delta"].contains("content"));
  EXPECT_FALSE(chunks.front()["choices"][0]["delta"].contains("tool_calls"));
}

}  // namespace
}  // namespace myriad::serve
