// Token shards (docs/training.md): the files `myriad data prepare` writes (data/datasets/prepare.h) and the loader
// reads.
//
// Shard file: a 32-byte little-endian header
//   magic "MYRTOKS\0" (8) | version u32 = 1 | dtype u32 (1 = u16, 2 = u32) | count u64 | reserved u64 = 0
// then `count` token ids of that width. u16 when the vocabulary has at most 65536 ids, else u32. A split is the
// concatenation of DIR/<split>-00000.bin, -00001.bin, ... in order; documents end with <|endoftext|>.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace myriad {

inline constexpr char kShardMagic[8] = {'M', 'Y', 'R', 'T', 'O', 'K', 'S', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint64_t kShardHeaderBytes = 32;
inline constexpr int64_t kDefaultShardTokens = int64_t(64) << 20;

enum class ShardDType : uint32_t { kU16 = 1, kU32 = 2 };
const char* shard_dtype_name(ShardDType dtype);  // "u16" / "u32"
int shard_dtype_bytes(ShardDType dtype);
ShardDType shard_dtype_for_vocab(int64_t vocab_size);  // u16 when vocab_size <= 65536

struct ShardHeader {
  uint32_t version = kShardVersion;
  ShardDType dtype = ShardDType::kU16;
  uint64_t count = 0;
};

// The 32 header bytes.
std::string encode_shard_header(ShardDType dtype, uint64_t count);
// Validates magic, version, dtype, reserved and that the file size is exactly 32 + count * width. Throws kFormat
// naming `path` and the rule.
ShardHeader parse_shard_header(const void* data, uint64_t file_size, const std::string& path);

// "DIR/train-00003.bin"
std::string shard_path(const std::string& dir, const std::string& split, int64_t index);

// Writes one shard atomically. Throws kValue for a token that does not fit dtype (or is negative).
void write_shard(const std::string& path, ShardDType dtype, std::span<const int32_t> tokens);

// A read-only memory mapping of one shard, validated on open (kIo / kFormat naming the file).
class MappedShard {
 public:
  static MappedShard open(const std::string& path);
  const std::string& path() const { return path_; }
  ShardDType dtype() const { return dtype_; }
  int64_t size() const { return count_; }
  int64_t operator[](int64_t i) const;
  // out[j] = token begin + j, j < n; [begin, begin + n) must lie inside the shard.
  void read(int64_t begin, int64_t n, int64_t* out) const;

 private:
  struct Mapping;
  std::shared_ptr<Mapping> map_;
  std::string path_;
  ShardDType dtype_ = ShardDType::kU16;
  int64_t count_ = 0;
  const unsigned char* tokens_ = nullptr;
};

// Appends tokens to DIR/<split>-NNNNN.bin, starting a new shard every max_tokens tokens; each shard is written
// (atomically) when it is full or at finish().
class ShardSetWriter {
 public:
  ShardSetWriter(std::string dir, std::string split, ShardDType dtype, int64_t max_tokens = kDefaultShardTokens);
  void append(std::span<const int32_t> tokens);
  void finish();  // writes the last, partial shard; no file at all for a split without tokens
  int64_t tokens() const { return tokens_; }
  const std::vector<std::string>& files() const { return files_; }  // names relative to dir

 private:
  void flush();
  std::string dir_, split_;
  ShardDType dtype_;
  int64_t max_tokens_;
  int64_t tokens_ = 0;
  std::vector<int32_t> buffer_;
  std::vector<std::string> files_;
};

}  // namespace myriad
