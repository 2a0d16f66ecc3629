// The data sources: files named by paths and their documents (data/tokenize/data_files.h).
#include "data/tokenize/data_files.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/log.h"
#include "io/atomic_file.h"

namespace myriad {

namespace {

namespace fs = std::filesystem;

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

bool is_jsonl_extension(const std::string& e) {
  return e == ".jsonl" || e == ".ndjson";
}

bool is_text_extension(const std::string& e) {
  return e == ".txt" || e == ".text" || e == ".md" || is_jsonl_extension(e);
}

}  // namespace

std::vector<DataFile> collect_data_files(const std::vector<std::string>& paths) {
  MYRIAD_REQUIRE(!paths.empty(), kValue, "no data paths given");
  std::vector<DataFile> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    MYRIAD_REQUIRE(fs::exists(st), kIo, "data path '", p, "' does not exist");
    if (fs::is_regular_file(st)) {
      out.push_back({p, is_jsonl_extension(lower_extension(p)), uint64_t(fs::file_size(p))});
      continue;
    }
    MYRIAD_REQUIRE(fs::is_directory(st), kIo, "data path '", p, "' is neither a file nor a directory");
    std::vector<DataFile> found;
    fs::recursive_directory_iterator it(p, fs::directory_options::follow_directory_symlink, ec), end;
    MYRIAD_REQUIRE(!ec, kIo, "cannot read directory '", p, "': ", ec.message());
    for (; it != end; it.increment(ec)) {
      MYRIAD_REQUIRE(!ec, kIo, "cannot read directory '", p, "': ", ec.message());
      const fs::path& q = it->path();
      if (q.filename().string().rfind('.', 0) == 0) {  // hidden: skip it (and all below it)
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      const std::string ext = lower_extension(q);
      if (!it->is_regular_file(ec) || !is_text_extension(ext)) continue;
      found.push_back({q.string(), is_jsonl_extension(ext), uint64_t(it->file_size(ec))});
    }
    MYRIAD_REQUIRE(!found.empty(), kValue, "directory '", p,
                   "' holds no text files (*.txt, *.text, *.md, *.jsonl, *.ndjson)");
    std::sort(found.begin(), found.end(), [](const DataFile& a, const DataFile& b) { return a.path < b.path; });
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

void SkippedLines::add(const std::string& path, int64_t line, const std::string& reason) {
  if (count++ == 0) {
    first_path = path;
    first_line = line;
    first_reason = reason;
  }
}

std::string SkippedLines::describe() const {
  if (count == 0) return "no lines skipped";
  return str(count, count == 1 ? " JSONL line" : " JSONL lines", " skipped (first: ", first_path, " line ", first_line,
             ": ", first_reason, ")");
}

void read_jsonl_documents(const DataFile& file, const std::function<void(std::string_view, uint64_t)>& fn,
                          SkippedLines* skipped, int64_t* empty, const std::function<void(uint64_t)>& on_bytes) {
  std::ifstream in(file.path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open data file '", file.path, "'");
  std::string line;
  uint64_t offset = 0;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const uint64_t line_offset = offset;
    offset += line.size() + 1;
    if (on_bytes) on_bytes(line.size() + 1);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank
    const nlohmann::json j = parse_json_or_discarded(line);
    const char* reason = nullptr;
    if (j.is_discarded())
      reason = "not valid JSON";
    else if (!j.is_object())
      reason = "not a JSON object";
    else if (!j.contains("text"))
      reason = "no \"text\" field";
    else if (!j["text"].is_string())
      reason = "\"text\" is not a string";
    if (reason) {
      if (skipped) skipped->add(file.path, line_no, reason);
      continue;
    }
    const std::string& text = j["text"].get_ref<const std::string&>();
    if (text.empty()) {
      if (empty) ++*empty;
      continue;
    }
    fn(text, line_offset);
  }
  MYRIAD_REQUIRE(!in.bad(), kIo, "error reading data file '", file.path, "' at line ", line_no + 1);
}

void read_text_chunks(const std::string& path, uint64_t begin, uint64_t end, size_t chunk_bytes,
                      const std::function<void(std::string_view)>& fn) {
  if (begin >= end) return;
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open data file '", path, "'");
  in.seekg(std::streamoff(begin));
  std::string buf;
  uint64_t pos = begin;
  while (pos < end) {
    const size_t want = size_t(std::min<uint64_t>(chunk_bytes, end - pos));
    const size_t old = buf.size();
    buf.resize(old + want);
    in.read(buf.data() + old, std::streamsize(want));
    MYRIAD_REQUIRE(size_t(in.gcount()) == want, kIo, "error reading data file '", path, "' at byte ", pos,
                   " (file changed while reading?)");
    pos += want;
    if (pos >= end) break;
    size_t cut = buf.rfind('\n');
    if (cut != std::string::npos) {
      ++cut;
    } else if (buf.size() >= chunk_bytes) {
      // Cut before the start of the last character, so that no character is split (in well-formed UTF-8).
      cut = buf.size() - 1;
      for (int k = 0; k < 3 && cut > 0 && is_utf8_continuation(static_cast<unsigned char>(buf[cut])); ++k) --cut;
      if (cut == 0) cut = buf.size();
    } else {
      continue;
    }
    fn(std::string_view(buf).substr(0, cut));
    buf.erase(0, cut);
  }
  if (!buf.empty()) fn(buf);
}

}  // namespace myriad
