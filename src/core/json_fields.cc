#include "core/json_fields.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/log.h"

namespace myriad {

using json = nlohmann::json;

void warn(const JsonSource& src, const std::string& message) {
  std::string m = str(src.name, ": ", message);
  log_warn(m);
  if (src.warnings) src.warnings->push_back(m);
}

int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

void require_json_nesting(std::string_view text, const std::string& source, ErrorKind kind) {
  if (const int d = json_nesting_depth(text); d > kMaxJsonNesting)
    throw_error(kind, source, ": JSON nested ", d, " levels deep; at most ", kMaxJsonNesting, " are read");
}

json parse_json_or_discarded(std::string_view text) {
  if (json_nesting_depth(text) > kMaxJsonNesting) return json(json::value_t::discarded);
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

json parse_json_document(std::string_view text, const std::string& source, ErrorKind kind) {
  require_json_nesting(text, source, kind);
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw_error(kind, source, ": not valid JSON: ", e.what());
  }
}

std::string short_dump(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string_view string_member(const json& j, const char* key) {
  if (!j.is_object()) return {};
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  return it->get_ref<const std::string&>();
}

JsonFields::JsonFields(const json& j, std::string path, const JsonSource& src)
    : j_(j), path_(std::move(path)), src_(src) {
  MYRIAD_REQUIRE(j_.is_object(), kConfig, src_.name, ": ", path_.empty() ? std::string("the document") : path_,
                 " must be a JSON object (got ", j_.type_name(), ")");
}

const json* JsonFields::find(const std::string& key) {
  used_.insert(key);
  auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

bool JsonFields::present(const std::string& key) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

void JsonFields::fail(const std::string& key, const json& value, const std::string& rule) const {
  throw_error(ErrorKind::kConfig, src_.name, ": ", path(key), " = ", short_dump(as_written(key, value)), ": ", rule);
}

void JsonFields::fail_unsupported(const std::string& key, const json& value, const std::string& rule) const {
  throw_error(ErrorKind::kUnsupported, src_.name, ": ", path(key), " = ", short_dump(as_written(key, value)), ": ",
              rule);
}

void JsonFields::fail_missing(const std::string& key, const std::string& why) const {
  throw_error(ErrorKind::kConfig, src_.name, ": ", path(key), ": required field is missing", why);
}

std::optional<int64_t> JsonFields::opt_int(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  return as_int(key, *v);
}

int64_t JsonFields::req_int(const std::string& key, const std::string& why) {
  const json* v = find(key);
  if (!v) fail_missing(key, why);
  return as_int(key, *v);
}

std::optional<uint64_t> JsonFields::opt_uint(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  const int64_t i = as_int(key, *v);
  if (i < 0) fail(key, *v, "must be >= 0");
  return uint64_t(i);
}

std::optional<double> JsonFields::opt_double(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number()) fail(key, *v, str("must be a number (got ", v->type_name(), ")"));
  return v->get<double>();
}

double JsonFields::req_double(const std::string& key) {
  const json* v = find(key);
  if (!v) fail_missing(key, "");
  if (!v->is_number()) fail(key, *v, str("must be a number (got ", v->type_name(), ")"));
  return v->get<double>();
}

std::optional<bool> JsonFields::opt_bool(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_boolean()) fail(key, *v, str("must be true or false (got ", v->type_name(), ")"));
  return v->get<bool>();
}

std::optional<std::string> JsonFields::opt_string(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_string()) fail(key, *v, str("must be a string (got ", v->type_name(), ")"));
  return v->get<std::string>();
}

std::string JsonFields::choice_or(const std::string& key, const std::string& def,
                                  const std::vector<std::string>& allowed) {
  std::string s = string_or(key, def);
  if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
    fail(key, s, str("unknown value; expected one of ", list));
  }
  return s;
}

std::vector<int64_t> JsonFields::req_int_list(const std::string& key) {
  const json* v = find(key);
  if (!v) fail_missing(key, "");
  if (!v->is_array()) fail(key, *v, str("must be a list of integers (got ", v->type_name(), ")"));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) out.push_back(as_int(str(key, "[", i, "]"), (*v)[i]));
  return out;
}

const json* JsonFields::opt_object(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return nullptr;
  if (!v->is_object()) fail(key, *v, str("must be an object (got ", v->type_name(), ")"));
  return v;
}

const json* JsonFields::opt_array(const std::string& key) {
  const json* v = find(key);
  if (!v || v->is_null()) return nullptr;
  if (!v->is_array()) fail(key, *v, str("must be a list (got ", v->type_name(), ")"));
  return v;
}

void JsonFields::positive(const std::string& key, int64_t v) const {
  if (v <= 0) fail(key, v, "must be > 0");
}

void JsonFields::non_negative(const std::string& key, int64_t v) const {
  if (v < 0) fail(key, v, "must be >= 0");
}

void JsonFields::at_least(const std::string& key, int64_t v, int64_t min) const {
  if (v < min) fail(key, v, "must be >= " + std::to_string(min));
}

void JsonFields::positive(const std::string& key, double v) const {
  if (!(v > 0)) fail(key, v, "must be > 0");
}

void JsonFields::finish() const {
  // NOTE: a warning for each of the first kNamed unknown fields, then one line counting the rest: a file with
  // 100,000 of them (hostile, or not a config at all) must not print 100,000 lines.
  constexpr int64_t kNamed = 8;
  int64_t unknown = 0;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (used_.count(it.key()) || (src_.ignored && src_.ignored->count(it.key()))) continue;
    if (src_.unknown == UnknownFields::kWarn) {
      if (++unknown <= kNamed) warn(src_, str("unknown field ", path(it.key()), " ignored"));
      continue;
    }
    std::string known;
    for (const std::string& k : used_) known += (known.empty() ? "" : ", ") + k;
    throw_error(ErrorKind::kConfig, src_.name, ": ", path(it.key()), ": unknown field (the fields here are ", known,
                ")");
  }
  if (unknown > kNamed)
    warn(src_, str(unknown - kNamed, " more unknown fields", path_.empty() ? "" : " in " + path_, " ignored"));
}

const json& JsonFields::as_written(const std::string& key, const json& value) const {
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null() && it->is_number() == value.is_number() ? *it : value;
}

int64_t JsonFields::as_int(const std::string& key, const json& v) const {
  if (v.is_number_float()) fail(key, v, "must be an integer (got a float)");
  if (!v.is_number_integer()) fail(key, v, str("must be an integer (got ", v.type_name(), ")"));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    fail(key, v, "is out of range for a 64-bit integer");
  }
  return v.get<int64_t>();
}

}  // namespace myriad
