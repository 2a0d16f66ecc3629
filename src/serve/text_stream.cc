// Streaming detokenisation with stop strings (see text_stream.h).
//
// Two stages per token: raw bytes -> whole characters (take_complete_utf8, which holds back at most 3 bytes of an
// unfinished character), then whole characters -> emitted text (held_ keeps the longest tail that is still a proper
// prefix of some stop string, so it is shorter than the longest stop string). Both stages see each byte once more
// per push, plus the stop search over held_, so a push costs O(token bytes + |held_| * total stop length).
//
// NOTE: stop strings must be valid UTF-8. A valid stop string starts and ends on character boundaries of valid
// text, so cutting before a match, or holding back a possible start of one, never splits a character.
#include "serve/text_stream.h"

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Unicode table 3-7: for a lead byte, the length of its sequence and the allowed range of the SECOND byte (the later
// ones are always 80..BF). len 0: the byte cannot start a well-formed sequence.
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};  // no overlongs
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates D800..DFFF
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // no overlongs
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  return {0, 0, 0};  // 80..C1 (continuations, overlong 2-byte leads), F5..FF
}

// Start of the stop-string match in `text` that ends first (of several ending together, the longest); npos if
// none. Called after every push, so every match in `text` is new: the first completed one is the one that ends first.
size_t first_stop(const std::string& text, const std::vector<std::string>& stop) {
  size_t best_start = std::string::npos;
  size_t best_end = std::string::npos;
  for (const std::string& s : stop) {
    const size_t at = text.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best_start)) {
      best_start = at;
      best_end = end;
    }
  }
  return best_start;
}

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t partial_stop_suffix(const std::string& text, const std::vector<std::string>& stop) {
  size_t best = 0;
  for (const std::string& s : stop) {
    for (size_t len = std::min(text.size(), s.size() - 1); len > best; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

// Emits the safe part of `held`: everything before a completed stop string (and then sets `stopped` and drops the
// rest), or everything but the longest tail that could still begin one (all of it when `final`).
std::string release(std::string& held, std::string& pending_bytes, bool& stopped, const std::vector<std::string>& stop,
                    bool final) {
  std::string out;
  if (stop.empty()) {
    out.swap(held);
    return out;
  }
  const size_t at = first_stop(held, stop);
  if (at != std::string::npos) {
    out = held.substr(0, at);
    held.clear();
    pending_bytes.clear();
    stopped = true;
    return out;
  }
  const size_t keep = final ? 0 : partial_stop_suffix(held, stop);
  out = held.substr(0, held.size() - keep);
  held.erase(0, held.size() - keep);
  return out;
}

}  // namespace

std::string take_complete_utf8(std::string& bytes, bool final) {
  std::string out;
  out.reserve(bytes.size() + 8);
  const size_t n = bytes.size();
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0;
  while (i < n) {
    if (b[i] < 0x80) {  // ASCII run
      size_t j = i + 1;
      while (j < n && b[j] < 0x80) ++j;
      out.append(bytes, i, j - i);
      i = j;
      continue;
    }
    const Lead lead = lead_of(b[i]);
    if (lead.len == 0) {  // a maximal subpart of one byte
      out += kReplacement;
      ++i;
      continue;
    }
    // k: how many bytes of the sequence are present and well-formed so far.
    int k = 1;
    while (k < lead.len && i + size_t(k) < n) {
      const unsigned char c = b[i + size_t(k)];
      const unsigned char lo = k == 1 ? lead.lo : 0x80;
      const unsigned char hi = k == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) break;
      ++k;
    }
    if (k == lead.len) {
      out.append(bytes, i, size_t(k));
      i += size_t(k);
    } else if (i + size_t(k) < n || final) {
      // Ill-formed: bytes [i, i + k) are a maximal subpart (the byte after it, if any, is examined afresh).
      out += kReplacement;
      i += size_t(k);
    } else {
      break;  // an unfinished but so far well-formed tail: wait for more bytes
    }
  }
  bytes.erase(0, i);
  return out;
}

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop) : tok_(tok) {
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) continue;
    MYRIAD_REQUIRE(is_valid_utf8(stop[i]), kValue, "text stream: stop string ", i, " is not valid UTF-8");
    stop_.push_back(std::move(stop[i]));
  }
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return "";
  pending_bytes_ += tok_.token_bytes(token);
  held_ += take_complete_utf8(pending_bytes_, false);
  return release(held_, pending_bytes_, stopped_, stop_, false);
}

std::string TextStream::finish() {
  if (stopped_) return "";
  held_ += take_complete_utf8(pending_bytes_, true);
  return release(held_, pending_bytes_, stopped_, stop_, true);
}

}  // namespace myriad
