// Kimi K3's chat format; see k3_chat_format.h for the grammar.
#include "data/chat/k3_chat_format.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/json_fields.h"

namespace myriad {

namespace {

using Attrs = std::vector<std::pair<std::string, std::string>>;

std::string escape_attr(const std::string& v) {
  std::string out;
  for (const char c : v) out += c == '&' ? std::string("&amp;") : c == '"' ? std::string("&quot;") : std::string(1, c);
  return out;
}

std::string unescape_attr(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else if (v.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else {
      out += v[i];
    }
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Compact JSON with object keys sorted as Jinja's dictsort sorts them (case-insensitively; equal ones stable).
std::string sorted_json(const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    std::vector<std::pair<std::string, const nlohmann::ordered_json*>> items;
    for (auto it = v.begin(); it != v.end(); ++it) items.emplace_back(it.key(), &it.value());
    std::stable_sort(items.begin(), items.end(),
                     [](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i)
      out += (i ? "," : "") + nlohmann::json(items[i].first).dump() + ":" + sorted_json(*items[i].second);
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + sorted_json(v[i]);
    return out + "]";
  }
  return python_json(v);
}

const char* json_type(const nlohmann::json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  return v.is_object() ? "object" : "array";
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
}

class Writer {
 public:
  void special(const char* s, bool assistant) { out.push_back({s, true, assistant}); }
  void text(std::string s, bool assistant) {
    if (!s.empty()) out.push_back({std::move(s), false, assistant});
  }
  void open(const std::string& tag, const Attrs& attrs = {}, bool assistant = false) {
    std::string t = tag;
    for (const auto& [k, v] : attrs) t += " " + k + "=\"" + escape_attr(v) + "\"";
    special("<|open|>", assistant);
    text(std::move(t), assistant);
    special("<|sep|>", assistant);
  }
  void close(const std::string& tag, bool assistant = false) {
    special("<|close|>", assistant);
    text(tag, assistant);
    special("<|sep|>", assistant);
  }
  // A whole message: its opening, its text, its close and the end of message.
  void message(const Attrs& attrs, const std::string& body) {
    open("message", attrs);
    text(body, false);
    close("message");
    special("<|end_of_msg|>", false);
  }
  void message(const Attrs& attrs, const ChatMessage& m) {  // its content with its images
    open("message", attrs);
    append_content(out, m, false, MediaWrap::kK3);
    close("message");
    special("<|end_of_msg|>", false);
  }
  std::vector<ChatPiece> out;
};

void write_call(Writer& w, const ToolCall& call, size_t index) {
  w.open("call", {{"tool", call.name}, {"index", std::to_string(index)}}, true);
  if (!call.arguments_text.empty()) {  // a string, as OpenAI's messages carry arguments: a json block
    if (!blank(call.arguments_text)) {
      w.open("json", {{"type", "object"}}, true);
      w.text(call.arguments_text, true);
      w.close("json", true);
    }
  } else {
    for (const auto& [key, value] : call.arguments.items()) {
      w.open("argument", {{"key", key}, {"type", json_type(value)}}, true);
      w.text(value.is_string() ? value.get<std::string>() : python_json(value), true);
      w.close("argument", true);
    }
  }
  w.close("call", true);
}

}  // namespace

std::vector<ChatPiece> k3_pieces(std::span<const ChatMessage> messages, std::span<const ToolSpec> tools,
                                 bool generation_prompt, ToolChoice tool_choice) {
  Writer w;
  if (!tools.empty()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ToolSpec& t : tools) list.push_back(t.entry());
    w.message(
        {{"role", "system"}, {"type", "tool-declare"}},
        "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + sorted_json(list) + "\n```");
  }
  w.message({{"role", "system"}, {"type", "thinking-effort"}},
            "`thinking_effort` guides on how much to think in your thinking channel (not including the response "
            "channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked "
            "with `thinking_effort=max`.");
  const std::vector<ToolCall>* calls = nullptr;  // the last assistant message's calls
  size_t results = 0;                            // tool results since that message
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    MYRIAD_REQUIRE(m.tool_calls.empty() || m.role == "assistant", kValue, "messages[", i, "].tool_calls: only ",
                   "assistant messages carry tool calls (this one's role is '", m.role, "')");
    if (m.role == "user" || m.role == "system" || m.role == "developer") {
      w.message({{"role", m.role == "user" ? "user" : "system"}}, m);
    } else if (m.role == "assistant") {
      calls = &m.tool_calls;
      results = 0;
      w.open("message", {{"role", "assistant"}});
      w.open("think");
      if (!blank(m.reasoning_content)) w.text(m.reasoning_content, true);
      w.close("think", true);
      w.open("response", {}, true);
      w.text(m.content, true);
      w.close("response", true);
      if (!m.tool_calls.empty()) {
        w.open("tools", {}, true);
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          MYRIAD_REQUIRE(m.tool_calls[k].arguments.is_object() && !m.tool_calls[k].name.empty(), kValue, "messages[", i,
                         "].tool_calls[", k, "]: needs a name and an object of arguments");
          write_call(w, m.tool_calls[k], k + 1);
        }
        w.close("tools", true);
      }
      w.close("message", true);
      w.special("<|end_of_msg|>", true);
    } else if (m.role == "tool") {
      if (i > 0 && messages[i - 1].role == "tool") continue;  // written with the first of its run
      size_t end = i;
      while (end < messages.size() && messages[end].role == "tool") ++end;
      auto find_call = [&](const std::string& id) -> const ToolCall* {
        if (!calls || id.empty()) return nullptr;
        for (const ToolCall& c : *calls)
          if (c.id == id) return &c;
        return nullptr;
      };
      bool all_matched = calls != nullptr;
      for (size_t j = i; j < end; ++j) all_matched = all_matched && find_call(messages[j].tool_call_id) != nullptr;
      auto result = [&](const ChatMessage& r, const std::string& name) {
        w.message({{"role", "tool"}, {"tool", name}, {"index", std::to_string(++results)}}, r.content);
      };
      if (all_matched) {  // in the calls' order
        std::vector<std::string> emitted;
        for (const ToolCall& c : *calls) {
          if (std::find(emitted.begin(), emitted.end(), c.id) != emitted.end()) continue;
          emitted.push_back(c.id);
          for (size_t j = i; j < end; ++j)
            if (messages[j].tool_call_id == c.id) result(messages[j], c.name);
        }
      } else {  // as given, each named by the call at its position
        for (size_t j = i; j < end; ++j) {
          MYRIAD_REQUIRE(calls && results < calls->size(), kValue, "messages[", j,
                         "]: a tool result whose call cannot be found (the k3 format names each result's tool: give "
                         "tool_call_id of a call of the assistant message before it, or as many results as calls)");
          result(messages[j], (*calls)[results].name);
        }
      }
    } else {
      throw_error(ErrorKind::kValue, "messages[", i, "].role = '", m.role,
                  "': must be one of system, developer, user, assistant, tool");
    }
  }
  if (tool_choice == ToolChoice::kRequired)
    w.message({{"role", "system"}, {"type", "tool-choice"}},
              "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  else if (tool_choice == ToolChoice::kNone)
    w.message({{"role", "system"}, {"type", "tool-choice"}},
              "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  if (generation_prompt) {
    w.open("message", {{"role", "assistant"}});
    w.open("think");
  }
  return w.out;
}

namespace {

// A reply as a list of items: text runs and tags (<|open|> / <|close|> NAME ATTRS <|sep|>).
struct Item {
  enum class Kind { kText, kOpen, kClose } kind = Kind::kText;
  std::string text;  // kText: the text; a tag: its name
  std::map<std::string, std::string> attrs;
};

// Splits "call tool=\"x\" index=\"1\"" into the name and the attributes; false when it is not of that form.
bool parse_tag(const std::string& s, Item& item) {
  size_t i = s.find(' ');
  item.text = s.substr(0, i);
  if (item.text.empty()) return false;
  while (i != std::string::npos && i < s.size()) {
    const size_t eq = s.find("=\"", i + 1);
    if (eq == std::string::npos) return false;
    const size_t q = s.find('"', eq + 2);
    if (q == std::string::npos) return false;
    item.attrs[s.substr(i + 1, eq - i - 1)] = unescape_attr(s.substr(eq + 2, q - eq - 2));
    i = q + 1;
    if (i < s.size() && s[i] != ' ') return false;
  }
  return true;
}

}  // namespace

AssistantReply parse_k3_reply(const Tokenizer& tok, std::span<const int32_t> ids) {
  const int32_t open = tok.id_of("<|open|>"), close = tok.id_of("<|close|>"), sep = tok.id_of("<|sep|>");
  auto malformed = [&](std::string why) { return malformed_reply(tok, ids, std::move(why)); };
  // Tokens into items.
  std::vector<Item> items;
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] == open || ids[i] == close) {
      const auto s = std::find(ids.begin() + int64_t(i) + 1, ids.end(), sep);
      if (s == ids.end()) return malformed(str("a tag at token ", i, " is not closed by <|sep|>"));
      Item item;
      item.kind = ids[i] == open ? Item::Kind::kOpen : Item::Kind::kClose;
      const std::string body = tok.decode(std::span<const int32_t>(ids.begin() + int64_t(i) + 1, s));
      if (!parse_tag(body, item)) return malformed(str("not a tag: '", body, "'"));
      items.push_back(std::move(item));
      i = size_t(s - ids.begin()) + 1;
    } else if (ids[i] == sep) {
      return malformed(str("<|sep|> without a tag at token ", i));
    } else {
      size_t j = i;
      while (j < ids.size() && ids[j] != open && ids[j] != close && ids[j] != sep) ++j;
      items.push_back({Item::Kind::kText, tok.decode(ids.subspan(i, j - i)), {}});
      i = j;
    }
  }
  size_t at = 0;
  auto is = [&](Item::Kind k, const char* name) {
    return at < items.size() && items[at].kind == k && items[at].text == name;
  };
  auto take_text = [&] {
    std::string t;
    if (at < items.size() && items[at].kind == Item::Kind::kText) t = items[at++].text;
    return t;
  };
  auto expect = [&](Item::Kind k, const char* name) {
    if (is(k, name)) {
      ++at;
      return std::string();
    }
    return str("expected ", k == Item::Kind::kOpen ? "<|open|>" : "<|close|>", name, "<|sep|> at item ", at);
  };
  AssistantReply r;
  // A reply cut short (max_tokens) inside the think or the response channel is what was written so far.
  r.reasoning = take_text();
  if (at == items.size()) return r;
  for (auto [kind, name] : {std::pair{Item::Kind::kClose, "think"}, {Item::Kind::kOpen, "response"}})
    if (std::string why = expect(kind, name); !why.empty()) return malformed(why);
  r.content = take_text();
  if (at == items.size()) return r;
  if (std::string why = expect(Item::Kind::kClose, "response"); !why.empty()) return malformed(why);
  if (is(Item::Kind::kOpen, "tools")) {
    ++at;
    while (is(Item::Kind::kOpen, "call")) {
      const size_t k = r.tool_calls.size();
      ToolCall call;
      call.name = items[at].attrs.count("tool") ? items[at].attrs.at("tool") : "";
      if (call.name.empty()) return malformed(str("tool call ", k, " has no tool name"));
      call.id = "call_" + std::to_string(k);
      call.arguments = nlohmann::json::object();
      ++at;
      if (is(Item::Kind::kOpen, "json")) {
        ++at;
        call.arguments_text = take_text();
        call.arguments = parse_json_or_discarded(call.arguments_text);
        if (call.arguments.is_discarded() || !call.arguments.is_object())
          return malformed(str("tool call ", k, "'s json block is not a JSON object: '", call.arguments_text, "'"));
        if (std::string why = expect(Item::Kind::kClose, "json"); !why.empty()) return malformed(why);
      }
      while (is(Item::Kind::kOpen, "argument")) {
        const auto attrs = items[at++].attrs;
        const auto key = attrs.find("key"), type = attrs.find("type");
        if (key == attrs.end() || type == attrs.end())
          return malformed(str("tool call ", k, ": an argument without key or type"));
        const std::string value = take_text();
        nlohmann::json v = value;
        if (type->second != "string") {
          v = parse_json_or_discarded(value);
          if (v.is_discarded() || json_type(v) != type->second)
            return malformed(
                str("tool call ", k, ": argument '", key->second, "' is not a ", type->second, ": '", value, "'"));
        }
        call.arguments[key->second] = std::move(v);
        if (std::string why = expect(Item::Kind::kClose, "argument"); !why.empty()) return malformed(why);
      }
      if (std::string why = expect(Item::Kind::kClose, "call"); !why.empty()) return malformed(why);
      r.tool_calls.push_back(std::move(call));
    }
    if (std::string why = expect(Item::Kind::kClose, "tools"); !why.empty()) return malformed(why);
  }
  if (is(Item::Kind::kClose, "message")) ++at;
  if (at < items.size() && items[at].kind == Item::Kind::kText && blank(items[at].text)) ++at;
  if (at != items.size()) return malformed(str("unexpected content after the response at item ", at));
  return r;
}

}  // namespace myriad
