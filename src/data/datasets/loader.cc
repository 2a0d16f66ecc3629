// The training data loader: memory-mapped shards, shuffled windows, exact resume. See loader.h.
#include "data/datasets/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/json_fields.h"

namespace myriad {

namespace {

namespace fs = std::filesystem;

// Uniform in [0, m), m >= 1: draws x until x < 2^64 - (2^64 mod m), returns x mod m.
uint64_t below(std::mt19937_64& rng, uint64_t m) {
  const uint64_t r = (uint64_t(0) - m) % m;  // 2^64 mod m
  for (;;) {
    const uint64_t x = rng();
    if (r == 0 || x < uint64_t(0) - r) return x % m;
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// "train-00012.bin" -> 12 for split "train"; -1 when the name does not match.
int64_t shard_index(const std::string& name, const std::string& split) {
  const std::string prefix = split + "-", suffix = ".bin";
  if (name.size() < prefix.size() + 5 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 12 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

int64_t meta_tokens(const nlohmann::json& meta, const char* split) {
  if (!meta.is_object() || !meta.contains(split) || !meta[split].is_object()) return -1;
  const auto& s = meta[split];
  return s.contains("tokens") && s["tokens"].is_number_integer() ? s["tokens"].get<int64_t>() : -1;
}

int64_t windows_of(int64_t tokens, int64_t seq_len) {
  return tokens >= seq_len + 1 ? (tokens - 1) / seq_len : 0;
}

}  // namespace

// ---- TokenStream ----

TokenStream TokenStream::open(const std::string& dir, const std::string& split, bool allow_empty) {
  std::error_code ec;
  MYRIAD_REQUIRE(fs::is_directory(dir, ec), kIo, "token shard directory '", dir, "' does not exist",
                 fs::exists(dir, ec) ? " (it is not a directory)" : "");
  std::map<int64_t, std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t i = shard_index(e.path().filename().string(), split);
    if (i >= 0) found[i] = e.path().string();
  }
  MYRIAD_REQUIRE(!ec, kIo, "cannot list '", dir, "': ", ec.message());
  TokenStream s;
  if (found.empty()) {
    MYRIAD_REQUIRE(allow_empty, kIo, "no ", split, " shards (", split, "-00000.bin, ...) in '", dir,
                   "' (make them with myriad data prepare)");
    return s;
  }
  int64_t expect = 0;
  for (const auto& [i, path] : found) {
    MYRIAD_REQUIRE(i == expect, kFormat, "token shards in '", dir, "': ", shard_path(dir, split, expect),
                   " is missing (", split, " shards must be numbered from 00000 without gaps; found ",
                   fs::path(path).filename().string(), ")");
    ++expect;
    s.starts_.push_back(s.total_);
    s.shards_.push_back(MappedShard::open(path));
    s.total_ += s.shards_.back().size();
  }
  return s;
}

void TokenStream::read(int64_t begin, int64_t n, int64_t* out, int64_t vocab_limit) const {
  MYRIAD_CHECK(begin >= 0 && n >= 0 && begin + n <= total_, "read [", begin, ", ", begin + n, ") outside a stream of ",
               total_, " tokens");
  size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  while (n > 0) {
    const MappedShard& shard = shards_[s];
    const int64_t local = begin - starts_[s];
    const int64_t take = std::min(n, shard.size() - local);
    shard.read(local, take, out);
    if (vocab_limit > 0)
      for (int64_t j = 0; j < take; ++j)
        MYRIAD_REQUIRE(out[j] < vocab_limit, kFormat, "token shard '", shard.path(), "': token ", out[j], " at index ",
                       local + j, " is outside the vocabulary (vocab_size ", vocab_limit, " in meta.json)");
    out += take;
    begin += take;
    n -= take;
    ++s;
  }
}

namespace {

// A batch of `rows` windows of T tokens, each filled by fill(r, window [T + 1]): the tokens are its first T,
// the targets its last T (the next token of each).
template <class Fill>
Batch windows_batch(int64_t rows, int64_t T, Fill&& fill) {
  Batch b;
  b.batch = rows;
  b.seq_len = T;
  b.tokens.resize(size_t(rows * T));
  b.targets.resize(size_t(rows * T));
  std::vector<int64_t> window(size_t(T + 1));
  for (int64_t r = 0; r < rows; ++r) {
    fill(r, window.data());
    std::copy(window.begin(), window.end() - 1, b.tokens.begin() + r * T);
    std::copy(window.begin() + 1, window.end(), b.targets.begin() + r * T);
  }
  return b;
}

}  // namespace

// ---- ValBatches ----

ValBatches::ValBatches(TokenStream stream, int64_t seq_len, int64_t batch, int64_t vocab_limit)
    : stream_(std::move(stream)), seq_len_(seq_len), batch_(batch), vocab_limit_(vocab_limit) {
  MYRIAD_REQUIRE(seq_len >= 1 && batch >= 1, kValue, "val_batches: seq_len ", seq_len, " and batch ", batch,
                 " must be >= 1");
  windows_ = windows_of(stream_.size(), seq_len);
}

Batch ValBatches::operator[](int64_t i) const {
  MYRIAD_CHECK(i >= 0 && i < size(), "val batch ", i, " of ", size());
  const int64_t T = seq_len_, first = i * batch_, rows = std::min(batch_, windows_ - first);
  return windows_batch(rows, T,
                       [&](int64_t r, int64_t* window) { stream_.read((first + r) * T, T + 1, window, vocab_limit_); });
}

// ---- Loader ----

std::vector<uint64_t> window_permutation(uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<uint64_t> p(size_t(std::max<int64_t>(n, 0)));
  std::iota(p.begin(), p.end(), uint64_t(0));
  std::mt19937_64 rng(splitmix64(splitmix64(seed) + uint64_t(epoch)));
  for (int64_t i = n - 1; i >= 1; --i) std::swap(p[size_t(i)], p[size_t(below(rng, uint64_t(i) + 1))]);
  return p;
}

Loader::Loader(const std::string& dir, uint64_t seed) : dir_(dir), seed_(seed) {
  train_ = TokenStream::open(dir, "train", /*allow_empty=*/false);
  val_ = TokenStream::open(dir, "val", /*allow_empty=*/true);
  const std::string meta_path = (fs::path(dir) / "meta.json").string();
  std::error_code ec;
  if (fs::exists(meta_path, ec)) {
    std::ifstream in(meta_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    meta_ = parse_json_or_discarded(ss.str());
    MYRIAD_REQUIRE(!meta_.is_discarded() && meta_.is_object(), kFormat, meta_path, ": not a JSON object");
    if (meta_.contains("vocab_size")) {
      MYRIAD_REQUIRE(meta_["vocab_size"].is_number_integer() && meta_["vocab_size"].get<int64_t>() > 0, kFormat,
                     meta_path, ": \"vocab_size\" must be a positive integer");
      vocab_size_ = meta_["vocab_size"].get<int64_t>();
    }
    const int64_t tt = meta_tokens(meta_, "train"), vt = meta_tokens(meta_, "val");
    MYRIAD_REQUIRE(tt < 0 || tt == train_.size(), kFormat, meta_path, ": train.tokens is ", tt, " but the train shards",
                   " hold ", train_.size(), " tokens");
    MYRIAD_REQUIRE(vt < 0 || vt == val_.size(), kFormat, meta_path, ": val.tokens is ", vt, " but the val shards hold ",
                   val_.size(), " tokens");
  }
}

int64_t Loader::windows_per_epoch(int64_t seq_len) const {
  return windows_of(train_.size(), seq_len);
}

void Loader::ensure_permutation() {
  if (perm_epoch_ == epoch_ && perm_seq_len_ == seq_len_) return;
  perm_ = window_permutation(seed_, epoch_, windows_per_epoch(seq_len_));
  perm_epoch_ = epoch_;
  perm_seq_len_ = seq_len_;
}

Batch Loader::next_batch(int64_t seq_len, int64_t batch) {
  MYRIAD_REQUIRE(seq_len >= 1 && batch >= 1, kValue, "next_batch: seq_len ", seq_len, " and batch ", batch,
                 " must be >= 1");
  const int64_t T = seq_len, n = windows_per_epoch(T);
  MYRIAD_REQUIRE(n >= 1, kValue, "next_batch: seq_len ", T, " needs at least ", T + 1, " tokens, the train split of '",
                 dir_, "' has ", train_.size());
  if (seq_len_ != 0 && T != seq_len_) {
    // Re-cut at the new length, keeping the position in tokens (rounded up to a whole window).
    const int64_t k = (position_ + T - 1) / T;
    position_ = k * T;
    if (k >= n) {
      ++epoch_;
      position_ = 0;
    }
  }
  seq_len_ = T;
  return windows_batch(batch, T, [&](int64_t, int64_t* window) {
    if (position_ / T >= n) {
      ++epoch_;
      position_ = 0;
    }
    ensure_permutation();
    const uint64_t w = perm_[size_t(position_ / T)];
    train_.read(int64_t(w) * T, T + 1, window, vocab_size_);
    position_ += T;
  });
}

ValBatches Loader::val_batches(int64_t seq_len, int64_t batch) const {
  return ValBatches(val_, seq_len, batch, vocab_size_);
}

nlohmann::json Loader::state() const {
  return {{"epoch", epoch_},
          {"position", position_},
          {"seed", seed_},
          {"seq_len", seq_len_},
          {"train_tokens", train_.size()}};
}

void Loader::restore(const nlohmann::json& state) {
  MYRIAD_REQUIRE(state.is_object(), kValue, "loader state: must be a JSON object, got ", state.dump());
  auto field = [&](const char* name) -> int64_t {
    MYRIAD_REQUIRE(state.contains(name) && state[name].is_number_integer() && state[name].get<int64_t>() >= 0, kValue,
                   "loader state: \"", name, "\" must be a non-negative integer, got ",
                   state.contains(name) ? state[name].dump() : "nothing");
    return state[name].get<int64_t>();
  };
  const int64_t epoch = field("epoch"), position = field("position"), seq_len = field("seq_len");
  MYRIAD_REQUIRE(state.contains("seed") && state["seed"].is_number_integer() &&
                     (state["seed"].is_number_unsigned() || state["seed"].get<int64_t>() >= 0),
                 kValue, "loader state: \"seed\" must be a non-negative integer");
  const uint64_t seed = state["seed"].get<uint64_t>();
  if (state.contains("train_tokens"))
    MYRIAD_REQUIRE(field("train_tokens") == train_.size(), kValue, "loader state: \"train_tokens\" ",
                   state["train_tokens"].dump(), " does not match the ", train_.size(), " train tokens in '", dir_,
                   "' (a state from other data?)");
  if (seq_len == 0) {
    MYRIAD_REQUIRE(position == 0, kValue, "loader state: \"position\" ", position, " without a seq_len");
  } else {
    MYRIAD_REQUIRE(position % seq_len == 0 && position / seq_len <= windows_per_epoch(seq_len), kValue,
                   "loader state: \"position\" ", position, " must be a multiple of seq_len ", seq_len, " and at most ",
                   windows_per_epoch(seq_len) * seq_len, " (the windows of one epoch)");
  }
  epoch_ = epoch;
  position_ = position;
  seq_len_ = seq_len;
  seed_ = seed;
  perm_epoch_ = -1;
  perm_.clear();
}

}  // namespace myriad
