// Byte-level BPE merging. See byte_bpe.h.
#include "data/tokenize/byte_bpe.h"

#include <algorithm>
#include <climits>
#include <queue>

#include "core/error.h"

namespace myriad {

void ByteBpe::index_tokens(const std::string& source) {
  by_bytes_.reserve(token_bytes_.size());
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    const std::string& t = token_bytes_[id];
    if (t.empty()) continue;
    const auto [it, fresh] = by_bytes_.emplace(std::string_view(t), int32_t(id));
    MYRIAD_REQUIRE(fresh, kFormat, source, ": tokens ", it->second, " and ", id, " have the same bytes");
  }
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    const int32_t id = find(std::string_view(&c, 1));
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", b);
    MYRIAD_REQUIRE(id >= 0, kFormat, source, ": no token for the single byte ", hex,
                   " (a byte-level BPE needs all 256, or some text could not be encoded)");
    byte_token_[b] = id;
  }
}

ByteBpe ByteBpe::from_ranks(std::vector<std::string> token_bytes, const std::string& source) {
  ByteBpe bpe;
  bpe.token_bytes_ = std::move(token_bytes);
  bpe.whole_piece_first_ = true;
  bpe.ranked_ = true;
  bpe.index_tokens(source);
  // Every way to cut a token into two tokens is a merge with the token's rank: exactly the pairs of adjacent
  // symbols whose concatenation tiktoken would find in its ranks.
  for (size_t id = 0; id < bpe.token_bytes_.size(); ++id) {
    const std::string_view t = bpe.token_bytes_[id];
    for (size_t k = 1; k < t.size(); ++k) {
      const int32_t l = bpe.find(t.substr(0, k)), r = bpe.find(t.substr(k));
      if (l >= 0 && r >= 0) bpe.pairs_.emplace(pair_key(l, r), PairInfo{int32_t(id), int32_t(id)});
    }
  }
  return bpe;
}

ByteBpe ByteBpe::from_merges(std::vector<std::string> token_bytes, const std::vector<Merge>& merges,
                             bool whole_piece_first, const std::string& source) {
  ByteBpe bpe;
  bpe.token_bytes_ = std::move(token_bytes);
  bpe.whole_piece_first_ = whole_piece_first;
  bpe.index_tokens(source);
  bpe.pairs_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    // A later duplicate of a merge does not override the first (its rank is the lower one).
    bpe.pairs_.emplace(pair_key(m.left, m.right), PairInfo{int32_t(rank), m.merged});
  }
  return bpe;
}

int32_t ByteBpe::find(std::string_view bytes) const {
  auto it = by_bytes_.find(bytes);
  return it == by_bytes_.end() ? -1 : it->second;
}

void ByteBpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (whole_piece_first_) {
    const int32_t whole = find(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  if (piece.size() <= kScanLimit)
    encode_scan(piece, out);
  else
    encode_with_heap(piece, out);
}

void ByteBpe::encode_scan(std::string_view piece, std::vector<int32_t>& out) const {
  // parts[i]: the symbol; rank[i] / merged[i]: the merge of parts i and i + 1 (INT_MAX: none).
  int32_t parts[kScanLimit], rank[kScanLimit], merged[kScanLimit];
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) parts[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  auto set_rank = [&](size_t i) {
    const PairInfo* p = pair(parts[i], parts[i + 1]);
    rank[i] = p ? p->rank : INT_MAX;
    merged[i] = p ? p->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) set_rank(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT_MAX) break;
    parts[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      parts[i] = parts[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) set_rank(best);
    if (best > 0) set_rank(best - 1);
  }
  out.insert(out.end(), parts, parts + n);
}

void ByteBpe::encode_with_heap(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  const size_t n = piece.size();
  std::vector<int32_t> id(n), prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[size_t(pos)] < 0) return;
    const int32_t l = id[size_t(pos)], r = id[size_t(next[size_t(pos)])];
    if (const PairInfo* p = pair(l, r)) heap.push({p->rank, pos, l, r});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t p = size_t(c.pos);
    // Stale: the symbol at pos was absorbed (id -1), or either side has changed since the pair was pushed.
    if (id[p] != c.left || next[p] < 0 || id[size_t(next[p])] != c.right) continue;
    const size_t r = size_t(next[p]);
    id[p] = pair(c.left, c.right)->merged;
    id[r] = -1;
    next[p] = next[r];
    if (next[r] >= 0) prev[size_t(next[r])] = int32_t(p);
    push(prev[p]);
    push(int32_t(p));
  }
  for (int32_t i = 0; i >= 0; i = next[size_t(i)]) out.push_back(id[i]);
}

std::vector<ByteBpe::Merge> ByteBpe::merges() const {
  std::vector<Merge> out;
  if (!ranked_) {  // a merge listed twice kept its first rank: the list may have gaps
    int32_t last = -1;
    for (const auto& [key, info] : pairs_) last = std::max(last, info.rank);
    out.assign(size_t(last + 1), Merge{-1, -1, -1});
    for (const auto& [key, info] : pairs_)
      out[size_t(info.rank)] = {int32_t(key >> 32), int32_t(uint32_t(key)), info.merged};
    std::erase_if(out, [](const Merge& m) { return m.left < 0; });
    return out;
  }
  std::vector<int32_t> symbols;
  for (size_t id = 0; id < token_bytes_.size(); ++id) {
    const std::string& t = token_bytes_[id];
    if (t.size() < 2) continue;
    symbols.clear();
    for (const char c : t) symbols.push_back(byte_token_[uint8_t(c)]);
    // BPE on the token's own bytes with the merges ranked below it: the lowest rank first, leftmost on ties
    while (symbols.size() > 2) {
      int32_t best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const PairInfo* p = pair(symbols[i], symbols[i + 1]);
        if (p && p->rank < int32_t(id) && (best < 0 || p->rank < best)) {
          best = p->rank;
          at = i;
        }
      }
      if (best < 0) break;
      symbols[at] = best;  // a ranked vocabulary's merged id is its rank
      symbols.erase(symbols.begin() + int64_t(at) + 1);
    }
    if (symbols.size() == 2 && pair(symbols[0], symbols[1])) out.push_back({symbols[0], symbols[1], int32_t(id)});
  }
  return out;
}

}  // namespace myriad
