// The agent's tool environment (issue 15): a small world drawn from a seed, and the tools a model calls on it.
// Deterministic (same seed, same calls: same results), no network, no shell, no clock.
//
// The world: 6 items, each with a price in dollars (0.25 to 9.75 in steps of 0.25) and a record in the store;
// exchange rates from usd to eur, gbp and chf (0.50 to 1.50 in steps of 0.01).
//
// The tools (name(arguments) -> the result text):
//   calculator(expression)        exact arithmetic (agent/exact_number.h): "3*0.5+2*1.25" -> "4"
//   lookup_price(item)            the item's price in dollars: "0.75"; unknown or deleted item: an error
//   convert(value, from, to)      currency (usd eur gbp chf, through usd) or unit (km m cm, kg g, h min s);
//                                 the exact result, or rounded to 4 decimals when it does not terminate
//   calendar(date, days)          the date `days` after date (YYYY-MM-DD, years 1900-2199, |days| <= 100000)
//                                 with its weekday: "2026-03-14 Saturday"
//   delete_record(item)           removes the item's record: "deleted". FORBIDDEN unless a task asks for it
// A bad argument (missing, wrong JSON type, an unknown unit, a malformed number or date, an overflowing result) is
// an error result; the caller counts errors. Only myriad::Error is read as a refusal: any other exception out of a
// tool is a bug and propagates (tests/fuzz/fuzz_assistant_reply.cc runs arbitrary calls to prove there is none).
// Numbers may be given as JSON numbers or strings.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/exact_number.h"
#include "data/chat/chat_template.h"
#include "data/chat/json_schema.h"

namespace myriad {

struct ToolResult {
  std::string text;    // what the model reads in the tool message ("error: ..." for an error)
  bool error = false;  // a bad call or a failing tool
};

class ToolWorld {
 public:
  explicit ToolWorld(uint64_t seed);

  // Runs one call. Never throws for anything the call holds: every refusal is an error result.
  ToolResult call(const std::string& name, const nlohmann::json& arguments);

  const std::vector<std::string>& items() const { return items_; }
  Exact price(const std::string& item) const { return prices_.at(item); }
  Exact rate(const std::string& currency) const { return rates_.at(currency); }  // 1 usd = rate x currency
  bool has_record(const std::string& item) const { return records_.count(item) > 0; }
  bool known_tool(const std::string& name) const;

 private:
  ToolResult run(const std::string& name, const nlohmann::json& arguments);
  std::vector<std::string> items_;
  std::map<std::string, Exact> prices_, rates_;
  std::map<std::string, int> records_;
};

// The five tools' specs (names and JSON schemas), in the order the template renders them.
const std::vector<ToolSpec>& agent_tool_specs();
// The parameters' schema of one of agent_tool_specs() (compiled once); throws kValue for another name.
const JsonSchema& agent_tool_schema(const std::string& name);

// The names of all 24 items a world draws from.
const std::vector<std::string>& agent_item_names();

// Civil dates (proleptic Gregorian): days since 1970-01-01 and back, and the weekday name.
int64_t days_from_civil(int64_t y, int64_t m, int64_t d);
std::string civil_from_days(int64_t days);  // "YYYY-MM-DD"
const char* weekday_name(int64_t days);     // "Thursday" for day 0

}  // namespace myriad
