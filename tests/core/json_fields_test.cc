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

}  // namespace
}  // namespace myriad
