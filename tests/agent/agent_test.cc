// The agent layer: exact numbers and the calculator (against integer arithmetic done another way), the calendar
// (against std::chrono's civil calendar), the tools and their errors, the task families (their reference
// solutions replayed through an Episode score full marks; the splits are disjoint) and the episode's accounting
// (violations, limits, rewards).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <set>

#include "agent/agent_tasks.h"
#include "agent/agent_tokenizer.h"
#include "agent/episode.h"
#include "agent/exact_number.h"
#include "agent/tools.h"
#include "core/error.h"

namespace myriad {
namespace {

using json = nlohmann::json;

TEST(Exact, ParsesFormatsAndComputesExactly) {
  EXPECT_EQ(Exact::parse("4.50")->str(), "4.5");
  EXPECT_EQ(Exact::parse("-0.25")->str(), "-0.25");
  EXPECT_EQ(Exact::parse("12")->str(), "12");
  EXPECT_EQ(Exact::parse("3.")->str(), "3");
  EXPECT_EQ(Exact::parse("0.000")->str(), "0");
  for (const char* bad : {"", "-", ".", "1.2.3", "1e5", "abc", "--1", "1234567890123456789"})
    EXPECT_FALSE(Exact::parse(bad).has_value()) << bad;
  EXPECT_EQ((Exact(1) / Exact(3)).str(), "1/3");
  EXPECT_EQ((Exact(1) / Exact(3)).rounded(4).str(), "0.3333");
  EXPECT_EQ((Exact(2) / Exact(3)).rounded(4).str(), "0.6667");
  EXPECT_EQ((-(Exact(2) / Exact(3))).rounded(2).str(), "-0.67");
  // Random decimals with 2 places: the sum and product, done in integer hundredths, must match exactly.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const int64_t a = int64_t(rng() % 200001) - 100000, b = int64_t(rng() % 200001) - 100000;  // hundredths
    auto dec = [](int64_t h) {
      const int64_t u = h < 0 ? -h : h;
      char buf[40];
      std::snprintf(buf, sizeof buf, "%s%lld.%02lld", h < 0 ? "-" : "", static_cast<long long>(u / 100),
                    static_cast<long long>(u % 100));
      return std::string(buf);
    };
    const Exact x = *Exact::parse(dec(a)), y = *Exact::parse(dec(b));
    EXPECT_EQ(x + y, *Exact::parse(dec(a + b)));
    const Exact prod = x * y;  // a b / 10^4
    EXPECT_EQ(prod, Exact::fraction(a * b, 10000));
    EXPECT_EQ(evaluate_expression(dec(a) + " - " + dec(b)), x - y);
  }
  EXPECT_THROW(Exact(1) / Exact(0), Error);
  EXPECT_THROW(Exact(INT64_MAX / 2) * Exact(4), Error);  // overflow is an error, not a wrong number
}

TEST(Exact, CalculatorGrammar) {
  EXPECT_EQ(evaluate_expression("3*0.5+2*1.25").str(), "4");
  EXPECT_EQ(evaluate_expression("2+3*4").str(), "14");
  EXPECT_EQ(evaluate_expression("(2+3)*4").str(), "20");
  EXPECT_EQ(evaluate_expression("10-4-3").str(), "3");  // left-associative
  EXPECT_EQ(evaluate_expression("12/4/3").str(), "1");
  EXPECT_EQ(evaluate_expression(" - ( 1 + 2 ) * -2 ").str(), "6");
  EXPECT_EQ(evaluate_expression("7/2").str(), "3.5");
  const std::pair<const char*, const char*> bad[] = {{"2+", "at the end"},      {"2+*3", "expected a number, got '*'"},
                                                     {"(1+2", "missing ')'"},   {"1/0", "division by zero"},
                                                     {"2 3", "unexpected '3'"}, {"1.2.3", "bad number"},
                                                     {"x", "got 'x'"}};
  for (const auto& [e, want] : bad) {
    try {
      evaluate_expression(e);
      ADD_FAILURE() << "accepted " << e;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(want), std::string::npos) << e << ": " << err.what();
    }
  }
  EXPECT_THROW(evaluate_expression(std::string(40, '(') + "1" + std::string(40, ')')), Error);
  EXPECT_THROW(evaluate_expression(std::string(300, '1')), Error);
}

TEST(Calendar, MatchesStdChrono) {
  using namespace std::chrono;
  for (int64_t d = days_from_civil(1900, 1, 1); d <= days_from_civil(2199, 12, 31); d += 37) {
    const year_month_day ymd{sys_days{days{d}}};
    char want[16];
    std::snprintf(want, sizeof want, "%04d-%02u-%02u", int(ymd.year()), unsigned(ymd.month()), unsigned(ymd.day()));
    ASSERT_EQ(civil_from_days(d), want) << d;
    EXPECT_EQ(days_from_civil(int(ymd.year()), unsigned(ymd.month()), unsigned(ymd.day())), d);
    const char* names[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
    EXPECT_STREQ(weekday_name(d), names[weekday{sys_days{days{d}}}.c_encoding()]);
  }
}

TEST(Tools, ResultsAndErrors) {
  ToolWorld w(42);
  ASSERT_EQ(w.items().size(), 6u);
  const std::string item = w.items()[0];
  EXPECT_EQ(w.call("lookup_price", {{"item", item}}).text, w.price(item).str());
  EXPECT_EQ(w.call("calculator", {{"expression", "3*0.5+2*1.25"}}).text, "4");
  EXPECT_EQ(w.call("calendar", {{"date", "2026-03-14"}, {"days", 45}}).text, "2026-04-28 Tuesday");
  EXPECT_EQ(w.call("calendar", {{"date", "2024-02-28"}, {"days", "1"}}).text, "2024-02-29 Thursday");
  EXPECT_EQ(w.call("convert", {{"value", 2.5}, {"from", "km"}, {"to", "m"}}).text, "2500");
  EXPECT_EQ(w.call("convert", {{"value", "90"}, {"from", "min"}, {"to", "h"}}).text, "1.5");
  EXPECT_EQ(w.call("convert", {{"value", 10}, {"from", "usd"}, {"to", "eur"}}).text, (Exact(10) * w.rate("eur")).str());
  // usd -> eur -> usd is exact or rounded to 4 places (never a long fraction).
  const std::string back = w.call("convert", {{"value", 1}, {"from", "eur"}, {"to", "usd"}}).text;
  EXPECT_EQ(back, (Exact(1) / w.rate("eur")).terminates() ? (Exact(1) / w.rate("eur")).str()
                                                          : (Exact(1) / w.rate("eur")).rounded(4).str());
  EXPECT_EQ(w.call("delete_record", {{"item", item}}).text, "deleted");
  EXPECT_FALSE(w.has_record(item));
  const std::pair<json, const char*> bad[] = {
      {json{{"item", item}}, "no record"},  // deleted: lookups fail now
  };
  EXPECT_TRUE(w.call("lookup_price", bad[0].first).error);
  struct Case {
    const char* tool;
    json args;
    const char* want;
  };
  const Case cases[] = {
      {"lookup_price", {{"item", "unicorn"}}, "no record of 'unicorn'"},
      {"lookup_price", json::object(), "missing argument 'item'"},
      {"lookup_price", {{"item", 3}}, "must be a string"},
      {"calculator", {{"expression", "1/0"}}, "division by zero"},
      {"convert", {{"value", 1}, {"from", "km"}, {"to", "kg"}}, "cannot convert km (length) to kg (mass)"},
      {"convert", {{"value", 1}, {"from", "usd"}, {"to", "m"}}, "cannot convert usd to m"},
      {"convert", {{"value", "1e3"}, {"from", "m"}, {"to", "km"}}, "not a decimal number"},
      {"convert", {{"value", true}, {"from", "m"}, {"to", "km"}}, "must be a number"},
      {"calendar", {{"date", "2026-02-30"}, {"days", 1}}, "does not exist"},
      {"calendar", {{"date", "14/03/2026"}, {"days", 1}}, "not YYYY-MM-DD"},
      {"calendar", {{"date", "2026-03-14"}, {"days", 1.5}}, "must be an integer"},
      {"calendar", {{"date", "2199-12-01"}, {"days", 100}}, "out of range"},
      {"rm_rf", json::object(), "unknown tool 'rm_rf'"},
      {"calculator", json::array(), "arguments must be an object"},
  };
  for (const Case& c : cases) {
    const ToolResult r = w.call(c.tool, c.args);
    EXPECT_TRUE(r.error) << c.tool << " " << c.args.dump();
    EXPECT_NE(r.text.find(c.want), std::string::npos) << c.tool << " " << c.args.dump() << ": " << r.text;
  }
  // The same seed is the same world.
  ToolWorld a(7), b(7), c(8);
  EXPECT_EQ(a.items(), b.items());
  EXPECT_EQ(a.price(a.items()[3]), b.price(b.items()[3]));
  EXPECT_TRUE(a.items() != c.items() || a.price(a.items()[0]) != c.price(c.items()[0]));
}

class EpisodeTest : public testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &test::agent_tokenizer(); }
  // An assistant message's reply tokens: between its <|assistant|> and its <|endoftext|>.
  static std::vector<int32_t> reply(const ChatMessage& m) {
    const std::vector<int32_t> ids = encode_chat(*tok_, std::vector<ChatMessage>{m}, {}, false).ids;
    return {ids.begin() + 1, ids.end() - 1};
  }
  static ChatMessage call(const std::string& name, json args) {
    ChatMessage m("assistant", "");
    m.tool_calls.push_back({"", name, std::move(args)});
    return m;
  }
  static int32_t eos() { return tok_->id_of("<|endoftext|>"); }
  static const Tokenizer* tok_;
};
const Tokenizer* EpisodeTest::tok_ = nullptr;

TEST_F(EpisodeTest, ReferenceSolutionsScoreFullMarksInEveryFamily) {
  for (const AgentSplit split : {AgentSplit::kTrain, AgentSplit::kHeldOut}) {
    for (const AgentTask& task : agent_tasks(11, 60, split)) {
      Episode ep(*tok_, task);
      for (const ChatMessage& m : task.solution) {
        if (m.role != "assistant") continue;
        ASSERT_FALSE(ep.done()) << task.prompt;
        ep.add_reply(reply(m), eos(), 0.01);
      }
      ASSERT_TRUE(ep.done()) << task.prompt;
      const EpisodeOutcome& o = ep.outcome();
      EXPECT_TRUE(o.success) << task.prompt << " answered " << o.answer << ", want " << task.answer;
      EXPECT_EQ(o.calls, task.min_calls);
      EXPECT_EQ(o.violations(), 0);
      EXPECT_EQ(o.valid_calls(), o.calls) << "a reference call breaks its tool's schema: " << o.to_json().dump();
      EXPECT_EQ(o.total, 1.0) << o.to_json().dump();
      // The trajectory is the template's encoding of the conversation, and the policy mask its assistant mask.
      const ChatTokens whole = encode_chat(*tok_, demonstration(task), agent_tool_specs(), false);
      EXPECT_EQ(ep.tokens(), whole.ids);
      EXPECT_EQ(ep.policy_mask(), whole.assistant);
      EXPECT_EQ(o.policy_tokens, reference_assistant_tokens(*tok_, task));
    }
  }
}

TEST_F(EpisodeTest, FamiliesNeedTheirCallsAndSplitsAreDisjoint) {
  std::set<std::pair<std::string, std::string>> train, held;
  for (const AgentTask& t : agent_tasks(3, 600, AgentSplit::kTrain))
    train.insert({agent_family_name(t.family), t.problem});
  for (const AgentTask& t : agent_tasks(4, 600, AgentSplit::kHeldOut))
    held.insert({agent_family_name(t.family), t.problem});
  for (const auto& p : held) EXPECT_FALSE(train.count(p)) << p.first << " " << p.second;
  EXPECT_GT(held.size(), 30u);  // not one repeated problem
  const int want_calls[] = {1, 1, 1, 1, 3, 4};
  for (size_t f = 0; f < std::size(kAgentFamilies); ++f) {
    const AgentTask t = make_agent_task(kAgentFamilies[f], 5, AgentSplit::kTrain);
    EXPECT_EQ(t.min_calls, want_calls[f]) << agent_family_name(t.family);
    EXPECT_EQ(agent_family_from_name(agent_family_name(t.family)), t.family);
    EXPECT_EQ(t.forbidden.empty(), t.family == AgentFamily::kDelete);
  }
  EXPECT_THROW(agent_family_from_name("chess"), Error);
  // Deterministic.
  EXPECT_EQ(agent_tasks(9, 12, AgentSplit::kTrain)[7].prompt, agent_tasks(9, 12, AgentSplit::kTrain)[7].prompt);
  EXPECT_TRUE(agent_answer_matches(" 4.50. ", "4.5"));
  EXPECT_FALSE(agent_answer_matches("4.51", "4.5"));
  EXPECT_TRUE(agent_answer_matches("done", "done"));
  EXPECT_FALSE(agent_answer_matches("", ""));
}

TEST_F(EpisodeTest, ViolationsErrorsAndLimitsAreCounted) {
  const AgentTask task = make_agent_task(AgentFamily::kPrice, 1, AgentSplit::kTrain);
  {  // forbidden tool, unknown tool, a tool error, a malformed call, an extra call, then the right answer
    Episode ep(*tok_, task);
    ep.add_reply(reply(call("delete_record", {{"item", task.problem}})), eos(), 0);
    ep.add_reply(reply(call("launch", json::object())), eos(), 0);
    ep.add_reply(tok_->encode("<|tool_call|>{\"name\": oops<|/tool_call|>"), eos(), 0);
    ASSERT_FALSE(ep.done());
    EXPECT_NE(ep.messages().back().content.find("malformed tool call"), std::string::npos);
    ep.add_reply(reply(call("lookup_price", {{"item", "unicorn"}})), eos(), 0);
    ep.add_reply(tok_->encode(task.answer), eos(), 0);
    ASSERT_TRUE(ep.done());
    const EpisodeOutcome& o = ep.outcome();
    EXPECT_EQ(o.forbidden_calls, 1);
    EXPECT_EQ(o.unknown_tools, 1);
    EXPECT_EQ(o.malformed_calls, 1);
    EXPECT_EQ(o.calls, 3);
    EXPECT_EQ(o.tool_errors, 2);  // the unknown tool and the unknown item (the deletion itself succeeded)
    EXPECT_TRUE(o.finished);
    EXPECT_TRUE(o.success);
    EXPECT_EQ(o.safety, -1.0);
    EXPECT_DOUBLE_EQ(o.efficiency, -0.2);
    EXPECT_EQ(o.completion, 1.0);
  }
  {  // the turn limit
    EpisodeLimits lim;
    lim.max_turns = 2;
    Episode ep(*tok_, task, lim);
    ep.add_reply(reply(call("calculator", {{"expression", "1+1"}})), eos(), 0);
    ep.add_reply(reply(call("calculator", {{"expression", "1+1"}})), eos(), 0);
    ASSERT_TRUE(ep.done());
    EXPECT_EQ(ep.outcome().limit, "turns");
    EXPECT_FALSE(ep.outcome().finished);
    EXPECT_EQ(ep.outcome().total, -0.1);  // no completion, one call beyond the minimum of 1
  }
  {  // a reply cut at the budget, and the length budget
    EpisodeLimits lim;
    lim.max_reply_tokens = 4;
    Episode ep(*tok_, task, lim);
    EXPECT_EQ(ep.reply_budget(), 4);
    std::vector<int32_t> r = tok_->encode("what is the total price of");
    r.resize(4);
    ep.add_reply(r, -1, 0);
    ASSERT_TRUE(ep.done());
    EXPECT_EQ(ep.outcome().limit, "tokens");
    RewardWeights w;
    w.length_tau = 0.01;
    Episode longer(*tok_, task, {}, w);
    longer.add_reply(tok_->encode(task.answer), eos(), 0);
    EXPECT_EQ(longer.outcome().length, -1.0);
  }
  {  // a reply that starts the user's turn itself: a forged turn, the episode ends
    Episode ep(*tok_, task);
    ep.add_reply(tok_->encode("hello"), tok_->id_of("<|user|>"), 0);
    ASSERT_TRUE(ep.done());
    EXPECT_EQ(ep.outcome().limit, "forged_turn");
    EXPECT_EQ(ep.outcome().malformed_calls, 1);
    EXPECT_EQ(ep.outcome().safety, -1.0);
    EXPECT_EQ(ep.tokens().back(), tok_->id_of("<|user|>"));
    EXPECT_EQ(ep.policy_mask().back(), 1);
  }
  {  // a delete task: deleting another record is a violation and does not complete it, even with "done"
    const AgentTask del = make_agent_task(AgentFamily::kDelete, 2, AgentSplit::kTrain);
    ToolWorld w(del.world_seed);
    std::string other;
    for (const std::string& it : w.items())
      if (it != del.delete_target) other = it;
    Episode ep(*tok_, del);
    ep.add_reply(reply(call("delete_record", {{"item", other}})), eos(), 0);
    ep.add_reply(tok_->encode("done"), eos(), 0);
    EXPECT_FALSE(ep.outcome().success);
    EXPECT_EQ(ep.outcome().forbidden_calls, 1);
  }
  {  // the time limit
    EpisodeLimits lim;
    lim.max_seconds = 1;
    Episode ep(*tok_, task, lim);
    ep.add_reply(reply(call("calculator", {{"expression", "1+1"}})), eos(), 2.0);
    ASSERT_TRUE(ep.done());
    EXPECT_EQ(ep.outcome().limit, "time");
  }
}

}  // namespace
}  // namespace myriad
