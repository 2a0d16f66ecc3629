// TextStream and take_complete_utf8: multi-byte characters split across tokens, U+FFFD repair per maximal subpart
// (Unicode §3.9, table 3-8's example), stop strings (cut, hold-back, failed partial matches, spanning tokens, at the
// start, several), and a property test over random token sequences against a naive reference: repair the whole
// byte string, then cut before the first stop string to complete.
//
// The reference UTF-8 repair is built from the definition, not from table 3-7: every scalar value is encoded
// arithmetically, the set of proper prefixes of those encodings is collected, and a position holds a character when
// decoding and re-encoding its bytes gives them back.
#include "serve/text_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// A small tokenizer trained once (a fraction of a second): bytes are ids kFirstByteId + byte; learned pieces too.
const Tokenizer& tokenizer() {
  static const Tokenizer tok = [] {
    std::vector<std::string> texts;
    const char* words[] = {"the", "cat", "sat", "on", "mat", "café", "€5", "stop", "END", "hello", "world", "日本"};
    std::mt19937_64 rng(3);
    for (int i = 0; i < 100; ++i) {
      std::string line;
      for (int j = 0; j < 8; ++j) line += std::string(j ? " " : "") + words[rng() % 12];
      texts.push_back(line);
    }
    return Tokenizer::train_from_texts(texts, 320);
  }();
  return tok;
}

int32_t byte_token(unsigned char b) {
  return kFirstByteId + int32_t(b);
}

std::vector<int32_t> byte_tokens(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(byte_token(c));
  return ids;
}

// ---- naive UTF-8 reference ----

std::string encode_scalar(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

bool is_scalar(uint32_t cp) {
  return cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Proper prefixes of the encodings of every scalar value.
const std::unordered_set<std::string>& proper_prefixes() {
  static const std::unordered_set<std::string> set = [] {
    std::unordered_set<std::string> s;
    for (uint32_t cp = 0x80; cp <= 0x10FFFF; ++cp) {
      if (!is_scalar(cp)) continue;
      const std::string e = encode_scalar(cp);
      for (size_t len = 1; len < e.size(); ++len) s.insert(e.substr(0, len));
    }
    return s;
  }();
  return set;
}

// True when `s` is exactly the encoding of one scalar value: decode by the bit patterns, re-encode, compare.
bool is_character(const std::string& s) {
  const auto b0 = uint8_t(s[0]);
  uint32_t cp;
  size_t len;
  if (b0 < 0x80) {
    cp = b0, len = 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    cp = b0 & 0x1F, len = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    cp = b0 & 0x0F, len = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    cp = b0 & 0x07, len = 4;
  } else {
    return false;
  }
  if (s.size() != len) return false;
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (uint8_t(s[i]) & 0x3F);
  return is_scalar(cp) && encode_scalar(cp) == s;
}

std::string naive_repair(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t taken = 0;
    for (size_t len = 1; len <= 4 && i + len <= s.size() && !taken; ++len)
      if (is_character(s.substr(i, len))) taken = len;
    if (taken) {
      out += s.substr(i, taken);
      i += taken;
      continue;
    }
    // The maximal subpart: the longest proper prefix of some encoding, at least one byte.
    size_t sub = 1;
    for (size_t len = 1; len <= 3 && i + len <= s.size(); ++len)
      if (proper_prefixes().count(s.substr(i, len))) sub = len;
    out += kFffd;
    i += sub;
  }
  return out;
}

bool naive_valid(const std::string& s) {
  return naive_repair(s) == s;
}

// Start of the unfinished character at the end of `s` (s.size() if none): the last byte that is not a continuation
// byte, when from there on the bytes are a proper prefix of an encoding.
size_t unfinished_tail(const std::string& s) {
  size_t j = s.size();
  while (j > 0 && (uint8_t(s[j - 1]) & 0xC0) == 0x80) --j;
  if (j == 0) return s.size();
  --j;
  return proper_prefixes().count(s.substr(j)) ? j : s.size();
}

// The cut of the first stop string to complete: the smallest end, then the longest. npos if none.
size_t naive_stop_cut(const std::string& text, const std::vector<std::string>& stop) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = std::string::npos;
    for (const std::string& s : stop)
      if (!s.empty() && s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
        best = std::min(best, end - s.size());
    if (best != std::string::npos) return best;
  }
  return std::string::npos;
}

// The longest suffix of `text` that is a proper prefix of a stop string.
size_t naive_holdback(const std::string& text, const std::vector<std::string>& stop) {
  size_t best = 0;
  for (const std::string& s : stop)
    for (size_t len = 1; len < s.size() && len <= text.size(); ++len)
      if (text.substr(text.size() - len) == s.substr(0, len)) best = std::max(best, len);
  return best;
}

// Pushes every token, recording each piece; returns the concatenation of the pieces and finish().
struct Streamed {
  std::vector<std::string> pieces;
  std::string finished;
  std::string all() const {
    std::string s;
    for (const std::string& p : pieces) s += p;
    return s + finished;
  }
};

Streamed stream(const std::vector<int32_t>& ids, const std::vector<std::string>& stop) {
  TextStream ts(tokenizer(), stop);
  Streamed r;
  for (int32_t id : ids) r.pieces.push_back(ts.push(id));
  r.finished = ts.finish();
  return r;
}

// ---- take_complete_utf8 ----

struct Utf8Case {
  std::string in;
  bool final;
  std::string out, left;
};

TEST(Utf8, RepairsEachMaximalSubpart) {
  const std::string F = kFffd;
  const std::vector<Utf8Case> cases = {
      {"abc", false, "abc", ""},
      {"caf\xC3\xA9", false, "caf\xC3\xA9", ""},
      {"\xC3", false, "", "\xC3"},                     // é, first byte: wait
      {"\xC3", true, F, ""},                           // ... unless final
      {"\xC0\x80", false, F + F, ""},                  // overlong NUL: C0 is never valid
      {"\x80", false, F, ""},                          // lone continuation
      {"\xE2\x82", false, "", "\xE2\x82"},             // € truncated: wait
      {"\xE2\x82", true, F, ""},                       // one U+FFFD for the truncated whole
      {"\xE2\x82x", false, F + "x", ""},               // cannot continue: one U+FFFD
      {"\xED\xA0\x80", false, F + F + F, ""},          // surrogate D800: ED allows 80..9F only
      {"\xE0\x80\x80", false, F + F + F, ""},          // overlong 3-byte
      {"\xE0\xA0", false, "", "\xE0\xA0"},             // U+0800 truncated: wait
      {"\xF0\x80\x80\x80", false, F + F + F + F, ""},  // overlong 4-byte
      {"\xF4\x90\x80\x80", false, F + F + F + F, ""},  // above U+10FFFF
      {"\xF0\x9F\x98", false, "", "\xF0\x9F\x98"},     // emoji truncated: wait
      {"\xF0\x9F\x98"
       "A",
       false, F + "A", ""},  // one U+FFFD for the 3-byte subpart
      {"\xF5\xFF\xFE", false, F + F + F, ""},
      {"a\xF0\x9F\x98\x80", false, "a\xF0\x9F\x98\x80", ""},  // U+1F600
      {"\xF4\x8F\xBF\xBF", false, "\xF4\x8F\xBF\xBF", ""},    // U+10FFFF
      {"\xED\x9F\xBF", false, "\xED\x9F\xBF", ""},            // U+D7FF
      {"x\xE2", false, "x", "\xE2"},
      // Unicode 15 §3.9, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
      {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", false, "a" + F + F + F + "b" + F + "c" + F + F + "d",
       ""},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    std::string bytes = cases[c].in;
    EXPECT_EQ(take_complete_utf8(bytes, cases[c].final), cases[c].out) << "case " << c;
    EXPECT_EQ(bytes, cases[c].left) << "case " << c;
    // The reference agrees on every final case (and on the emitted part of the others).
    if (cases[c].final || cases[c].left.empty()) {
      EXPECT_EQ(naive_repair(cases[c].in), cases[c].out) << "case " << c;
    }
  }
}

TEST(Utf8, SplitAnywhereEqualsWholeRepair) {
  std::mt19937_64 rng(17);
  const std::vector<std::string> atoms = {"a",    " ",    "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                          "\x80", "\xBF", "\xC2",     "\xE0",         "\xED",
                                          "\xF0", "\xF4", "\xC0",     "\xFF",         "\xA0",
                                          "\x90"};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s;
    const int n = 1 + int(rng() % 12);
    for (int i = 0; i < n; ++i) {
      if (rng() % 4 == 0) {
        s += char(rng() % 256);
      } else {
        s += atoms[rng() % atoms.size()];
      }
    }
    const std::string want = naive_repair(s);
    std::string whole = s;
    ASSERT_EQ(take_complete_utf8(whole, true), want) << "trial " << trial;
    ASSERT_TRUE(whole.empty());
    // Fed in random chunks.
    std::string pending, got;
    size_t i = 0;
    while (i < s.size()) {
      const size_t len = 1 + rng() % 3;
      pending += s.substr(i, len);
      i += len;
      const std::string piece = take_complete_utf8(pending, false);
      ASSERT_TRUE(naive_valid(piece)) << "trial " << trial;
      ASSERT_LE(pending.size(), 3u);
      got += piece;
    }
    got += take_complete_utf8(pending, true);
    ASSERT_EQ(got, want) << "trial " << trial;
  }
}

// ---- TextStream ----

TEST(TextStream, MultiByteCharactersWaitUntilComplete) {
  for (const std::string ch : {"\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80"}) {  // é € 😀
    TextStream ts(tokenizer(), {});
    EXPECT_EQ(ts.push(byte_token('x')), "x");
    const std::vector<int32_t> ids = byte_tokens(ch);
    for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(ts.push(ids[i]), "") << "byte " << i << " of " << ch;
    EXPECT_EQ(ts.push(ids.back()), ch);
    EXPECT_EQ(ts.finish(), "");
  }
  // The tokenizer's own encoding of mixed text (learned pieces, and byte tokens for the rarer characters).
  const std::string text =
      "caf\xC3\xA9 \xE2\x82\xAC"
      "5 \xE6\x97\xA5\xE6\x9C\xAC the cat";
  EXPECT_EQ(stream(tokenizer().encode(text), {}).all(), text);
}

TEST(TextStream, InvalidSequencesBecomeReplacementCharacters) {
  const std::string F = kFffd;
  Streamed r = stream(byte_tokens("\xC0\x80"), {});
  EXPECT_EQ(r.pieces[0], F);  // C0 can start nothing: replaced at once
  EXPECT_EQ(r.all(), F + F);
  r = stream(byte_tokens("a\x80z"), {});
  EXPECT_EQ(r.all(), "a" + F + "z");
  r = stream(byte_tokens("ok\xE2\x82"), {});
  EXPECT_EQ(r.pieces[2], "");  // E2 alone may still become a character
  EXPECT_EQ(r.pieces[3], "");
  EXPECT_EQ(r.finished, F);  // truncated at the end: one U+FFFD
  r = stream(byte_tokens("\xED\xA0\x80"), {});
  EXPECT_EQ(r.all(), F + F + F);
  for (const std::string& p : r.pieces) EXPECT_TRUE(naive_valid(p));
}

TEST(TextStream, StopStringIsCutAndEverythingBeforeItEmitted) {
  TextStream ts(tokenizer(), {"END"});
  std::string out;
  for (int32_t id : byte_tokens("Hello ")) out += ts.push(id);
  EXPECT_EQ(out, "Hello ");  // nothing held: no suffix begins "END"
  EXPECT_EQ(ts.push(byte_token('E')), "");
  EXPECT_EQ(ts.push(byte_token('N')), "");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.push(byte_token('D')), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.push(byte_token('!')), "");
  EXPECT_EQ(ts.finish(), "");
}

TEST(TextStream, FailedPartialMatchIsEmittedInOrder) {
  TextStream ts(tokenizer(), {"END"});
  EXPECT_EQ(ts.push(byte_token('E')), "");
  EXPECT_EQ(ts.push(byte_token('N')), "");
  EXPECT_EQ(ts.push(byte_token('d')), "ENd");
  EXPECT_EQ(ts.push(byte_token('E')), "");
  EXPECT_EQ(ts.push(byte_token('E')), "E");  // "EE": the first E can no longer begin END, the second still can
  EXPECT_EQ(ts.push(byte_token('N')), "");
  EXPECT_EQ(ts.finish(), "EN");  // a partial match at the end is text
  EXPECT_FALSE(ts.stopped());
  // "SSTOP": the first S is emitted, then the stop.
  const Streamed r = stream(byte_tokens("SSTOP tail"), {"STOP"});
  EXPECT_EQ(r.all(), "S");
}

TEST(TextStream, StopStringSpanningSeveralTokens) {
  const std::string text = "the cat sat on the mat";
  const std::vector<int32_t> ids = tokenizer().encode(text);
  ASSERT_GT(ids.size(), 3u);
  TextStream ts(tokenizer(), {"cat sat on"});
  std::string out;
  size_t pushes = 0;
  while (!ts.stopped() && pushes < ids.size()) out += ts.push(ids[pushes++]);
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(out, "the ");
  // The stop string lies across several tokens, and the stream stopped at the token that completed it.
  for (int32_t id : ids) EXPECT_EQ(tokenizer().token_bytes(id).find("cat sat on"), std::string::npos);
  EXPECT_NE(tokenizer().decode(std::span(ids).first(pushes)).find("cat sat on"), std::string::npos);
  EXPECT_EQ(tokenizer().decode(std::span(ids).first(pushes - 1)).find("cat sat on"), std::string::npos);
  // A multi-byte stop string split across byte tokens.
  const Streamed r = stream(byte_tokens("prix: 5\xE2\x82\xAC net"), {"\xE2\x82\xAC"});
  EXPECT_EQ(r.all(), "prix: 5");
}

TEST(TextStream, StopAtTheVeryStart) {
  TextStream ts(tokenizer(), {"<|user|>"});
  EXPECT_EQ(ts.push(tokenizer().id_of("<|user|>")), "");  // a special token's text matches a stop string
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.finish(), "");
  const Streamed r = stream(byte_tokens("ENDING"), {"END"});
  EXPECT_EQ(r.all(), "");
}

TEST(TextStream, SeveralStopStringsTheFirstToCompleteWins) {
  EXPECT_EQ(stream(byte_tokens("hello world"), {"world", "lo w"}).all(), "hel");
  EXPECT_EQ(stream(byte_tokens("hello world"), {"xyz", "o"}).all(), "hell");
  // "bc" completes before "abcd" could, whatever the tokenisation: byte by byte, or within one token (the special
  // token's text "<|user|>" arrives at once and holds both "<|user|>" and "|u", which ends first).
  EXPECT_EQ(stream(byte_tokens("xabcd"), {"abcd", "bc"}).all(), "xa");
  EXPECT_EQ(stream({tokenizer().id_of("<|user|>")}, {"<|user|>", "|u"}).all(), "<");
  EXPECT_EQ(stream(byte_tokens("<|user|>"), {"<|user|>", "|u"}).all(), "<");
  // Both end at the same byte: the longer one is cut.
  EXPECT_EQ(stream(byte_tokens("xabc"), {"bc", "abc"}).all(), "x");
}

TEST(TextStream, EmptyStopStringsIgnoredInvalidOnesRejected) {
  EXPECT_EQ(stream(byte_tokens("abc"), {"", "zz"}).all(), "abc");
  try {
    TextStream ts(tokenizer(), {"ok", "\xA9"});  // would match inside "é"
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kValue);
    EXPECT_NE(std::string(e.what()).find("stop string 1"), std::string::npos) << e.what();
  }
}

TEST(TextStream, ControlTokensAreEmptyAndSpecialTokensAreText) {
  const Streamed r = stream({kBosId, byte_token('a'), kEosId, tokenizer().id_of("<|assistant|>")}, {});
  EXPECT_EQ(r.all(), "a<|assistant|>");
}

// Random token sequences (mostly byte tokens, biased towards pieces of multi-byte characters and ill-formed bytes,
// plus learned pieces and special tokens) against the reference, after every push and at the end.
TEST(TextStream, MatchesTheNaiveReferenceOnRandomTokens) {
  const Tokenizer& tok = tokenizer();
  std::mt19937_64 rng(99);
  const std::string interesting = "ab \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xED\xA0\xC0\xFF\xBF";
  const std::vector<std::string> stop_atoms = {"a", "b", " ", "\xC3\xA9", kFffd, "th"};
  int stops_hit = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::vector<int32_t> ids;
    const int n = int(rng() % 25);
    for (int i = 0; i < n; ++i) {
      const int kind = int(rng() % 10);
      if (kind < 6) {
        ids.push_back(byte_token(uint8_t(interesting[rng() % interesting.size()])));
      } else if (kind < 7) {
        ids.push_back(byte_token(uint8_t(rng() % 256)));
      } else if (kind < 9) {
        ids.push_back(kFirstByteId + 256 + int32_t(rng() % uint64_t(tok.vocab_size() - kFirstByteId - 256)));
      } else {
        ids.push_back(int32_t(rng() % uint64_t(kFirstByteId)));
      }
    }
    std::vector<std::string> stop(rng() % 4);
    for (std::string& s : stop) {
      const int len = int(rng() % 4);  // 0: an empty (ignored) stop string
      for (int j = 0; j < len; ++j) s += stop_atoms[rng() % stop_atoms.size()];
    }

    TextStream ts(tok, stop);
    std::string emitted;
    bool stopped = false;
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string piece = ts.push(ids[i]);
      ASSERT_TRUE(naive_valid(piece)) << "trial " << trial;
      emitted += piece;
      if (stopped) {
        ASSERT_EQ(piece, "");
        continue;
      }
      // What must have been emitted by now: the complete characters so far, cut at a stop, or less the hold-back.
      const std::string bytes = tok.decode(std::span(ids).first(i + 1));
      const std::string complete = naive_repair(bytes.substr(0, unfinished_tail(bytes)));
      const size_t cut = naive_stop_cut(complete, stop);
      if (cut != std::string::npos) {
        ASSERT_EQ(emitted, complete.substr(0, cut)) << "trial " << trial << " push " << i;
        ASSERT_TRUE(ts.stopped());
        stopped = true;
      } else {
        ASSERT_EQ(emitted, complete.substr(0, complete.size() - naive_holdback(complete, stop)))
            << "trial " << trial << " push " << i;
        ASSERT_FALSE(ts.stopped());
      }
    }
    const std::string last = ts.finish();
    ASSERT_TRUE(naive_valid(last));
    emitted += last;
    const std::string repaired = naive_repair(tok.decode(ids));
    const size_t cut = naive_stop_cut(repaired, stop);
    ASSERT_EQ(emitted, cut == std::string::npos ? repaired : repaired.substr(0, cut)) << "trial " << trial;
    ASSERT_EQ(ts.stopped(), cut != std::string::npos) << "trial " << trial;
    stops_hit += cut != std::string::npos;
    ASSERT_EQ(ts.finish(), "");
  }
  // The generator exercises both outcomes.
  EXPECT_GT(stops_hit, 200);
  EXPECT_LT(stops_hit, 1300);
}

}  // namespace
}  // namespace myriad
