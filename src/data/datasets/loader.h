// The training data loader (docs/training.md): memory-maps the token shards of a `myriad data prepare` directory
// and serves windows of the concatenated token stream.
//
// Windows: for a sequence length T the train stream of N tokens is cut into n = (N - 1) / T windows, window w
// holding tokens [w T, w T + T + 1); tokens = its first T, targets = its last T (the tokens shifted by one).
// Consecutive windows share one token, so every token but the first is a target exactly once per epoch; the last
// (N - 1) mod T tokens are not. Documents are packed across windows with their <|endoftext|> separators.
//
// Order: epoch e serves the windows in the order of a permutation of [0, n) drawn by Fisher-Yates from
// std::mt19937_64(splitmix64(splitmix64(seed) + e)) (mixed, so that seed s + 1 does not replay seed s one epoch
// later): for i = n-1 down to 1, j = below(i + 1), swap(p[i], p[j]), where below(m) draws
// x = rng() until x < 2^64 - (2^64 mod m) and returns x mod m. (Our own draws, not std::shuffle or
// std::uniform_int_distribution, whose algorithms differ between standard libraries: the order is the same
// everywhere.) A batch of B rows takes the next B windows; at the end of an epoch it continues into the next.
//
// State: {"epoch": e, "position": tokens of epoch e already served (windows served x T), "seed": s,
// "seq_len": T, "train_tokens": N}. restore() of that state continues bit-exactly (the permutation is
// recomputed from seed and epoch); "train_tokens" guards against restoring onto different data.
//
// Changing seq_len (the progressive context ladder): the position in tokens is kept and the stream re-cut: the
// next window is number ceil(position / T') of epoch e's permutation for the new length T' (a new epoch when
// that is past the end). The fraction of the epoch already served is thus kept; which tokens are served in the
// rest of that one epoch is not coordinated with those already served (some repeat, some are skipped); from the
// next epoch on coverage is exact again.
//
// Validation: every shard's header (magic, version, dtype, count against the file size) on open, shard numbering
// without gaps, meta.json's token counts against the shards when meta.json exists, and each served token against
// meta.json's vocab_size; errors are kFormat / kIo naming the file.
//
// Leaves out: per-document attention masks, sharding across data-parallel ranks (a rank can use its own seed or
// take every k-th batch), prefetching (the copies are from page cache and cost microseconds).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/datasets/shards.h"

namespace myriad {

struct Batch {
  int64_t batch = 0;             // B rows
  int64_t seq_len = 0;           // T
  std::vector<int64_t> tokens;   // [B, T] row-major
  std::vector<int64_t> targets;  // [B, T]: tokens shifted by one
};

// One split (train or val) of a shard directory as one stream of tokens.
class TokenStream {
 public:
  // DIR/<split>-00000.bin, ...; a split without shards is an empty stream when allow_empty, else kIo.
  static TokenStream open(const std::string& dir, const std::string& split, bool allow_empty);
  int64_t size() const { return total_; }
  // out[j] = token begin + j for j < n, across shard boundaries. Throws kFormat for a token >= vocab_limit when
  // vocab_limit > 0.
  void read(int64_t begin, int64_t n, int64_t* out, int64_t vocab_limit = 0) const;
  const std::vector<MappedShard>& shards() const { return shards_; }

 private:
  std::vector<MappedShard> shards_;
  std::vector<int64_t> starts_;  // first token of each shard in the stream
  int64_t total_ = 0;
};

// The val split in order, window after window (the same windows as above, unshuffled): for (const Batch& b :
// loader.val_batches(T, B)). The last batch may have fewer than B rows.
class ValBatches {
 public:
  ValBatches(TokenStream stream, int64_t seq_len, int64_t batch, int64_t vocab_limit);
  int64_t windows() const { return windows_; }
  int64_t size() const { return (windows_ + batch_ - 1) / batch_; }  // batches
  Batch operator[](int64_t i) const;

  class Iterator {
   public:
    Iterator(const ValBatches* owner, int64_t i) : owner_(owner), i_(i) {}
    Batch operator*() const { return (*owner_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    const ValBatches* owner_;
    int64_t i_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

 private:
  TokenStream stream_;  // shares the loader's mappings: valid on its own
  int64_t seq_len_, batch_, windows_, vocab_limit_;
};

class Loader {
 public:
  // `dir`: a `myriad data prepare` output (train-*.bin required; val-*.bin and meta.json optional).
  explicit Loader(const std::string& dir, uint64_t seed = 0);

  // The next B windows of length T + 1 in this epoch's order. Throws kValue when the train split has fewer
  // than T + 1 tokens.
  Batch next_batch(int64_t seq_len, int64_t batch = 1);
  ValBatches val_batches(int64_t seq_len, int64_t batch = 1) const;

  nlohmann::json state() const;
  // Throws kValue naming the field for a state that does not fit this data (other train_tokens, a position
  // that is not a multiple of seq_len or past the epoch, missing fields).
  void restore(const nlohmann::json& state);

  // Windows per epoch at sequence length T: (train_tokens - 1) / T.
  int64_t windows_per_epoch(int64_t seq_len) const;
  int64_t train_tokens() const { return train_.size(); }
  int64_t val_tokens() const { return val_.size(); }
  int64_t vocab_size() const { return vocab_size_; }  // from meta.json; 0 when unknown
  int64_t epoch() const { return epoch_; }
  const nlohmann::json& meta() const { return meta_; }  // meta.json, or null
  const std::string& dir() const { return dir_; }

 private:
  void ensure_permutation();
  std::string dir_;
  TokenStream train_, val_;
  nlohmann::json meta_;
  int64_t vocab_size_ = 0;
  uint64_t seed_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // tokens of this epoch served: windows served x seq_len_
  int64_t seq_len_ = 0;   // 0 before the first batch
  std::vector<uint64_t> perm_;
  int64_t perm_epoch_ = -1, perm_seq_len_ = 0;
};

// The permutation of [0, n) of epoch `epoch` (see above); exposed for tests and tools.
std::vector<uint64_t> window_permutation(uint64_t seed, int64_t epoch, int64_t n);

}  // namespace myriad
