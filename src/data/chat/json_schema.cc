// The tool-parameter subset of JSON Schema: see json_schema.h.
#include "data/chat/json_schema.h"

#include <algorithm>
#include <map>

namespace myriad {

using nlohmann::json;

JsonSchema::JsonSchema() : nodes_(1) {}

JsonSchema::JsonSchema(const json& schema) {
  compile(schema, 0);
}

JsonSchema JsonSchema::arguments(const json& schema) {
  JsonSchema s(schema);
  const SchemaNode::Kind k = s.nodes_[0].kind;
  if (k != SchemaNode::Kind::kObject && k != SchemaNode::Kind::kAnyObject) {
    s.nodes_.resize(1);
    s.nodes_[0] = SchemaNode{};
    s.nodes_[0].kind = SchemaNode::Kind::kAnyObject;
  }
  return s;
}

int JsonSchema::compile(const json& s, int depth) {
  const int id = int(nodes_.size());
  nodes_.emplace_back();
  using K = SchemaNode::Kind;
  if (!s.is_object() || depth >= kMaxSchemaDepth) return id;  // any value
  std::vector<std::string> literals;
  if (const auto e = s.find("enum"); e != s.end() && e->is_array() && !e->empty()) {
    for (const json& v : *e) literals.push_back(v.dump());
  } else if (const auto c = s.find("const"); c != s.end()) {
    literals.push_back(c->dump());
  }
  if (!literals.empty()) {
    std::sort(literals.begin(), literals.end());
    literals.erase(std::unique(literals.begin(), literals.end()), literals.end());
    if (literals.size() <= kMaxCandidates) {
      nodes_[size_t(id)].kind = K::kLiterals;
      nodes_[size_t(id)].literals = std::move(literals);
    }
    return id;
  }
  const auto t = s.find("type");
  if (t == s.end() || !t->is_string()) return id;
  const std::string& type = t->get_ref<const std::string&>();
  if (type == "string") {
    nodes_[size_t(id)].kind = K::kString;
  } else if (type == "number") {
    nodes_[size_t(id)].kind = K::kNumber;
  } else if (type == "integer") {
    nodes_[size_t(id)].kind = K::kInteger;
  } else if (type == "boolean") {
    nodes_[size_t(id)].kind = K::kLiterals;
    nodes_[size_t(id)].literals = {"false", "true"};
  } else if (type == "null") {
    nodes_[size_t(id)].kind = K::kLiterals;
    nodes_[size_t(id)].literals = {"null"};
  } else if (type == "array") {
    nodes_[size_t(id)].kind = K::kArray;
    const auto items = s.find("items");
    const int child = compile(items != s.end() ? *items : json(), depth + 1);
    nodes_[size_t(id)].children = {child};
  } else if (type == "object") {
    const auto props = s.find("properties");
    if (props == s.end() || !props->is_object() || props->size() > kMaxCandidates) {
      nodes_[size_t(id)].kind = K::kAnyObject;
      return id;
    }
    std::map<std::string, const json*> sorted;  // nlohmann's objects iterate sorted already; said here explicitly
    for (auto it = props->begin(); it != props->end(); ++it) sorted[it.key()] = &it.value();
    std::vector<std::string> required;
    if (const auto r = s.find("required"); r != s.end() && r->is_array())
      for (const json& k : *r)
        if (k.is_string()) required.push_back(k.get<std::string>());
    nodes_[size_t(id)].kind = K::kObject;
    for (const auto& [key, sub] : sorted) {
      const int child = compile(*sub, depth + 1);  // (nodes_ may grow: index, never hold a reference across it)
      SchemaNode& n = nodes_[size_t(id)];
      n.keys.push_back(key);
      n.key_literals.push_back(json(key).dump());
      n.required.push_back(std::find(required.begin(), required.end(), key) != required.end() ? 1 : 0);
      n.children.push_back(child);
    }
  }
  return id;
}

bool JsonSchema::accepts(int node, const json& v) const {
  const SchemaNode& n = nodes_[size_t(node)];
  using K = SchemaNode::Kind;
  switch (n.kind) {
    case K::kAny:
      return true;
    case K::kString:
      return v.is_string();
    case K::kNumber:
      return v.is_number();
    case K::kInteger:
      return v.is_number_integer();
    case K::kLiterals:
      return std::binary_search(n.literals.begin(), n.literals.end(), v.dump());
    case K::kAnyObject:
      return v.is_object();
    case K::kArray:
      return v.is_array() && std::all_of(v.begin(), v.end(), [&](const json& x) { return accepts(n.children[0], x); });
    case K::kObject: {
      if (!v.is_object()) return false;
      for (auto it = v.begin(); it != v.end(); ++it) {
        const auto k = std::lower_bound(n.keys.begin(), n.keys.end(), it.key());
        if (k == n.keys.end() || *k != it.key()) return false;  // undeclared
        if (!accepts(n.children[size_t(k - n.keys.begin())], it.value())) return false;
      }
      for (size_t i = 0; i < n.keys.size(); ++i)
        if (n.required[i] && !v.contains(n.keys[i])) return false;
      return true;
    }
  }
  return false;
}

}  // namespace myriad
