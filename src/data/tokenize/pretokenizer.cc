// Pre-tokenization on PCRE2. See pretokenizer.h.
#include "data/tokenize/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/error.h"

namespace myriad {

namespace {

// Length of the escape sequence at p[i] == '\\' (\p{..}, \P{..}, \x{..}, or a backslash and one character).
size_t escape_length(std::string_view p, size_t i, const std::string& source) {
  MYRIAD_REQUIRE(i + 1 < p.size(), kFormat, source, ": pattern ends with a lone backslash");
  const char c = p[i + 1];
  if ((c == 'p' || c == 'P' || c == 'x') && i + 2 < p.size() && p[i + 2] == '{') {
    const size_t close = p.find('}', i + 3);
    MYRIAD_REQUIRE(close != std::string_view::npos, kFormat, source, ": unterminated \\", c, "{ at offset ", i,
                   " of the pattern");
    return close + 1 - i;
  }
  return 2;
}

// Offset of the ']' that closes the bracket expression opened at p[open] == '['.
size_t class_end(std::string_view p, size_t open, const std::string& source) {
  size_t j = open + 1;
  if (j < p.size() && p[j] == '^') ++j;
  if (j < p.size() && p[j] == ']') ++j;  // a ']' first is a literal
  int depth = 1;
  while (j < p.size()) {
    if (p[j] == '\\') {
      j += escape_length(p, j, source);
    } else if (p.substr(j, 2) == "[:") {  // POSIX class [:alpha:]
      const size_t close = p.find(":]", j + 2);
      MYRIAD_REQUIRE(close != std::string_view::npos, kFormat, source, ": unterminated [: at offset ", j);
      j = close + 2;
    } else if (p[j] == '[') {
      ++depth;
      ++j;
    } else if (p[j] == ']') {
      if (--depth == 0) return j;
      ++j;
    } else {
      ++j;
    }
  }
  throw_error(ErrorKind::kFormat, source, ": unterminated character class at offset ", open, " of the pattern");
}

std::string translate_class(std::string_view cls, const std::string& source);

// `\p{Han}` in Rust's regex and in Oniguruma is the Script property; PCRE2 (10.40 on) reads a bare script name as
// Script_Extensions, which also takes characters shared with other scripts (U+3001 '、' is in Han's extensions).
// A script name is therefore written `\p{sc:Han}`; general categories and anything PCRE2 does not know as a script
// stay as written.
std::string translate_property(std::string_view esc) {
  if (esc.size() < 5 || esc[2] != '{') return std::string(esc);
  const std::string name(esc.substr(3, esc.size() - 4));
  if (name.find(':') != std::string::npos || name.find('=') != std::string::npos) return std::string(esc);
  const std::string scripted = std::string(esc.substr(0, 3)) + "sc:" + name + "}";
  int err = 0;
  PCRE2_SIZE at = 0;
  pcre2_code* probe = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(scripted.data()), scripted.size(),
                                    PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (probe == nullptr) return std::string(esc);  // a general category (L, Lu, N, ...) or a binary property
  pcre2_code_free(probe);
  return scripted;
}

// An intersection operand as a class: itself when it is one bracket expression, else wrapped in brackets.
std::string operand_class(std::string_view operand, const std::string& source) {
  if (!operand.empty() && operand.front() == '[' && class_end(operand, 0, source) == operand.size() - 1)
    return translate_class(operand, source);
  return translate_class("[" + std::string(operand) + "]", source);
}

// One bracket expression "[...]" in PCRE2 syntax.
std::string translate_class(std::string_view cls, const std::string& source) {
  const std::string_view body = cls.substr(1, cls.size() - 2);
  // A top-level "&&" (outside escapes and nested classes) is an intersection.
  int depth = 0;
  for (size_t j = 0; j < body.size();) {
    if (body[j] == '\\') {
      j += escape_length(body, j, source);
    } else if (body[j] == '[') {
      ++depth;
      ++j;
    } else if (body[j] == ']') {
      --depth;
      ++j;
    } else if (depth == 0 && body.substr(j, 2) == "&&") {
      MYRIAD_REQUIRE(body.front() != '^', kFormat, source, ": a negated class intersection ", cls,
                     " cannot be expressed in PCRE2");
      return "(?:(?=" + operand_class(body.substr(j + 2), source) + ")" + operand_class(body.substr(0, j), source) +
             ")";
    } else {
      ++j;
    }
  }
  std::string out = "[";
  for (size_t j = 0; j < body.size();) {
    if (body[j] == '\\') {
      const size_t len = escape_length(body, j, source);
      const std::string_view esc = body.substr(j, len);
      MYRIAD_REQUIRE(esc != "\\S", kFormat, source, ": \\S inside a character class (", cls,
                     ") cannot be translated to PCRE2");
      out += esc == "\\s"                       ? std::string("\\s\\x{85}")
             : (esc[1] == 'p' || esc[1] == 'P') ? translate_property(esc)
                                                : std::string(esc);
      j += len;
    } else if (body.substr(j, 2) == "[:") {
      const size_t close = body.find(":]", j + 2);
      out += body.substr(j, close + 2 - j);
      j = close + 2;
    } else {
      MYRIAD_REQUIRE(body[j] != '[', kFormat, source, ": a nested character class in ", cls,
                     " (other than an intersection's operand) is not supported");
      out += body[j++];
    }
  }
  return out + "]";
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

// One match-data block per thread: an ovector of one pair is all a match needs (group 0).
pcre2_match_data* thread_match_data() {
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create(1, nullptr));
  return md.get();
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buf), size_t(n));
}

}  // namespace

std::string translate_pattern(std::string_view p, const std::string& source) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size();) {
    if (p[i] == '\\') {
      const size_t len = escape_length(p, i, source);
      const std::string_view esc = p.substr(i, len);
      if (esc == "\\s")
        out += "[\\s\\x{85}]";
      else if (esc == "\\S")
        out += "[^\\s\\x{85}]";
      else if (esc[1] == 'p' || esc[1] == 'P')
        out += translate_property(esc);
      else
        out += esc;
      i += len;
    } else if (p[i] == '[') {
      const size_t end = class_end(p, i, source);
      out += translate_class(p.substr(i, end + 1 - i), source);
      i = end + 1;
    } else {
      out += p[i++];
    }
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  ~Code() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, const std::string& source)
    : code_(std::make_unique<Code>()), source_pattern_(pattern), source_(source) {
  const std::string pcre = translate_pattern(pattern, source);
  int err = 0;
  PCRE2_SIZE at = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
  MYRIAD_REQUIRE(code_->code != nullptr, kFormat, source, ": pattern '", pattern, "' (as PCRE2: '", pcre,
                 "') does not compile: ", pcre2_message(err), " at offset ", at);
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);  // without JIT (not built in) the interpreter runs it
  code_->context = pcre2_match_context_create(nullptr);
  // A pattern from a file that backtracks without bound gets an error instead of a hang; the tokenizers' own
  // patterns need a few steps per character.
  pcre2_set_match_limit(code_->context, 5'000'000);
  pcre2_set_depth_limit(code_->context, 1'000'000);
}

Regex::~Regex() = default;

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  uint32_t options = 0;
  while (start <= n) {
    const int rc = pcre2_match(code_->code, subject, n, start, options, md, code_->context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0 || start >= n) break;
      // No non-empty match right after an empty one: move on by one character.
      ++start;
      while (start < n && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
      options = 0;
      continue;
    }
    MYRIAD_REQUIRE(rc >= 0, kValue, source_, ": pattern '", source_pattern_, "' failed on a piece of ", n,
                   " bytes: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    on_match(s, e);
    start = e;
    options = s == e ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
  }
}

void Pretokenizer::for_each_piece(std::string_view text, const std::function<void(std::string_view)>& on_piece) const {
  run(0, text, on_piece);
}

std::vector<std::string> Pretokenizer::signature() const {
  std::vector<std::string> out;
  for (const PretokenizeStep& st : steps_) {
    if (st.kind == PretokenizeStep::Kind::kByteLevel) {
      out.push_back(std::string("bytelevel") + (st.add_prefix_space ? " prefix" : "") + (st.regex ? " regex" : ""));
      continue;
    }
    std::string head = "split";
    if (st.behavior != SplitBehavior::kIsolated || st.invert)
      head += "/" + std::to_string(int(st.behavior)) + (st.invert ? "/invert" : "");
    out.push_back(head + " " + st.regex->pattern());
  }
  return out;
}

std::vector<std::string> Pretokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  for_each_piece(text, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

void Pretokenizer::run(size_t step, std::string_view text,
                       const std::function<void(std::string_view)>& on_piece) const {
  if (text.empty()) return;
  if (step == steps_.size()) {
    on_piece(text);
    return;
  }
  const PretokenizeStep& st = steps_[step];
  std::string spaced;  // ByteLevel's prefix space: the piece now starts with one
  if (st.kind == PretokenizeStep::Kind::kByteLevel) {
    if (st.add_prefix_space && text.front() != ' ') {
      spaced = " " + std::string(text);
      text = spaced;
    }
    if (!st.regex) {
      run(step + 1, text, on_piece);
      return;
    }
  }
  // The text as segments (begin, end, is_match) covering it, as Hugging Face's Pattern::find_matches gives them.
  struct Segment {
    size_t begin, end;
    bool match;
  };
  std::vector<Segment> segs;
  size_t prev = 0;
  st.regex->for_each_match(text, [&](size_t s, size_t e) {
    if (s != prev) segs.push_back({prev, s, false});
    segs.push_back({s, e, true});
    prev = e;
  });
  if (prev != text.size()) segs.push_back({prev, text.size(), false});
  const SplitBehavior behavior = st.kind == PretokenizeStep::Kind::kByteLevel ? SplitBehavior::kIsolated : st.behavior;
  if (st.kind == PretokenizeStep::Kind::kSplit && st.invert)
    for (Segment& g : segs) g.match = !g.match;
  std::vector<Segment> out;
  out.reserve(segs.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      out = std::move(segs);
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& g : segs)
        if (!g.match) out.push_back(g);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& g : segs) {
        if (g.match && !previous_match && !out.empty())
          out.back().end = g.end;
        else
          out.push_back(g);
        previous_match = g.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = segs.size(); k-- > 0;) {
        const Segment& g = segs[k];
        if (g.match && !previous_match && !out.empty())
          out.back().begin = g.begin;
        else
          out.push_back(g);
        previous_match = g.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Segment& g : segs) {
        if (g.match == previous_match && !out.empty())
          out.back().end = g.end;
        else
          out.push_back(g);
        previous_match = g.match;
      }
      break;
  }
  for (const Segment& g : out)
    if (g.end > g.begin) run(step + 1, text.substr(g.begin, g.end - g.begin), on_piece);
}

}  // namespace myriad
