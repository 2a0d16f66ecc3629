// `myriad data prepare` (docs/training.md): documents (data/tokenize/data_files.h) tokenized into token shards
// (data/datasets/shards.h), split into train and val.
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
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/datasets/shards.h"
#include "data/tokenize/data_files.h"
#include "data/tokenize/tokenizer.h"

namespace myriad {

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
