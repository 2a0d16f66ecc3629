// One reader for every JSON config myriad takes (the model config, the training config): the same rules for
// types, integers, unknown fields and messages everywhere.
//
// A JsonFields is one JSON object being read at a path ("" for the top level, "text_config", "stages[2]"). It
// remembers the keys it consumed, so finish() can treat whatever is left: keys the source's format lists as
// known but unused are silent; any other key is a warning (kWarn: foreign formats such as Hugging Face configs
// carry fields for other tools) or an error (kError: myriad's own formats, where an unknown key is a typo).
// The first violated rule throws kConfig; messages read "<source>: <json path> = <value as written>: <rule>".
// Integers: a float (2.5, and also 2.0) for an integer field is refused, never truncated; unsigned values that
// do not fit are refused.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace myriad {

enum class UnknownFields { kWarn, kError };

// What one whole document shares: its name for messages, the unknown-field rule, the known-but-unused keys,
// and where warnings go (also to the log).
struct JsonSource {
  std::string name;
  UnknownFields unknown = UnknownFields::kError;
  const std::set<std::string>* ignored = nullptr;  // silent at every level; may be null
  std::vector<std::string>* warnings = nullptr;    // may be null
};

// Logs "<source>: <message>" as a warning and records it.
void warn(const JsonSource& src, const std::string& message);

// Parses a whole JSON document read from `source`. Anything nlohmann refuses (bad syntax, and also a number too
// large for a double, "1e705", which it reports as out_of_range rather than a parse error) is one Error of `kind`
// naming the source.
nlohmann::json parse_json_document(std::string_view text, const std::string& source, ErrorKind kind);

// How deep JSON read from outside may nest. nlohmann parses and frees any depth without recursion, but dump() and
// copies recurse once per level: a 200 KB config holding 100,000 nested arrays crashed `myriad params` on the
// stack. myriad's own files and every published config nest fewer than 10 levels.
constexpr int kMaxJsonNesting = 256;
// The deepest nesting of arrays and objects in `text` (brackets inside strings skipped); linear, no parse.
int json_nesting_depth(std::string_view text);
// Throws one `kind` error naming `source` when `text` nests deeper than kMaxJsonNesting.
void require_json_nesting(std::string_view text, const std::string& source, ErrorKind kind);
// json::parse(text, nullptr, false) for outside data: a discarded value when `text` is not valid JSON or nests
// deeper than kMaxJsonNesting (callers' "not valid JSON" covers both).
nlohmann::json parse_json_or_discarded(std::string_view text);

// A JSON value for a message: at most 80 characters.
std::string short_dump(const nlohmann::json& v);

// The string `j` holds at `key`, or "" when `j` is not an object, lacks the key or holds another type there: for
// testing a tag ("type": "NFC") where anything else is simply no match. (nlohmann's value(key, "") throws a
// type_error when the member is, say, a boolean.)
std::string_view string_member(const nlohmann::json& j, const char* key);

class JsonFields {
 public:
  // `j` must outlive this reader; a non-object is refused with the path.
  JsonFields(const nlohmann::json& j, std::string path, const JsonSource& src);

  std::string path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& path() const { return path_; }
  const JsonSource& source() const { return src_; }

  // Marks `key` as consumed; null when absent. A JSON null is returned as is.
  const nlohmann::json* find(const std::string& key);
  bool present(const std::string& key) const;

  // `value` is the parsed value; when `key` is a field of this object its value is shown as written (0, not 0.0).
  [[noreturn]] void fail(const std::string& key, const nlohmann::json& value, const std::string& rule) const;
  [[noreturn]] void fail_unsupported(const std::string& key, const nlohmann::json& value,
                                     const std::string& rule) const;
  [[noreturn]] void fail_missing(const std::string& key, const std::string& why) const;

  // --- typed getters. Absent or null optional fields give nullopt. ---
  std::optional<int64_t> opt_int(const std::string& key);
  int64_t req_int(const std::string& key, const std::string& why = "");
  int64_t int_or(const std::string& key, int64_t def) { return opt_int(key).value_or(def); }
  std::optional<uint64_t> opt_uint(const std::string& key);  // a non-negative integer up to 2^64 - 1
  uint64_t uint_or(const std::string& key, uint64_t def) { return opt_uint(key).value_or(def); }

  std::optional<double> opt_double(const std::string& key);
  double req_double(const std::string& key);
  double double_or(const std::string& key, double def) { return opt_double(key).value_or(def); }

  std::optional<bool> opt_bool(const std::string& key);
  bool bool_or(const std::string& key, bool def) { return opt_bool(key).value_or(def); }

  std::optional<std::string> opt_string(const std::string& key);
  std::string string_or(const std::string& key, const std::string& def) { return opt_string(key).value_or(def); }
  // A string restricted to `allowed`.
  std::string choice_or(const std::string& key, const std::string& def, const std::vector<std::string>& allowed);

  std::vector<int64_t> req_int_list(const std::string& key);
  // An object-valued field; null when absent or JSON null.
  const nlohmann::json* opt_object(const std::string& key);
  // An array-valued field; null when absent or JSON null.
  const nlohmann::json* opt_array(const std::string& key);

  // --- value rules ---
  void positive(const std::string& key, int64_t v) const;
  void non_negative(const std::string& key, int64_t v) const;
  void at_least(const std::string& key, int64_t v, int64_t min) const;  // "must be >= min"
  void positive(const std::string& key, double v) const;

  // Every key neither consumed nor known-ignored: a warning each (kWarn) or an error for the first (kError).
  void finish() const;

 private:
  const nlohmann::json& as_written(const std::string& key, const nlohmann::json& value) const;
  int64_t as_int(const std::string& key, const nlohmann::json& v) const;

  const nlohmann::json& j_;
  std::string path_;
  const JsonSource& src_;
  std::set<std::string> used_;
};

}  // namespace myriad
