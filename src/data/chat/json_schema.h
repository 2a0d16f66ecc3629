// The part of JSON Schema that tool parameters use (issue 15: strict tool calls), compiled once into a tree that
// both checks a JSON value (JsonSchema::accepts: the agent's count of calls whose arguments break their tool's
// schema) and drives constrained decoding one character at a time (data/chat/tool_call_grammar.h).
//
// Understood (anything else makes its node "any JSON value", never an error: a schema the model cannot be held to
// is left open rather than refused):
//   {"enum": [v, ...]}, {"const": v}    one of the values, as compact JSON (nlohmann's dump)
//   {"type": "string"}                  any string (format, pattern and lengths are not enforced)
//   {"type": "number"}                  a JSON number; "integer": digits only (no fraction, no exponent); the
//                                       decoder bounds the digits (data/chat/tool_call_grammar.h)
//   {"type": "boolean"}, {"type": "null"}
//   {"type": "object", "properties": {k: s, ...}, "required": [k, ...]}
//                                       the declared properties only (OpenAI's strict mode: additionalProperties
//                                       false), each at most once, the required ones present; written in sorted
//                                       key order, the order the chat template renders arguments in. Without
//                                       "properties": any object.
//   {"type": "array", "items": s}       items of s; without "items": any values
// A list of types (["string", "null"]), anyOf / oneOf / allOf, $ref: any value. Deeper than kMaxSchemaDepth: any
// value. An object of more than kMaxCandidates properties: any object; an enum of more values: any value (the
// decoder tracks the candidates of a key or an enum in 128 bits).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace myriad {

inline constexpr int kMaxSchemaDepth = 16;
inline constexpr size_t kMaxCandidates = 128;

struct SchemaNode {
  enum class Kind : uint8_t { kAny, kString, kNumber, kInteger, kLiterals, kObject, kAnyObject, kArray };
  Kind kind = Kind::kAny;
  std::vector<std::string> literals;      // kLiterals: each allowed value as compact JSON
  std::vector<std::string> keys;          // kObject: the property names, sorted (std::map order)
  std::vector<std::string> key_literals;  // ... each as a JSON string ("\"item\"")
  std::vector<uint8_t> required;          // ... 1 for a required one
  std::vector<int> children;              // kObject: each property's node; kArray: {items}
};

class JsonSchema {
 public:
  JsonSchema();  // any value
  explicit JsonSchema(const nlohmann::json& schema);
  // A schema for a tool's arguments: `schema` when it describes objects, else any object (a call's arguments are
  // always an object).
  static JsonSchema arguments(const nlohmann::json& schema);

  bool accepts(const nlohmann::json& value) const { return accepts(0, value); }
  const SchemaNode& node(int i) const { return nodes_[size_t(i)]; }
  static constexpr int kRoot = 0;

 private:
  int compile(const nlohmann::json& s, int depth);
  bool accepts(int node, const nlohmann::json& v) const;
  std::vector<SchemaNode> nodes_;
};

}  // namespace myriad
