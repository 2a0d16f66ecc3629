// The agent's tools and their world: see tools.h.
#include "agent/tools.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "core/error.h"

namespace myriad {

namespace {

using json = nlohmann::json;

const char* kCurrencies[] = {"eur", "gbp", "chf"};

// Unit -> (dimension, factor to the dimension's base unit).
struct Unit {
  const char* dimension;
  Exact factor;
};
const std::map<std::string, Unit>& units() {
  static const std::map<std::string, Unit> u = {
      {"km", {"length", 1000}}, {"m", {"length", 1}}, {"cm", {"length", Exact::fraction(1, 100)}},
      {"kg", {"mass", 1000}},   {"g", {"mass", 1}},   {"h", {"time", 3600}},
      {"min", {"time", 60}},    {"s", {"time", 1}},
  };
  return u;
}

const std::string& string_arg(const json& args, const char* name) {
  const auto it = args.find(name);
  MYRIAD_REQUIRE(it != args.end(), kValue, "missing argument '", name, "'");
  MYRIAD_REQUIRE(it->is_string(), kValue, "argument '", name, "' must be a string, got ", it->type_name());
  return it->get_ref<const std::string&>();
}

Exact number_arg(const json& args, const char* name) {
  const auto it = args.find(name);
  MYRIAD_REQUIRE(it != args.end(), kValue, "missing argument '", name, "'");
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_number_integer()) {
    return Exact(it->get<int64_t>());
  } else if (it->is_number()) {
    text = it->dump();  // nlohmann writes the shortest text that reads back as the same double
  } else {
    throw_error(ErrorKind::kValue, "argument '", name, "' must be a number, got ", it->type_name());
  }
  const std::optional<Exact> v = Exact::parse(text);
  MYRIAD_REQUIRE(v.has_value(), kValue, "argument '", name, "' = '", text, "' is not a decimal number");
  return *v;
}

// "YYYY-MM-DD" -> days since 1970-01-01, for years 1900-2199.
int64_t parse_date(const std::string& s) {
  int y = 0, m = 0, d = 0;
  char tail = 0;
  MYRIAD_REQUIRE(s.size() == 10 && std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3, kValue, "date '", s,
                 "' is not YYYY-MM-DD");
  MYRIAD_REQUIRE(y >= 1900 && y <= 2199 && m >= 1 && m <= 12 && d >= 1, kValue, "date '", s, "' is out of range");
  const int64_t days = days_from_civil(y, m, d);
  MYRIAD_REQUIRE(civil_from_days(days) == s, kValue, "date '", s, "' does not exist");
  return days;
}

}  // namespace

const std::vector<std::string>& agent_item_names() {
  static const std::vector<std::string> names = {
      "apple", "pear",   "plum",   "lemon",  "mango", "peach", "grape", "melon", "kiwi",  "lime", "fig", "date",
      "bread", "cheese", "butter", "coffee", "tea",   "rice",  "pasta", "flour", "sugar", "salt", "egg", "milk"};
  return names;
}

const std::vector<ToolSpec>& agent_tool_specs() {
  static const std::vector<ToolSpec> specs = [] {
    auto props = [](std::initializer_list<std::pair<const char*, const char*>> p) {
      json o = json::object();
      json required = json::array();
      for (const auto& [k, type] : p) {
        o[k] = {{"type", type}};
        required.push_back(k);
      }
      return json{{"type", "object"}, {"properties", o}, {"required", required}};
    };
    std::vector<ToolSpec> s(5);
    s[0] = {"calculator", "Evaluates + - * / and parentheses exactly.", props({{"expression", "string"}})};
    s[1] = {"lookup_price", "The price of one item, in dollars.", props({{"item", "string"}})};
    s[2] = {"convert", "Converts a value between currencies (usd eur gbp chf) or units (km m cm kg g h min s).",
            props({{"value", "number"}, {"from", "string"}, {"to", "string"}})};
    s[3] = {"calendar", "The date a number of days after a date (YYYY-MM-DD), with its weekday.",
            props({{"date", "string"}, {"days", "integer"}})};
    s[4] = {"delete_record", "Deletes an item's record. Only when asked to.", props({{"item", "string"}})};
    return s;
  }();
  return specs;
}

const JsonSchema& agent_tool_schema(const std::string& name) {
  static const std::vector<JsonSchema> schemas = [] {
    std::vector<JsonSchema> s;
    for (const ToolSpec& t : agent_tool_specs()) s.emplace_back(t.parameters);
    return s;
  }();
  const std::vector<ToolSpec>& specs = agent_tool_specs();
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return schemas[i];
  throw_error(ErrorKind::kValue, "no built-in tool named '", name, "'");
}

int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;                                    // [0, 399]
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;  // [0, 365], March first
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;            // [0, 146096]
  return era * 146097 + doe - 719468;
}

std::string civil_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp < 10 ? mp + 3 : mp - 9;
  const int64_t y = yoe + era * 400 + (m <= 2);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04lld-%02lld-%02lld", static_cast<long long>(y), static_cast<long long>(m),
                static_cast<long long>(d));
  return buf;
}

const char* weekday_name(int64_t days) {
  static const char* names[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
  return names[((days % 7) + 7 + 4) % 7];  // 1970-01-01 was a Thursday
}

ToolWorld::ToolWorld(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> pool = agent_item_names();
  for (int i = 0; i < 6; ++i) {
    const size_t j = size_t(i) + size_t(rng() % (pool.size() - size_t(i)));
    std::swap(pool[size_t(i)], pool[j]);
    items_.push_back(pool[size_t(i)]);
    prices_[pool[size_t(i)]] = Exact::fraction(int64_t(1 + rng() % 39), 4);  // 0.25 .. 9.75
    records_[pool[size_t(i)]] = i;
  }
  for (const char* c : kCurrencies) rates_[c] = Exact::fraction(int64_t(50 + rng() % 101), 100);  // 0.50 .. 1.50
  rates_["usd"] = 1;
}

bool ToolWorld::known_tool(const std::string& name) const {
  const auto& s = agent_tool_specs();
  return std::any_of(s.begin(), s.end(), [&](const ToolSpec& t) { return t.name == name; });
}

ToolResult ToolWorld::call(const std::string& name, const json& arguments) {
  try {
    return run(name, arguments);
  } catch (const Error& e) {  // a bad argument or a failing tool: the model reads why
    return {std::string("error: ") + e.what(), true};
  }
}

ToolResult ToolWorld::run(const std::string& name, const json& args) {
  MYRIAD_REQUIRE(known_tool(name), kValue, "unknown tool '", name, "'");
  MYRIAD_REQUIRE(args.is_object(), kValue, "arguments must be an object");
  if (name == "calculator") return {evaluate_expression(string_arg(args, "expression")).str(), false};
  if (name == "lookup_price") {
    const std::string& item = string_arg(args, "item");
    MYRIAD_REQUIRE(prices_.count(item) && records_.count(item), kValue, "no record of '", item, "'");
    return {prices_.at(item).str(), false};
  }
  if (name == "delete_record") {
    const std::string& item = string_arg(args, "item");
    MYRIAD_REQUIRE(records_.erase(item) == 1, kValue, "no record of '", item, "'");
    return {"deleted", false};
  }
  if (name == "calendar") {
    const int64_t day = parse_date(string_arg(args, "date"));
    const auto it = args.find("days");
    MYRIAD_REQUIRE(it != args.end() && (it->is_number_integer() || it->is_string()), kValue,
                   "argument 'days' must be an integer");
    const std::optional<Exact> n =
        it->is_string() ? Exact::parse(it->get<std::string>()) : std::optional<Exact>(Exact(it->get<int64_t>()));
    MYRIAD_REQUIRE(n && n->den() == 1 && n->num() >= -100000 && n->num() <= 100000, kValue,
                   "argument 'days' must be an integer in [-100000, 100000]");
    const int64_t to = day + n->num();
    const std::string date = civil_from_days(to);
    MYRIAD_REQUIRE(date >= "1900-01-01" && date <= "2199-12-31", kValue, "the result ", date, " is out of range");
    return {date + " " + weekday_name(to), false};
  }
  // convert
  const Exact value = number_arg(args, "value");
  const std::string &from = string_arg(args, "from"), &to = string_arg(args, "to");
  Exact out;
  if (rates_.count(from) || rates_.count(to)) {
    MYRIAD_REQUIRE(rates_.count(from) && rates_.count(to), kValue, "cannot convert ", from, " to ", to,
                   " (currencies: usd eur gbp chf)");
    out = value / rates_.at(from) * rates_.at(to);
  } else {
    const auto f = units().find(from), t = units().find(to);
    MYRIAD_REQUIRE(f != units().end(), kValue, "unknown unit '", from, "'");
    MYRIAD_REQUIRE(t != units().end(), kValue, "unknown unit '", to, "'");
    MYRIAD_REQUIRE(std::string(f->second.dimension) == t->second.dimension, kValue, "cannot convert ", from, " (",
                   f->second.dimension, ") to ", to, " (", t->second.dimension, ")");
    out = value * f->second.factor / t->second.factor;
  }
  if (!out.terminates()) out = out.rounded(4);
  return {out.str(), false};
}

}  // namespace myriad
