// `myriad data prepare` (data/datasets/prepare.h).
#include "data/datasets/prepare.h"

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

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

// A one-line progress bar on stderr, redrawn at most 10 times a second; drawn only when stderr is a terminal.
class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total, bool enabled)
      : label_(std::move(label)), total_(total), enabled_(enabled && ::isatty(STDERR_FILENO)) {}
  ~ProgressBar() { finish(); }
  void add(uint64_t n) {
    done_ += n;
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw();
  }
  void finish() {
    if (!enabled_ || finished_) return;
    finished_ = true;
    draw();
    std::fputc('\n', stderr);
  }

 private:
  void draw() {
    drawn_ = true;
    const double frac = total_ ? std::min(1.0, double(done_) / double(total_)) : 1.0;
    const int width = 30, filled = int(frac * width);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '-');
    std::fprintf(stderr, "\r%s [%s] %5.1f%%  %s / %s  %s/s   ", label_.c_str(), bar.c_str(), 100.0 * frac,
                 human_bytes(double(done_)).c_str(), human_bytes(double(total_)).c_str(),
                 human_bytes(secs > 0 ? double(done_) / secs : 0.0).c_str());
    std::fflush(stderr);
  }
  std::string label_;
  uint64_t total_, done_ = 0;
  bool enabled_, drawn_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_;
};

}  // namespace

SplitBy parse_split_by(const std::string& s) {
  if (s == "position") return SplitBy::kPosition;
  if (s == "document") return SplitBy::kDocument;
  throw_error(ErrorKind::kValue, "--split-by '", s, "': must be 'position' or 'document'");
}

namespace {

enum { kTrain = 0, kVal = 1 };

// A piece of text to tokenize, in stream order.
struct Segment {
  int split = kTrain;
  std::string text;
  bool ends_document = false;
  uint64_t input_bytes = 0;  // bytes of input read for it (skipped JSONL lines included), for the progress bar
  std::vector<int32_t> ids;
};

// Byte position where a file's val part starts: floor(size (1 - f)), moved forward to a character boundary.
uint64_t position_cut(const std::string& path, uint64_t size, double val_fraction) {
  uint64_t cut = uint64_t(std::floor(double(size) * (1.0 - val_fraction)));
  cut = std::min(cut, size);
  if (cut == 0 || cut == size) return cut;
  std::ifstream in(path, std::ios::binary);
  MYRIAD_REQUIRE(in.good(), kIo, "cannot open data file '", path, "'");
  in.seekg(std::streamoff(cut));
  char b[4] = {};
  in.read(b, 4);
  for (std::streamsize k = 0; k < in.gcount() && is_utf8_continuation(static_cast<unsigned char>(b[k])); ++k) ++cut;
  return std::min(cut, size);
}

nlohmann::ordered_json split_json(const SplitStats& s) {
  return {{"tokens", s.tokens}, {"documents", s.documents}, {"bytes", s.bytes}, {"shards", s.shards}};
}

}  // namespace

PrepareResult prepare_data(const Tokenizer& tokenizer, const std::vector<std::string>& paths,
                           const std::string& out_dir, const PrepareOptions& options) {
  const double f = options.val_fraction;
  MYRIAD_REQUIRE(f >= 0.0 && f < 1.0, kValue, "--val-fraction ", f, ": must be in [0, 1)");
  MYRIAD_REQUIRE(options.shard_tokens >= 1, kValue, "--shard-tokens ", options.shard_tokens, ": must be >= 1");
  MYRIAD_REQUIRE(!out_dir.empty(), kValue, "data prepare: empty output path");
  const std::vector<DataFile> files = collect_data_files(paths);
  PrepareResult r;
  r.files = int64_t(files.size());
  for (const DataFile& df : files) r.bytes += df.bytes;
  MYRIAD_REQUIRE(r.bytes > 0, kValue, "no data: the ", files.size(), " input file(s) are empty");

  // Output: refuse a non-empty directory without force before doing any work.
  std::error_code ec;
  const fs::path out_path = fs::path(out_dir).lexically_normal();
  const std::string out = out_path.has_filename() ? out_path.string() : out_path.parent_path().string();
  const bool out_exists = fs::exists(fs::symlink_status(out, ec));
  if (out_exists) {
    MYRIAD_REQUIRE(fs::is_directory(out, ec), kIo, "output '", out, "' exists and is not a directory");
    MYRIAD_REQUIRE(options.force || directory_is_empty(out), kIo, "output directory '", out,
                   "' exists and is not empty (pass --force to replace it)");
  }
  StagedDirectory staged(out);  // a temporary directory beside the output (io/atomic_file.h)
  const std::string& tmp = staged.path();

  const ShardDType dtype = shard_dtype_for_vocab(tokenizer.vocab_size());
  ShardSetWriter writers[2] = {ShardSetWriter(tmp, "train", dtype, options.shard_tokens),
                               ShardSetWriter(tmp, "val", dtype, options.shard_tokens)};
  SplitStats* stats[2] = {&r.train, &r.val};
  const int32_t eot = tokenizer.end_of_text_id();
  MYRIAD_REQUIRE(eot >= 0, kValue, "data prepare: the tokenizer names no end-of-text token to separate documents (",
                 tokenizer_kind_name(tokenizer.kind()), ": eos_token in tokenizer_config.json)");
  ProgressBar progress("data prepare", r.bytes, options.progress);

  // Segments are tokenized in parallel in batches of about 16 MiB, then appended in order.
  std::vector<Segment> pending;
  size_t pending_bytes = 0;
  uint64_t unreported = 0;  // input read since the last segment was queued
  auto flush_pending = [&] {
    std::exception_ptr error;
    const int64_t n = int64_t(pending.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) {
      try {
        if (!pending[size_t(i)].text.empty()) pending[size_t(i)].ids = tokenizer.encode(pending[size_t(i)].text);
      } catch (...) {
#pragma omp critical(myriad_prepare_error)
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    for (Segment& s : pending) {
      writers[s.split].append(s.ids);
      stats[s.split]->bytes += s.text.size();
      if (s.ends_document) {
        writers[s.split].append(std::span<const int32_t>(&eot, 1));
        ++stats[s.split]->documents;
      }
      progress.add(s.input_bytes);
    }
    pending.clear();
    pending_bytes = 0;
  };
  auto add = [&](int split, std::string_view text, bool ends_document) {
    pending.push_back({split, std::string(text), ends_document, unreported, {}});
    unreported = 0;
    pending_bytes += text.size();
    if (pending_bytes >= (size_t(16) << 20) || pending.size() >= 16384) flush_pending();
  };

  int64_t doc_index = 0;  // over all documents, for split_by document
  auto doc_split = [&]() {
    const int64_t i = doc_index++;
    return std::floor(double(i + 1) * f) > std::floor(double(i) * f) ? kVal : kTrain;
  };
  constexpr size_t kChunk = size_t(256) << 10;  // text files are tokenized in pieces of ~256 KiB, in parallel
  for (const DataFile& df : files) {
    if (df.jsonl) {
      const uint64_t cut = uint64_t(std::floor(double(df.bytes) * (1.0 - f)));
      read_jsonl_documents(
          df,
          [&](std::string_view text, uint64_t offset) {
            const int split =
                options.split_by == SplitBy::kPosition ? (f > 0 && offset >= cut ? kVal : kTrain) : doc_split();
            add(split, text, true);
          },
          &r.skipped, &r.empty_documents, [&](uint64_t n) { unreported += n; });
      continue;
    }
    if (df.bytes == 0) {
      ++r.empty_documents;
      continue;
    }
    auto add_part = [&](int split, uint64_t begin, uint64_t end) {
      if (begin >= end) return;
      read_text_chunks(df.path, begin, end, kChunk, [&](std::string_view chunk) {
        unreported += chunk.size();
        add(split, chunk, false);
      });
      add(split, {}, true);
    };
    if (options.split_by == SplitBy::kPosition) {
      const uint64_t cut = f > 0 ? position_cut(df.path, df.bytes, f) : df.bytes;
      add_part(kTrain, 0, cut);
      add_part(kVal, cut, df.bytes);
    } else {
      add_part(doc_split(), 0, df.bytes);
    }
  }
  flush_pending();
  progress.add(unreported);
  writers[kTrain].finish();
  writers[kVal].finish();
  progress.finish();
  for (int s = 0; s < 2; ++s) {
    stats[s]->tokens = writers[s].tokens();
    stats[s]->shards = writers[s].files();
  }
  const std::string skipped_note = r.skipped.count > 0 ? "; " + r.skipped.describe() : std::string();
  MYRIAD_REQUIRE(r.train.documents + r.val.documents > 0, kValue, "no documents in the ", files.size(),
                 " input file(s)", skipped_note);
  MYRIAD_REQUIRE(r.train.tokens > 0, kValue, "the train split is empty (", r.val.documents,
                 " document(s) all went to val; lower --val-fraction)", skipped_note);
  if (f > 0 && r.val.tokens == 0)
    log_warn("data prepare: the val split is empty (", r.train.documents, " document(s), --val-fraction ", f,
             ", --split-by ", options.split_by == SplitBy::kPosition ? "position" : "document", ")");

  nlohmann::ordered_json& m = r.meta;
  m["format"] = "myriad-token-shards";
  m["version"] = kShardVersion;
  m["vocab_size"] = tokenizer.vocab_size();
  m["tokenizer_hash"] = tokenizer.hash();
  if (!options.tokenizer_path.empty()) m["tokenizer_path"] = options.tokenizer_path;
  m["dtype"] = shard_dtype_name(dtype);
  m["endoftext_id"] = eot;
  m["val_fraction"] = f;
  m["split_by"] = options.split_by == SplitBy::kPosition ? "position" : "document";
  m["shard_tokens"] = options.shard_tokens;
  m["train"] = split_json(r.train);
  m["val"] = split_json(r.val);
  m["files"] = r.files;
  m["bytes"] = r.bytes;
  m["empty_documents"] = r.empty_documents;
  m["skipped_lines"] = r.skipped.count;
  m["first_skipped_line"] = r.skipped.count > 0 ? nlohmann::ordered_json{{"path", r.skipped.first_path},
                                                                         {"line", r.skipped.first_line},
                                                                         {"reason", r.skipped.first_reason}}
                                                : nlohmann::ordered_json();
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const DataFile& df : files)
    sources.push_back({{"path", df.path}, {"format", df.jsonl ? "jsonl" : "text"}, {"bytes", df.bytes}});
  m["sources"] = std::move(sources);
  write_file_atomic((fs::path(tmp) / "meta.json").string(), m.dump(2) + "\n");
  staged.commit();
  return r;
}

}  // namespace myriad
