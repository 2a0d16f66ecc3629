// Byte-level BPE: the merge step of tiktoken's and Hugging Face's byte-level tokenizers, on bytes.
//
// A piece (from the pre-tokenizer) starts as one symbol per byte (each byte's own token); then, repeatedly, the
// adjacent pair of symbols with the lowest merge rank is merged, the leftmost one among equal ranks, until no
// adjacent pair has a merge. The two formats differ only in where the ranks come from:
//   - tiktoken (from_ranks): the vocabulary is a list of byte strings; two adjacent symbols merge when their
//     concatenation is a token, with that token's rank. Every single byte must be a token.
//   - Hugging Face BPE (from_merges): an ordered list of merges (left id, right id) -> merged id; the rank is the
//     position in the list.
// With `whole_piece_first` (tiktoken always; Hugging Face's "ignore_merges") a piece that is itself a token is
// that token, without merging.
//
// Time: O(n^2) for a piece of n bytes up to kScanLimit (a linear scan per merge, fastest for the short pieces text
// is made of), O(n log n) above it (a heap of candidate pairs over a linked list of symbols), so one long run of
// letters or spaces cannot make encoding quadratic. Both give the same result (leftmost lowest rank first).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace myriad {

class ByteBpe {
 public:
  struct Merge {
    int32_t left, right, merged;
  };
  static constexpr size_t kScanLimit = 64;

  ByteBpe() = default;
  // Move-only: the lookup table holds views into token_bytes_ (a move keeps the vector's buffer; a copy would not).
  ByteBpe(ByteBpe&&) = default;
  ByteBpe& operator=(ByteBpe&&) = default;
  ByteBpe(const ByteBpe&) = delete;
  ByteBpe& operator=(const ByteBpe&) = delete;
  // tiktoken: token_bytes[rank] is the token of that rank (= its id). Throws kFormat naming `source` for a
  // duplicate token or a missing single byte.
  static ByteBpe from_ranks(std::vector<std::string> token_bytes, const std::string& source);
  // Hugging Face: token_bytes[id] (an empty string is an id without a token), merges in rank order.
  static ByteBpe from_merges(std::vector<std::string> token_bytes, const std::vector<Merge>& merges,
                             bool whole_piece_first, const std::string& source);

  // Appends the ids of one piece to out.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  // The same with the O(n log n) path whatever the length (for tests: both paths must agree).
  void encode_with_heap(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }
  // The merges as a Hugging Face merges list, in rank order (what llama.cpp's BPE reads): from_merges, as given;
  // from_ranks, one per multi-byte token in rank order: the last merge BPE makes when it encodes the token's bytes
  // with the lower-ranked merges only (a token BPE cannot build so has none), as llama.cpp's converter derives
  // them from tiktoken ranks. Encoding with these merges gives tiktoken's ids.
  std::vector<Merge> merges() const;
  // Id of the token whose bytes are exactly `bytes`, or -1.
  int32_t find(std::string_view bytes) const;
  const std::vector<std::string>& token_bytes() const { return token_bytes_; }

 private:
  struct PairInfo {
    int32_t rank, merged;
  };
  static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  const PairInfo* pair(int32_t l, int32_t r) const {
    auto it = pairs_.find(pair_key(l, r));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  void index_tokens(const std::string& source);
  void encode_scan(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> token_bytes_;
  std::unordered_map<std::string_view, int32_t> by_bytes_;  // views into token_bytes_
  std::unordered_map<uint64_t, PairInfo> pairs_;
  int32_t byte_token_[256] = {};
  bool whole_piece_first_ = true;
  bool ranked_ = false;  // from_ranks
};

}  // namespace myriad
