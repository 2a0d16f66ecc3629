// Constrained tool calls (data/chat/tool_call_grammar.h) and the schema subset they follow (data/chat/json_schema.h).
// The character automaton is checked against independent readers of the same text: nlohmann's JSON parser and
// the schema's tree walk (JsonSchema::accepts) say whether a call is valid, the automaton must agree on canonical
// calls and never accept an invalid one; at the token level, replies sampled from random logits under the mask
// are read back by the chat template's parser.
#include "data/chat/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "agent/agent_tokenizer.h"
#include "agent/tools.h"
#include "core/error.h"
#include "data/chat/chat_template.h"
#include "data/chat/json_schema.h"
#include "infer/sampling.h"

namespace myriad {
namespace {

using json = nlohmann::json;

class ToolGrammarTest : public testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &test::agent_tokenizer(); }
  static std::shared_ptr<const ToolCallGrammar> grammar(const std::vector<ToolSpec>& tools,
                                                        ToolCallGrammarOptions o = {}) {
    o.strict_all = true;
    return std::make_shared<ToolCallGrammar>(*tok_, tools, o);
  }
  // Feeds text one byte token at a time; false at the first byte the grammar refuses.
  static bool feed_text(ToolCallMatcher& m, const std::string& text) {
    for (char c : text) {
      const int32_t t = tok_->byte_id(static_cast<unsigned char>(c));
      if (!m.allows(t)) return false;
      m.accept(t);
    }
    return true;
  }
  // Whether the grammar takes `call_text` as a whole CALL (after <|tool_call|>, and <|/tool_call|> may follow).
  static bool accepts_call(const std::shared_ptr<const ToolCallGrammar>& g, const std::string& call_text) {
    ToolCallMatcher m(g);
    m.accept(tok_->id_of("<|tool_call|>"));
    return feed_text(m, call_text) && m.allows(tok_->id_of("<|/tool_call|>"));
  }
  static const Tokenizer* tok_;
};
const Tokenizer* ToolGrammarTest::tok_ = nullptr;

// A schema with every kind the subset knows, nested.
json rich_schema() {
  return json::parse(R"({"type": "object", "required": ["b", "q"], "properties": {
      "a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "number"},
      "d": {"type": "boolean"}, "e": {"enum": ["usd", "eur", 3, null]}, "f": {"type": "array", "items": {"type": "integer"}},
      "g": {"type": "object", "properties": {"x": {"type": "null"}, "y": {"type": "string"}}, "required": ["y"]},
      "h": {"anyOf": [{"type": "string"}, {"type": "integer"}]}, "q": {"type": "string"}}})");
}

TEST(JsonSchema, AcceptsWhatTheSubsetSays) {
  const JsonSchema s(rich_schema());
  EXPECT_TRUE(s.accepts(json{{"b", 1}, {"q", ""}}));
  EXPECT_FALSE(s.accepts(json{{"b", 1}})) << "q is required";
  EXPECT_FALSE(s.accepts(json{{"b", 1.5}, {"q", ""}})) << "integer";
  EXPECT_FALSE(s.accepts(json{{"b", 1}, {"q", ""}, {"z", 1}})) << "undeclared";
  EXPECT_TRUE(s.accepts(json{{"b", -3}, {"q", "x"}, {"c", 2.5}, {"d", true}, {"e", "eur"}, {"f", {1, 2}}}));
  EXPECT_TRUE(s.accepts(json{{"b", 0}, {"q", "x"}, {"e", 3}}));
  EXPECT_TRUE(s.accepts(json{{"b", 0}, {"q", "x"}, {"e", nullptr}}));
  EXPECT_FALSE(s.accepts(json{{"b", 0}, {"q", "x"}, {"e", "gbp"}})) << "enum";
  EXPECT_FALSE(s.accepts(json{{"b", 0}, {"q", "x"}, {"f", {1, "2"}}})) << "items";
  EXPECT_FALSE(s.accepts(json{{"b", 0}, {"q", "x"}, {"g", json::object()}})) << "nested required";
  EXPECT_TRUE(s.accepts(json{{"b", 0}, {"q", "x"}, {"g", {{"y", "k"}, {"x", nullptr}}}}));
  EXPECT_TRUE(s.accepts(json{{"b", 0}, {"q", "x"}, {"h", {{"any", {1, 2}}}}})) << "anyOf is any value";
  EXPECT_FALSE(s.accepts(json::array()));
  EXPECT_TRUE(JsonSchema(json()).accepts(json::array())) << "no schema: any value";
  EXPECT_TRUE(JsonSchema::arguments(json{{"type", "string"}}).accepts(json::object()))
      << "arguments are an object whatever the schema says";
  EXPECT_FALSE(JsonSchema::arguments(json{{"type", "string"}}).accepts(json("s")));
}

// A random JSON value of the rich schema's property types, sometimes breaking the schema.
json random_value(std::mt19937_64& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth > 2 ? 4 : 6);
  switch (kind(rng)) {
    case 0:
      return int64_t(rng() % 2001) - 1000;
    case 1:
      return double(int64_t(rng() % 20001) - 10000) / 64.0;
    case 2: {
      static const char* strings[] = {"",          "plain",       "quote\"in",      "back\\slash",
                                      "tab\there", "caf\xc3\xa9", "\xe2\x82\xac 3", "line\nbreak",
                                      "\x01",      "eur"};
      return strings[rng() % 10];
    }
    case 3:
      return rng() % 3 == 0 ? json(nullptr) : json(rng() % 2 == 0);
    case 4:
      return "usd";
    case 5: {
      json a = json::array();
      for (int i = int(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      static const char* keys[] = {"x", "y", "z", "a b"};
      for (int i = int(rng() % 3); i > 0; --i) o[keys[rng() % 4]] = random_value(rng, depth + 1);
      return o;
    }
  }
}

json random_arguments(std::mt19937_64& rng) {
  static const char* keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "q", "zz"};
  json o = json::object();
  for (int i = int(rng() % 6); i > 0; --i) o[keys[rng() % 10]] = random_value(rng, 0);
  if (rng() % 3 != 0) o["b"] = int64_t(rng() % 100);
  if (rng() % 3 != 0) o["q"] = "text";
  return o;
}

// Canonical calls (the template's own text): the automaton accepts exactly those the schema accepts.
TEST_F(ToolGrammarTest, CanonicalCallsAreAcceptedExactlyWhenTheSchemaAccepts) {
  std::vector<ToolSpec> tools(2);
  tools[0] = {"rich", "", rich_schema()};
  tools[1] = {"free", "", json()};
  const auto g = grammar(tools);
  const JsonSchema schema(rich_schema());
  std::mt19937_64 rng(5);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    const json args = random_arguments(rng);
    const std::string text = tool_call_text({"", "rich", args});
    const bool want = schema.accepts(args);
    ASSERT_EQ(accepts_call(g, text), want) << text;
    accepted += want;
    EXPECT_TRUE(accepts_call(g, tool_call_text({"", "free", args}))) << "any object: " << text;
  }
  EXPECT_GT(accepted, 300);
  EXPECT_LT(accepted, 2700);
}

// Any text the automaton takes as a whole call is a call the parser reads and the schema accepts: random
// mutations of canonical calls (a byte dropped, doubled or replaced by a JSON-ish one).
TEST_F(ToolGrammarTest, WhatItAcceptsParsesAndSatisfiesTheSchema) {
  std::vector<ToolSpec> tools(2);
  tools[0] = {"rich", "", rich_schema()};
  tools[1] = {"lookup_price", "",
              json{{"type", "object"}, {"properties", {{"item", {{"type", "string"}}}}}, {"required", {"item"}}}};
  const auto g = grammar(tools);
  const JsonSchema rich(rich_schema()), lookup(tools[1].parameters);
  std::mt19937_64 rng(11);
  const std::string alphabet = "{}[]\",:0123456789.-eE+truefalsnl \\abq";
  int mutated_accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool first = rng() % 2 == 0;
    json args = first ? random_arguments(rng) : json{{"item", random_value(rng, 3)}};
    std::string text = tool_call_text({"", first ? "rich" : "lookup_price", args});
    const size_t at = rng() % text.size();
    switch (rng() % 3) {
      case 0:
        text.erase(at, 1);
        break;
      case 1:
        text.insert(at, 1, text[at]);
        break;
      default:
        text[at] = alphabet[rng() % alphabet.size()];
    }
    if (!accepts_call(g, text)) continue;
    ++mutated_accepted;
    const json call = json::parse(text, nullptr, false);
    ASSERT_FALSE(call.is_discarded()) << text;
    ASSERT_TRUE(call.is_object() && call.size() == 2 && call.contains("name") && call.contains("arguments")) << text;
    const std::string name = call["name"].get<std::string>();
    ASSERT_TRUE(name == "rich" || name == "lookup_price") << text;
    EXPECT_TRUE((name == "rich" ? rich : lookup).accepts(call["arguments"])) << text;
  }
  EXPECT_GT(mutated_accepted, 100) << "mutations that keep a valid call (e.g. a digit for a digit) exist";
}

TEST_F(ToolGrammarTest, StructureOutsideTheCall) {
  const std::vector<ToolSpec>& tools = agent_tool_specs();
  const int32_t open = tok_->id_of("<|tool_call|>"), close = tok_->id_of("<|/tool_call|>"),
                eos = tok_->id_of("<|endoftext|>"), user = tok_->id_of("<|user|>");
  const int32_t a = tok_->byte_id('a'), brace = tok_->byte_id('{');
  ToolCallMatcher m(grammar(tools));
  EXPECT_TRUE(m.allows(a) && m.allows(open) && m.allows(eos));
  EXPECT_FALSE(m.allows(close) || m.allows(user)) << "no stray close, no forged turn";
  m.accept(a);
  m.accept(open);
  EXPECT_FALSE(m.allows(eos) || m.allows(open) || m.allows(a)) << "inside a call: its JSON only";
  EXPECT_TRUE(m.allows(brace));
  ASSERT_TRUE(feed_text(m, R"({"name":"lookup_price","arguments":{"item")"));
  for (int32_t t = 0; t < int32_t(tok_->vocab_size()); ++t) {
    const std::string& b = tok_->token_bytes(t);
    const bool colon_first = t >= kFirstByteId && !b.empty() && b[0] == ':';
    if (m.allows(t)) {
      EXPECT_TRUE(colon_first) << "token " << t << " '" << b << "' after a key";
    }
  }
  EXPECT_THROW(m.accept(a), Error);
  ASSERT_TRUE(feed_text(m, R"(:"fig")"));
  EXPECT_FALSE(m.allows(tok_->byte_id(','))) << "lookup_price has one property";
  ASSERT_TRUE(feed_text(m, "}}"));
  EXPECT_TRUE(m.allows(close));
  EXPECT_FALSE(m.allows(eos) || m.allows(a) || m.allows(tok_->byte_id(' ')));
  m.accept(close);
  EXPECT_TRUE(m.allows(open) && m.allows(eos));
  EXPECT_FALSE(m.allows(a)) << "no text after the calls";

  ToolCallGrammarOptions one;
  one.parallel_calls = false;
  ToolCallMatcher single(grammar(tools, one));
  single.accept(open);
  ASSERT_TRUE(feed_text(single, R"({"name":"calendar","arguments":{"date":"2026-03-14","days":3}})"));
  single.accept(close);
  EXPECT_FALSE(single.allows(open));
  EXPECT_TRUE(single.allows(eos));

  ToolCallGrammarOptions none;
  none.calls_allowed = false;
  EXPECT_FALSE(ToolCallMatcher(grammar(tools, none)).allows(open));
  EXPECT_FALSE(ToolCallMatcher(grammar({}, {})).allows(open)) << "no tools, no calls";
}

TEST_F(ToolGrammarTest, RequiredPropertiesInSortedOrder) {
  const auto g = grammar(agent_tool_specs());
  EXPECT_TRUE(accepts_call(g, R"({"name":"convert","arguments":{"from":"usd","to":"eur","value":3}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name":"convert","arguments":{"from":"usd","value":3,"to":"eur"}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name":"convert","arguments":{"from":"usd","value":3}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name":"convert","arguments":{"from":"usd","to":"eur","value":"3"}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name":"calendar","arguments":{"date":"d","days":1.5}})"));
  EXPECT_TRUE(accepts_call(g, R"({"name":"calendar","arguments":{"date":"d","days":-12}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name":"lookup","arguments":{"item":"x"}})"));
  EXPECT_FALSE(accepts_call(g, R"({"name": "calculator","arguments":{"expression":"1"}})")) << "compact only";
  EXPECT_FALSE(accepts_call(g, "{\"name\":\"lookup_price\",\"arguments\":{\"item\":\"caf\xc3\"}}")) << "UTF-8";
  EXPECT_TRUE(accepts_call(g, "{\"name\":\"lookup_price\",\"arguments\":{\"item\":\"caf\xc3\xa9\\u00e9\"}}"));
}

// The sampler under the mask, on random logits: every reply is read back by the chat template's parser as
// well-formed calls of known tools whose arguments satisfy their schemas; without the mask most are not.
TEST_F(ToolGrammarTest, SampledRepliesParseAsValidCalls) {
  const std::vector<ToolSpec>& tools = agent_tool_specs();
  const auto g = grammar(tools);
  const int32_t open = tok_->id_of("<|tool_call|>");
  const auto V = int64_t(tok_->vocab_size());
  std::mt19937_64 noise(3);
  std::normal_distribution<float> n01(0.0f, 2.0f);
  int calls = 0, valid_without_mask = 0;
  for (int seed = 0; seed < 80; ++seed) {
    const bool masked = seed < 40;
    SamplingParams sp;
    sp.seed = uint64_t(seed);
    if (masked) {
      sp.tool_grammar = g;
      sp.tool_grammar_start = {open};  // tool_choice "required"
    }
    Sampler s(sp);
    std::vector<int32_t> reply = {open};
    for (int step = 0; step < (masked ? 4000 : 300); ++step) {
      std::vector<float> logits(static_cast<size_t>(V));
      for (float& x : logits) x = n01(noise);
      const int32_t t = s.sample(logits, {}).token;
      s.observe(t);
      if (t == tok_->id_of("<|endoftext|>") || t == kEosId) break;
      reply.push_back(t);
    }
    const AssistantReply r = parse_assistant_reply(*tok_, reply);
    if (!masked) {
      valid_without_mask += r.error.empty() && !r.tool_calls.empty();
      continue;
    }
    ASSERT_TRUE(r.error.empty()) << r.error << ": " << tok_->decode(reply);
    ASSERT_FALSE(r.tool_calls.empty()) << tok_->decode(reply);
    for (const ToolCall& c : r.tool_calls) {
      const auto it = std::find_if(tools.begin(), tools.end(), [&](const ToolSpec& t) { return t.name == c.name; });
      ASSERT_NE(it, tools.end()) << c.name;
      EXPECT_TRUE(JsonSchema(it->parameters).accepts(c.arguments)) << tool_call_text(c);
      ++calls;
    }
  }
  EXPECT_GE(calls, 40);
  EXPECT_LE(valid_without_mask, 2) << "the same logits without the mask";
}

TEST_F(ToolGrammarTest, BadStartsAreRefused) {
  SamplingParams sp;
  sp.tool_grammar_start = {7};
  EXPECT_THROW(validate(sp), Error) << "a start without a grammar";
  sp.tool_grammar = grammar(agent_tool_specs());
  sp.tool_grammar_start = {tok_->byte_id('x')};  // not <|tool_call|>... : the content may start with text
  EXPECT_NO_THROW(Sampler{sp});
  sp.tool_grammar_start = {tok_->id_of("<|tool_call|>"), tok_->byte_id('x')};
  EXPECT_THROW(Sampler{sp}, Error) << "x cannot start a call";
}

}  // namespace
}  // namespace myriad
