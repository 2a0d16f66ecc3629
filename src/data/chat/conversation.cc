// OpenAI-format conversations from JSON: see conversation.h.
#include "data/chat/conversation.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/json_fields.h"
#include "io/atomic_file.h"

namespace myriad {

namespace {

using json = nlohmann::json;

std::string describe(const json& v) {
  if (v.is_number() || v.is_boolean()) return v.dump();
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

[[noreturn]] void type_error(const std::string& field, const char* expected, const json& got) {
  throw FieldError(field, str("invalid type for '", field, "': expected ", expected, ", got ", describe(got)),
                   "invalid_type");
}

const json* member(const json& obj, const char* name) {
  const auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

const std::string& string_at(const json& v, const std::string& field) {
  if (!v.is_string()) type_error(field, "a string", v);
  return v.get_ref<const std::string&>();
}

// A message's content: a string, or parts of text and (in user messages) images, into msg.content / msg.images.
void read_content(const json& c, const std::string& at, ChatMessage& msg) {
  if (c.is_string()) {
    msg.content = c.get<std::string>();
    return;
  }
  if (!c.is_array()) type_error(at, "a string or an array of content parts", c);
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    const std::string pat = str(at, "[", k, "]");
    if (!part.is_object()) type_error(pat, "an object", part);
    const json* type = member(part, "type");
    const std::string t = type ? string_at(*type, pat + ".type") : "";
    if (t == "image_url" || t == "video_url") {
      if (msg.role != "user")
        throw FieldError(pat + ".type", str("'", pat, ".type' = '", t,
                                            "': images and videos go in user messages only, not ", msg.role));
      const json* media = member(part, t.c_str());
      if (!media) throw FieldError(pat + "." + t, str("'", pat, ".", t, "' is missing"));
      if (!media->is_object()) type_error(pat + "." + t, "an object {\"url\": ...}", *media);
      const json* url = member(*media, "url");
      if (!url) throw FieldError(pat + "." + t + ".url", str("'", pat, ".", t, ".url' is missing"));
      ChatImage image{msg.content.size(), string_at(*url, pat + "." + t + ".url"), pat + "." + t + ".url"};
      image.video = t == "video_url";
      msg.images.push_back(std::move(image));
      continue;
    }
    if (t != "text")
      throw FieldError(pat + ".type",
                       str("'", pat, ".type' = '", t, "': content parts are of type text, image_url or video_url"));
    const json* text = member(part, "text");
    if (!text) throw FieldError(pat + ".text", str("'", pat, ".text' is missing"));
    msg.content += string_at(*text, pat + ".text");
  }
}

ToolCall tool_call_of(const json& c, const std::string& at) {
  if (!c.is_object()) type_error(at, "an object", c);
  if (const json* type = member(c, "type"); type && string_at(*type, at + ".type") != "function")
    throw FieldError(at + ".type", str("'", at, ".type' = '", type->get<std::string>(), "': must be 'function'"));
  const json* fn = member(c, "function");
  if (!fn) throw FieldError(at + ".function", str("'", at, ".function' is missing"));
  if (!fn->is_object()) type_error(at + ".function", "an object", *fn);
  ToolCall call;
  if (const json* id = member(c, "id")) call.id = string_at(*id, at + ".id");
  const json* name = member(*fn, "name");
  if (!name) throw FieldError(at + ".function.name", str("'", at, ".function.name' is missing"));
  call.name = string_at(*name, at + ".function.name");
  if (call.name.empty()) throw FieldError(at + ".function.name", str("'", at, ".function.name' is empty"));
  const std::string af = at + ".function.arguments";
  const json* args = member(*fn, "arguments");
  if (!args) {
    call.arguments = json::object();
  } else if (args->is_string()) {
    call.arguments_text = args->get<std::string>();
    call.arguments = parse_json_or_discarded(call.arguments_text);
    if (call.arguments.is_discarded())
      throw FieldError(af, str("'", af, "' is not valid JSON: '", args->get<std::string>(), "'"));
    if (!call.arguments.is_object())
      throw FieldError(af, str("'", af, "' must hold a JSON object, got ", describe(call.arguments)));
  } else if (args->is_object()) {
    call.arguments = *args;
  } else {
    type_error(af, "a string holding a JSON object, or an object", *args);
  }
  return call;
}

}  // namespace

std::vector<ChatMessage> chat_messages_from_json(const json& v) {
  if (!v.is_array()) type_error("messages", "an array", v);
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string at = str("messages[", i, "]");
    if (!m.is_object()) type_error(at, "an object", m);
    const json* role = member(m, "role");
    if (!role) throw FieldError(at + ".role", str("'", at, ".role' is missing"));
    ChatMessage msg;
    msg.role = string_at(*role, at + ".role");
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    if (!roles.count(msg.role))
      throw FieldError(at + ".role", str("'", at, ".role' = '", msg.role,
                                         "': must be one of system, developer, user, assistant, tool"));
    if (const json* c = member(m, "content")) read_content(*c, at + ".content", msg);
    if (const json* calls = member(m, "tool_calls")) {
      if (!calls->is_array()) type_error(at + ".tool_calls", "an array", *calls);
      if (msg.role != "assistant" && !calls->empty())
        throw FieldError(at + ".tool_calls",
                         str("'", at, ".tool_calls': only assistant messages carry tool calls, not ", msg.role));
      for (size_t k = 0; k < calls->size(); ++k)
        msg.tool_calls.push_back(tool_call_of((*calls)[k], str(at, ".tool_calls[", k, "]")));
    }
    if (const json* id = member(m, "tool_call_id")) msg.tool_call_id = string_at(*id, at + ".tool_call_id");
    if (const json* r = member(m, "reasoning_content")) {  // DeepSeek's and Moonshot's field for the thinking
      if (msg.role != "assistant")
        throw FieldError(at + ".reasoning_content",
                         str("'", at, ".reasoning_content': only assistant messages carry it, not ", msg.role));
      msg.reasoning_content = string_at(*r, at + ".reasoning_content");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<ToolSpec> tool_specs_from_json(const json& v) {
  if (!v.is_array()) type_error("tools", "an array", v);
  std::vector<ToolSpec> out;
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    const std::string at = str("tools[", i, "]");
    if (!t.is_object()) type_error(at, "an object", t);
    const json* type = member(t, "type");
    if (!type || string_at(*type, at + ".type") != "function")
      throw FieldError(at + ".type", str("'", at, ".type' must be 'function'"));
    const json* fn = member(t, "function");
    if (!fn) throw FieldError(at + ".function", str("'", at, ".function' is missing"));
    if (!fn->is_object()) type_error(at + ".function", "an object", *fn);
    ToolSpec spec;
    const json* name = member(*fn, "name");
    if (!name) throw FieldError(at + ".function.name", str("'", at, ".function.name' is missing"));
    spec.name = string_at(*name, at + ".function.name");
    if (spec.name.empty() || spec.name.size() > 64 ||
        spec.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            std::string::npos)
      throw FieldError(at + ".function.name", str("'", at, ".function.name' = '", spec.name,
                                                  "': must be 1-64 letters, digits, '_' or '-' (as OpenAI's)"));
    if (!names.insert(spec.name).second)
      throw FieldError(at + ".function.name", str("'", at, ".function.name': '", spec.name, "' is defined twice"));
    if (const json* d = member(*fn, "description")) spec.description = string_at(*d, at + ".function.description");
    if (const json* st = member(*fn, "strict")) {
      if (!st->is_boolean() && !st->is_null()) type_error(at + ".function.strict", "a boolean", *st);
      spec.strict = st->is_boolean() && st->get<bool>();
    }
    if (const json* p = member(*fn, "parameters")) {
      if (!p->is_object()) type_error(at + ".function.parameters", "an object (a JSON schema)", *p);
      spec.parameters = *p;
    }
    out.push_back(std::move(spec));
  }
  return out;
}

json chat_messages_to_json(const std::vector<ChatMessage>& messages) {
  json out = json::array();
  for (const ChatMessage& m : messages) {
    json j = {{"role", m.role}, {"content", m.content}};
    if (!m.images.empty()) {  // content parts: the text between the images, and the images
      json parts = json::array();
      size_t at = 0;
      auto text = [&](size_t end) {
        if (end > at) parts.push_back({{"type", "text"}, {"text", m.content.substr(at, end - at)}});
        at = end;
      };
      for (const ChatImage& image : m.images) {
        text(std::min(image.at, m.content.size()));
        const char* type = image.video ? "video_url" : "image_url";
        parts.push_back({{"type", type}, {type, {{"url", image.url}}}});
      }
      text(m.content.size());
      j["content"] = std::move(parts);
    }
    if (!m.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& c : m.tool_calls)
        calls.push_back({{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments_string()}}}});
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<Conversation> read_conversations(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in, kIo, "cannot read the conversations file ", path);
  std::vector<Conversation> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(path, ":", n, ": ");
    json j = parse_json_or_discarded(line);
    MYRIAD_REQUIRE(!j.is_discarded(), kFormat, where, "not valid JSON");
    MYRIAD_REQUIRE(j.is_object(), kFormat, where, "expected a JSON object {\"messages\": [...]}, got ", j.type_name());
    Conversation c;
    c.line = n;
    try {
      const json* m = member(j, "messages");
      if (!m) throw FieldError("messages", "'messages' is missing");
      c.messages = chat_messages_from_json(*m);
      if (const json* t = member(j, "tools")) {
        c.tools = tool_specs_from_json(*t);
        keep_declared_order(c.tools, line);
      }
      bool assistant = false;
      for (const ChatMessage& msg : c.messages) assistant = assistant || msg.role == "assistant";
      if (!assistant) throw FieldError("messages", "no assistant message: nothing to learn from");
    } catch (const FieldError& e) {
      throw_error(ErrorKind::kFormat, where, e.what());
    }
    out.push_back(std::move(c));
  }
  MYRIAD_REQUIRE(!in.bad(), kIo, "error reading ", path);
  return out;
}

void write_conversations(const std::string& path, const std::vector<Conversation>& conversations) {
  std::ostringstream os;
  for (const Conversation& c : conversations) {
    json j = {{"messages", chat_messages_to_json(c.messages)}};
    if (!c.tools.empty()) {
      json tools = json::array();
      for (const ToolSpec& t : c.tools) {
        json fn = {{"name", t.name}};
        if (!t.description.empty()) fn["description"] = t.description;
        if (!t.parameters.is_null()) fn["parameters"] = t.parameters;
        tools.push_back({{"type", "function"}, {"function", fn}});
      }
      j["tools"] = std::move(tools);
    }
    os << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  write_file_atomic(path, os.str());
}

}  // namespace myriad
