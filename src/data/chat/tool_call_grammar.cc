// Constrained decoding of tool calls: see tool_call_grammar.h.
#include "data/chat/tool_call_grammar.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "core/error.h"
#include "core/utf8.h"

namespace myriad {

namespace {

using Frame = ToolCallMatcher::Frame;
using K = SchemaNode::Kind;

// What a frame reads. A value frame becomes the frame of the value's kind on its first character.
enum FrameKind : uint8_t { kValue, kString, kNumber, kLiterals, kObject, kAnyObject, kArray, kCall };

constexpr size_t kMaxCallDepth = 32;  // JSON containers open at once inside a call (the call's own frame included)
const std::vector<std::string> kBareLiterals = {"false", "null", "true"};  // the literals of "any value"
constexpr std::string_view kCallHead = "{\"name\":";
constexpr std::string_view kCallMiddle = ",\"arguments\":";

bool has(const Frame& f, size_t i) {
  return (f.alive[i / 64] >> (i % 64)) & 1u;
}
void set(Frame& f, size_t i) {
  f.alive[i / 64] |= uint64_t(1) << (i % 64);
}
bool any_alive(const Frame& f) {
  return (f.alive[0] | f.alive[1]) != 0;
}

Frame value_frame(const JsonSchema* schema, int node) {
  Frame f;
  f.kind = kValue;
  f.schema = schema;
  f.node = node;
  return f;
}

Frame literals_frame(const std::vector<std::string>* literals) {
  Frame f;
  f.kind = kLiterals;
  f.literals = literals;
  for (size_t i = 0; i < literals->size(); ++i) set(f, i);
  return f;
}

// The object's properties that may come next: after the last one written, up to and including the first required
// one (a required property cannot be skipped; sorted order).
void allowed_keys(const SchemaNode& n, int last, Frame& keys) {
  keys.alive[0] = keys.alive[1] = 0;
  for (size_t i = size_t(last + 1); i < n.keys.size(); ++i) {
    set(keys, i);
    if (n.required[i]) break;
  }
}

bool required_left(const SchemaNode& n, int last) {
  for (size_t i = size_t(last + 1); i < n.required.size(); ++i)
    if (n.required[i]) return true;
  return false;
}

// The frame on top finished (result: a literal's index, else -1): its parent moves on.
void finish_top(std::vector<Frame>& frames, int result) {
  frames.pop_back();
  if (frames.empty()) return;
  Frame& p = frames.back();
  switch (p.kind) {
    case kObject:
    case kAnyObject:
      if (p.phase == 1) {  // the key
        p.last = int16_t(result);
        p.phase = 2;
      } else {  // the value (phase 3)
        p.phase = 4;
      }
      break;
    case kArray:
      p.phase = 2;
      break;
    case kCall:
      if (p.phase == 2) {  // the name
        p.last = int16_t(result);
        p.phase = 3;
        p.pos = 0;
      } else {  // the arguments (phase 5)
        p.phase = 6;
      }
      break;
    default:
      break;
  }
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// JSON number states: 0 start, 1 after '-', 2 a leading zero, 3 integer digits, 4 after '.', 5 fraction digits,
// 6 after 'e', 7 after the exponent's sign, 8 exponent digits. Complete in 2, 3, 5, 8.
int number_step(int s, char c, bool integer) {
  const bool d = is_digit(c), e = !integer && (c == 'e' || c == 'E'), dot = !integer && c == '.';
  switch (s) {
    case 0:
      return c == '-' ? 1 : c == '0' ? 2 : d ? 3 : -1;
    case 1:
      return c == '0' ? 2 : d ? 3 : -1;
    case 2:
      return dot ? 4 : e ? 6 : -1;
    case 3:
      return d ? 3 : dot ? 4 : e ? 6 : -1;
    case 4:
      return d ? 5 : -1;
    case 5:
      return d ? 5 : e ? 6 : -1;
    case 6:
      return (c == '+' || c == '-') ? 7 : d ? 8 : -1;
    case 7:
    case 8:
      return d ? 8 : -1;
    default:
      return -1;
  }
}

}  // namespace

ToolCallGrammar::ToolCallGrammar(const Tokenizer& tok, const std::vector<ToolSpec>& tools,
                                 ToolCallGrammarOptions options)
    : options_(options) {
  MYRIAD_REQUIRE(tok.kind() == TokenizerKind::kSentencePiece && chat_format_of(tok) == ChatFormat::kMyriad,
                 kUnsupported, "constrained tool calls are built for myriad's chat format; this tokenizer's is ",
                 chat_format_name(chat_format_of(tok)));
  MYRIAD_REQUIRE(tools.size() <= kMaxCandidates, kValue, "constrained tool calls: ", tools.size(), " tools, at most ",
                 kMaxCandidates);
  first_text_ = kFirstByteId;
  bytes_.resize(size_t(tok.vocab_size()));
  plain_.assign(bytes_.size(), 0);
  for (int32_t id = first_text_; id < int32_t(bytes_.size()); ++id) {
    const std::string& b = bytes_[size_t(id)] = tok.token_bytes(id);
    plain_[size_t(id)] = !b.empty() && is_valid_utf8(b) && std::none_of(b.begin(), b.end(), [](char c) {
      return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
    });
  }
  open_ = tok.id_of("<|tool_call|>");
  close_ = tok.id_of("<|/tool_call|>");
  ends_ = tok.stop_ids();
  for (const ToolSpec& t : tools) {
    names_.push_back(nlohmann::json(t.name).dump());
    arguments_.push_back(options.strict_all || t.strict ? JsonSchema::arguments(t.parameters)
                                                        : JsonSchema::arguments(nlohmann::json()));
  }
  if (tools.empty()) options_.calls_allowed = false;
}

ToolCallMatcher::ToolCallMatcher(std::shared_ptr<const ToolCallGrammar> grammar) : g_(std::move(grammar)) {
  MYRIAD_CHECK(g_ != nullptr, "ToolCallMatcher without a grammar");
}

bool ToolCallMatcher::feed(std::vector<Frame>& frames, char c) const {
  for (;;) {
    if (frames.empty()) return false;  // the call is complete: nothing may follow inside it
    Frame& f = frames.back();
    switch (f.kind) {
      case kValue: {
        const K k = f.schema ? f.schema->node(f.node).kind : K::kAny;
        const JsonSchema* schema = f.schema;
        const int node = f.node;
        Frame n;
        n.schema = schema;
        n.node = node;
        bool consumed = true;
        if (k == K::kString || (k == K::kAny && c == '"')) {
          if (c != '"') return false;
          n.kind = kString;
        } else if (k == K::kNumber || k == K::kInteger || (k == K::kAny && (c == '-' || is_digit(c)))) {
          n.kind = kNumber;
          n.phase = k == K::kInteger ? 1 : 0;
          consumed = false;
        } else if (k == K::kLiterals) {
          n = literals_frame(&schema->node(node).literals);
          consumed = false;
        } else if (k == K::kAny && (c == 't' || c == 'f' || c == 'n')) {
          n = literals_frame(&kBareLiterals);
          consumed = false;
        } else if (k == K::kObject) {
          if (c != '{') return false;
          n.kind = kObject;
        } else if (k == K::kAnyObject || (k == K::kAny && c == '{')) {
          if (c != '{') return false;
          n.kind = kAnyObject;
          n.schema = nullptr;
        } else if (k == K::kArray || (k == K::kAny && c == '[')) {
          if (c != '[') return false;
          n.kind = kArray;  // node: the items' (null schema: any)
          if (k == K::kArray)
            n.node = schema->node(node).children[0];
          else
            n.schema = nullptr;
        } else {
          return false;
        }
        // Containers of "any value" could nest without end; the stack (copied per candidate token) stays short.
        if ((n.kind == kObject || n.kind == kAnyObject || n.kind == kArray) && frames.size() >= kMaxCallDepth)
          return false;
        f = n;
        if (consumed) return true;
        continue;
      }
      case kString: {
        if (f.pos > 0) {  // \uXXXX digits
          if (!is_hex(c)) return false;
          --f.pos;
          return true;
        }
        if (f.phase == 1) {  // after a backslash
          f.phase = 0;
          if (c == 'u') {
            f.pos = 4;
            return true;
          }
          return std::string_view("\"\\/bfnrt").find(c) != std::string_view::npos;
        }
        const auto b = static_cast<unsigned char>(c);
        if (f.alive[0] > 0) {  // inside a UTF-8 character: the next byte's range (Unicode table 3-7)
          if (b < ((f.alive[1] >> 8) & 0xFF) || b > (f.alive[1] & 0xFF)) return false;
          --f.alive[0];
          f.alive[1] = 0x80BF;
          return true;
        }
        if (c == '"') {
          finish_top(frames, -1);
          return true;
        }
        if (c == '\\') {
          f.phase = 1;
          return true;
        }
        if (b < 0x20) return false;
        if (b < 0x80) return true;
        // A lead byte: how many continuation bytes follow, and the range of the first (no overlongs, surrogates
        // or code points past U+10FFFF).
        if (b >= 0xC2 && b <= 0xDF)
          f.alive[0] = 1, f.alive[1] = 0x80BF;
        else if (b == 0xE0)
          f.alive[0] = 2, f.alive[1] = 0xA0BF;
        else if (b == 0xED)
          f.alive[0] = 2, f.alive[1] = 0x809F;
        else if (b >= 0xE1 && b <= 0xEF)
          f.alive[0] = 2, f.alive[1] = 0x80BF;
        else if (b == 0xF0)
          f.alive[0] = 3, f.alive[1] = 0x90BF;
        else if (b >= 0xF1 && b <= 0xF3)
          f.alive[0] = 3, f.alive[1] = 0x80BF;
        else if (b == 0xF4)
          f.alive[0] = 3, f.alive[1] = 0x808F;
        else
          return false;
        return true;
      }
      case kNumber: {
        const int next = number_step(f.pos, c, f.phase == 1);
        if (next >= 0) {
          // Digits per part are bounded, so that every number the grammar lets through reads as an int64 or a
          // finite double (JSON itself has no bound; nlohmann refuses 1e400).
          f.alive[0] = next == f.pos ? f.alive[0] + 1 : 1;
          const uint64_t most = next == 3 ? 18 : next == 5 ? 17 : next == 8 ? 2 : 1;
          if (f.alive[0] > most) return false;
          f.pos = next;
          return true;
        }
        if (f.pos == 2 || f.pos == 3 || f.pos == 5 || f.pos == 8) {  // complete: c belongs to the parent
          finish_top(frames, -1);
          continue;
        }
        return false;
      }
      case kLiterals: {
        Frame next = f;
        next.alive[0] = next.alive[1] = 0;
        int exact = -1;
        const auto pos = size_t(f.pos);
        for (size_t i = 0; i < f.literals->size(); ++i) {
          if (!has(f, i)) continue;
          const std::string& l = (*f.literals)[i];
          if (l.size() > pos && l[pos] == c)
            set(next, i);
          else if (l.size() == pos)
            exact = int(i);
        }
        if (any_alive(next)) {
          ++next.pos;
          f = next;
          return true;
        }
        if (exact < 0) return false;
        finish_top(frames, exact);
        continue;
      }
      case kObject: {
        const SchemaNode& n = f.schema->node(f.node);
        if (f.phase == 0 || f.phase == 5) {
          if (c == '}' && f.phase == 0 && !required_left(n, f.last)) {
            finish_top(frames, -1);
            return true;
          }
          if (c != '"') return false;
          Frame keys = literals_frame(&n.key_literals);
          allowed_keys(n, f.last, keys);
          if (!any_alive(keys)) return false;
          f.phase = 1;
          frames.push_back(keys);
          continue;
        }
        if (f.phase == 2) {
          if (c != ':') return false;
          f.phase = 3;
          const Frame v = value_frame(f.schema, n.children[size_t(f.last)]);
          frames.push_back(v);
          return true;
        }
        if (f.phase == 4) {
          if (c == ',' && size_t(f.last + 1) < n.keys.size()) {
            f.phase = 5;
            return true;
          }
          if (c == '}' && !required_left(n, f.last)) {
            finish_top(frames, -1);
            return true;
          }
        }
        return false;
      }
      case kAnyObject: {
        if (f.phase == 0 && c == '}') {
          finish_top(frames, -1);
          return true;
        }
        if (f.phase == 0 || f.phase == 5) {
          if (c != '"') return false;
          f.phase = 1;
          Frame key;
          key.kind = kString;
          frames.push_back(key);
          return true;
        }
        if (f.phase == 2) {
          if (c != ':') return false;
          f.phase = 3;
          frames.push_back(value_frame(nullptr, 0));
          return true;
        }
        if (f.phase == 4) {
          if (c == ',') {
            f.phase = 5;
            return true;
          }
          if (c == '}') {
            finish_top(frames, -1);
            return true;
          }
        }
        return false;
      }
      case kArray: {
        if (f.phase == 0 && c == ']') {
          finish_top(frames, -1);
          return true;
        }
        if (f.phase == 0 || f.phase == 3) {
          f.phase = 1;
          const Frame v = value_frame(f.schema, f.node);
          frames.push_back(v);
          continue;
        }
        if (f.phase == 2) {
          if (c == ',') {
            f.phase = 3;
            return true;
          }
          if (c == ']') {
            finish_top(frames, -1);
            return true;
          }
        }
        return false;
      }
      case kCall: {
        if (f.phase == 0 || f.phase == 3) {  // the fixed text before the name, between name and arguments
          const std::string_view fixed = f.phase == 0 ? kCallHead : kCallMiddle;
          if (c != fixed[size_t(f.pos)]) return false;
          if (size_t(++f.pos) == fixed.size()) ++f.phase;
          return true;
        }
        if (f.phase == 1) {
          f.phase = 2;
          frames.push_back(literals_frame(&g_->names_));
          continue;
        }
        if (f.phase == 4) {
          f.phase = 5;
          frames.push_back(value_frame(&g_->arguments_[size_t(f.last)], JsonSchema::kRoot));
          continue;
        }
        if (f.phase == 6 && c == '}') {
          finish_top(frames, -1);
          return true;
        }
        return false;
      }
      default:
        return false;
    }
  }
}

bool ToolCallMatcher::feed_bytes(std::vector<Frame>& frames, const std::string& bytes) const {
  if (bytes.empty()) return false;
  for (char c : bytes)
    if (!feed(frames, c)) return false;
  return true;
}

bool ToolCallMatcher::allows(int32_t token) const {
  if (token < 0 || token >= g_->vocab_size()) return false;
  const ToolCallGrammar& g = *g_;
  const bool end = std::find(g.ends_.begin(), g.ends_.end(), token) != g.ends_.end();
  const bool special = g.is_special(token);
  switch (region_) {
    case Region::kContent:
      return special ? end || (token == g.open_ && g.options_.calls_allowed) : true;
    case Region::kCall:
      if (special) return false;
      scratch_ = frames_;
      return feed_bytes(scratch_, g.bytes_[size_t(token)]);
    case Region::kCallDone:
      return token == g.close_;
    case Region::kBetween:
      return end || (token == g.open_ && g.options_.parallel_calls);
    case Region::kEnded:
      return end;
  }
  return false;
}

void ToolCallMatcher::mask(std::span<float> logits) const {
  const auto V = int64_t(logits.size());
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const int64_t vocab = std::min(V, g_->vocab_size());
  for (int64_t t = vocab; t < V; ++t) logits[size_t(t)] = kMasked;
  const int64_t specials = std::min<int64_t>(vocab, g_->first_text_);
  for (int64_t t = 0; t < specials; ++t)
    if (!allows(int32_t(t))) logits[size_t(t)] = kMasked;
  if (region_ == Region::kContent) return;  // every text token
  if (region_ != Region::kCall) {
    for (int64_t t = specials; t < vocab; ++t) logits[size_t(t)] = kMasked;
    return;
  }
  // Inside a call: the first byte decides for most tokens (after a key only ':' fits), so it is tried once per
  // byte value and only the tokens whose first byte fits are fed whole.
  bool first_ok[256];
  for (int b = 0; b < 256; ++b) {
    scratch_ = frames_;
    first_ok[b] = feed(scratch_, char(b));
  }
  const Frame& top = frames_.back();
  const bool plain_string = top.kind == kString && top.phase == 0 && top.pos == 0 && top.alive[0] == 0;
  bool any = false;
  for (int64_t t = specials; t < vocab; ++t) {
    float& x = logits[size_t(t)];
    if (x == kMasked) continue;
    if (plain_string && g_->plain_[size_t(t)]) {
      any = true;
      continue;
    }
    const std::string& bytes = g_->bytes_[size_t(t)];
    if (bytes.empty() || !first_ok[static_cast<unsigned char>(bytes[0])]) {
      x = kMasked;
      continue;
    }
    if (bytes.size() > 1) {
      scratch_ = frames_;
      if (!feed_bytes(scratch_, bytes)) {
        x = kMasked;
        continue;
      }
    }
    any = true;
  }
  MYRIAD_REQUIRE(any, kValue, "constrained tool calls: no token of the vocabulary can continue the call here");
}

void ToolCallMatcher::accept(int32_t token) {
  MYRIAD_REQUIRE(allows(token), kValue, "constrained tool calls: token ", token, " (",
                 token >= 0 && token < g_->vocab_size() ? g_->bytes_[size_t(token)] : std::string("?"),
                 ") does not fit the tool-call grammar here");
  const ToolCallGrammar& g = *g_;
  const bool end = std::find(g.ends_.begin(), g.ends_.end(), token) != g.ends_.end();
  switch (region_) {
    case Region::kContent:
    case Region::kBetween:
      if (end) {
        region_ = Region::kEnded;
      } else if (token == g.open_) {
        region_ = Region::kCall;
        frames_.assign(1, Frame{});
        frames_[0].kind = kCall;
      }
      break;
    case Region::kCall:
      frames_.swap(scratch_);  // allows() just fed the token's bytes into scratch_: the next state, fed once
      if (frames_.empty()) region_ = Region::kCallDone;
      break;
    case Region::kCallDone:
      region_ = Region::kBetween;
      ++calls_;
      break;
    case Region::kEnded:
      break;
  }
}

}  // namespace myriad
