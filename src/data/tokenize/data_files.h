// The data sources of `myriad data prepare` and `myriad tokenizer train`: which files a path names and the documents
// they hold.
//
// Data sources (also what `myriad tokenizer train` reads): a path is a text file (one document), a JSONL file
// (*.jsonl, *.ndjson: one document per line, its "text" string), or a directory walked recursively in sorted
// order for *.txt, *.text, *.md, *.jsonl, *.ndjson (hidden entries skipped; a file named explicitly is read
// whatever its extension). JSONL lines that are not JSON, not an object, or lack a string "text" are skipped and
// counted (the first one's file and line number are kept for the report); blank lines are ignored silently, and
// documents whose text is empty are counted apart and contribute nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace myriad {

// A byte that continues a UTF-8 character (10xxxxxx): where a cut must not fall.
inline bool is_utf8_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

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

}  // namespace myriad
