// Token shards and data preparation (docs/training.md, `myriad data prepare`).
//
// Shard file: a 32-byte little-endian header
//   magic "MYRTOKS\0" (8) | version u32 = 1 | dtype u32 (1 = u16, 2 = u32) | count u64 | reserved u64 = 0
// then `count` token ids of that width. u16 when the vocabulary has at most 65536 ids, else u32. A split is the
// concatenation of DIR/<split>-00000.bin, -00001.bin, ... in order; documents end with <|endoftext|>.
//
// Data sources (also what `myriad tokenizer train` reads): a path is a text file (one document), a JSONL file
// (*.jsonl, *.ndjson: one document per line, its "text" string), or a directory walked recursively in sorted
// order for *.txt, *.text, *.md, *.jsonl, *.ndjson (hidden entries skipped; a file named explicitly is read
// whatever its extension). JSONL lines that are not JSON, not an object, or lack a string "text" are skipped and
// counted (the first one's file and line number are kept for the report); blank lines are ignored silently, and
// documents whose text is empty are counted apart and contribute nothing.
//
// prepare_data: each document's tokens followed by <|endoftext|>, the train and val streams cut into shards of at
// most shard_tokens tokens, plus meta.json. The val split (val_fraction of the data):
//   split_by position: per file, by byte position. A text file's last val_fraction of bytes (the cut moved
//     forward to a UTF-8 character boundary) is a document of its own in val, the rest a document in train
//     (the Shakespeare 90/10 split). In a JSONL file the documents whose line starts in the last val_fraction of
//     the file's bytes go to val.
//   split_by document: document i (counted over all files in order) goes to val when
//     floor((i + 1) f) > floor(i f): an evenly spread round(N f) of the N documents, no randomness.
// Everything is written into a sibling temporary directory DIR.tmp-XXXXXX (each file fsync'ed), which is then
// renamed to DIR (an existing non-empty DIR is refused unless force; with force it is swapped out atomically
// with renameat2(RENAME_EXCHANGE) and then removed). On any error the temporary directory is removed: DIR is
// either untouched or complete.
//
// Leaves out: deduplication, filtering, shuffling at preparation time (the loader shuffles windows).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace myriad {

// ---- Shard files ----

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

// ---- Data sources ----

struct DataFile {
  std::string path;
  bool jsonl = false;
  uint64_t bytes = 0;
};

// Expands paths as described above. Throws kIo for a missing path, kValue for a directory without text files.
std::vector<DataFile> collect_data_files(const std::vector<std::string>& paths);

struct SkippedLines {
  int64_t count = 0;
  std::string first_path;  // of the first skipped line
  int64_t first_line = 0;  // 1-based
  std::string first_reason;
  void add(const std::string& path, int64_t line, const std::string& reason);
  std::string describe() const;  // "3 lines skipped (first: data.jsonl line 7: not JSON)"
};

// Calls fn(text, byte offset of the line in the file) for each document of a JSONL file. Bad lines go to
// `skipped`; `empty` (may be null) counts documents with an empty "text". on_bytes(n) reports progress.
void read_jsonl_documents(const DataFile& file, const std::function<void(std::string_view, uint64_t)>& fn,
                          SkippedLines* skipped, int64_t* empty = nullptr,
                          const std::function<void(uint64_t)>& on_bytes = {});

// Reads bytes [begin, end) of a file as consecutive chunks of about chunk_bytes, each ending just after a '\n'
// unless a line is longer than chunk_bytes (then the cut is at a UTF-8 character boundary).
void read_text_chunks(const std::string& path, uint64_t begin, uint64_t end, size_t chunk_bytes,
                      const std::function<void(std::string_view)>& fn);

// ---- Preparation ----

enum class SplitBy { kPosition, kDocument };
SplitBy parse_split_by(const std::string& s);  // "position" | "document"; throws kValue

struct PrepareOptions {
  double val_fraction = 0.1;  // [0, 1)
  SplitBy split_by = SplitBy::kPosition;
  int64_t shard_tokens = kDefaultShardTokens;
  bool force = false;          // replace an existing non-empty output directory
  bool progress = true;        // a progress bar on stderr (only drawn when stderr is a terminal)
  std::string tokenizer_path;  // recorded in meta.json
};

struct SplitStats {
  int64_t tokens = 0;
  int64_t documents = 0;
  uint64_t bytes = 0;  // text bytes that went in (separators not counted)
  std::vector<std::string> shards;
};

struct PrepareResult {
  SplitStats train, val;
  int64_t files = 0;
  uint64_t bytes = 0;
  int64_t empty_documents = 0;
  SkippedLines skipped;
  nlohmann::ordered_json meta;  // what meta.json holds
};

// Tokenizes `paths` into out_dir (see above). Throws kIo (missing path, unwritable output, existing output),
// kValue (empty data, no documents, bad options); out_dir is then untouched.
PrepareResult prepare_data(const Tokenizer& tokenizer, const std::vector<std::string>& paths,
                           const std::string& out_dir, const PrepareOptions& options = {});

}  // namespace myriad
