// string_member: the tag test used on outside JSON (tokenizer.json's "type"s) must answer "" rather than throw for
// every member that is not a string; nlohmann's value(key, "") throws type_error for those (a fuzzing finding).
#include "core/json_fields.h"

#include <gtest/gtest.h>

namespace myriad {
namespace {

TEST(StringMember, ReturnsTheStringOrEmptyForAnythingElse) {
  const nlohmann::json j = {{"type", "NFC"},
                            {"flag", true},
                            {"n", 7},
                            {"x", 2.5},
                            {"nil", nullptr},
                            {"list", nlohmann::json::array({"a"})},
                            {"obj", {{"type", "Q"}}},
                            {"empty", ""}};
  EXPECT_EQ(string_member(j, "type"), "NFC");
  EXPECT_EQ(string_member(j, "empty"), "");
  for (const char* key : {"flag", "n", "x", "nil", "list", "obj", "absent"})
    EXPECT_EQ(string_member(j, key), "") << key;
  for (const nlohmann::json& not_object :
       {nlohmann::json(nullptr), nlohmann::json(true), nlohmann::json("type"), nlohmann::json::array({"type", "NFC"})})
    EXPECT_EQ(string_member(not_object, "type"), "") << not_object.dump();
  EXPECT_EQ(string_member(j["obj"], "type"), "Q");
}

// The nesting bound for outside JSON: counted without parsing (brackets inside strings, escaped quotes included,
// are not nesting), and both parsers refuse one level past it while the bound itself still parses.
TEST(JsonNesting, CountsBracketsOutsideStringsAndBoundsBothParsers) {
  EXPECT_EQ(json_nesting_depth("1"), 0);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  EXPECT_EQ(json_nesting_depth(R"(["[[[", "\"[[", {"k]}": "\\"}, [[]]])"), 3);
  const auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  EXPECT_EQ(json_nesting_depth(nested(100000)), 100000);
  EXPECT_FALSE(parse_json_or_discarded(nested(kMaxJsonNesting)).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded(nested(kMaxJsonNesting + 1)).is_discarded());
  EXPECT_TRUE(parse_json_or_discarded("[1,").is_discarded());
  EXPECT_EQ(parse_json_or_discarded(R"({"a": [1, 2]})")["a"][1], 2);
  EXPECT_EQ(parse_json_document(nested(kMaxJsonNesting), "f.json", ErrorKind::kConfig).size(), 1u);
  try {
    parse_json_document(nested(kMaxJsonNesting + 1), "f.json", ErrorKind::kConfig);
    ADD_FAILURE() << "parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "f.json: JSON nested 257 levels deep; at most 256 are read");
  }
}

}  // namespace
}  // namespace myriad
