// Token shards, data sources and `myriad data prepare`. See shards.h.
#include "data/shards.h"

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

static_assert(std::endian::native == std::endian::little, "token shards are read and written little-endian in place");

namespace {

namespace fs = std::filesystem;

void put_u32(char* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}
void put_u64(char* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool is_continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

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

// ---- Shard files ----

const char* shard_dtype_name(ShardDType dtype) {
  return dtype == ShardDType::kU16 ? "u16" : "u32";
}

int shard_dtype_bytes(ShardDType dtype) {
  return dtype == ShardDType::kU16 ? 2 : 4;
}

ShardDType shard_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? ShardDType::kU16 : ShardDType::kU32;
}

std::string encode_shard_header(ShardDType dtype, uint64_t count) {
  std::string h(kShardHeaderBytes, '\0');
  std::memcpy(h.data(), kShardMagic, 8);
  put_u32(h.data() + 8, kShardVersion);
  put_u32(h.data() + 12, uint32_t(dtype));
  put_u64(h.data() + 16, count);
  put_u64(h.data() + 24, 0);
  return h;
}

ShardHeader parse_shard_header(const void* data, uint64_t file_size, const std::string& path) {
  MYRIAD_REQUIRE(file_size >= kShardHeaderBytes, kFormat, "token shard '", path, "': file is ", file_size,
                 " bytes, shorter than the ", kShardHeaderBytes, "-byte header");
  const auto* p = static_cast<const unsigned char*>(data);
  MYRIAD_REQUIRE(std::memcmp(p, kShardMagic, 8) == 0, kFormat, "token shard '", path,
                 "': bad magic (the file does not start with \"MYRTOKS\\0\"; not a myriad token shard)");
  ShardHeader h;
  h.version = get_u32(p + 8);
  MYRIAD_REQUIRE(h.version == kShardVersion, kFormat, "token shard '", path, "': version ", h.version,
                 ", this build reads version ", kShardVersion);
  const uint32_t dtype = get_u32(p + 12);
  MYRIAD_REQUIRE(dtype == 1 || dtype == 2, kFormat, "token shard '", path, "': dtype ", dtype,
                 " must be 1 (u16) or 2 (u32)");
  h.dtype = ShardDType(dtype);
  h.count = get_u64(p + 16);
  const uint64_t reserved = get_u64(p + 24);
  MYRIAD_REQUIRE(reserved == 0, kFormat, "token shard '", path, "': reserved header field is ", reserved,
                 ", must be 0");
  const uint64_t width = uint64_t(shard_dtype_bytes(h.dtype));
  const uint64_t data_bytes = file_size - kShardHeaderBytes;
  MYRIAD_REQUIRE(h.count <= data_bytes / width && data_bytes == h.count * width, kFormat, "token shard '", path,
                 "': header says ", h.count, " ", shard_dtype_name(h.dtype), " tokens (", h.count, " x ", width,
                 " bytes) but the file holds ", data_bytes, " bytes after the header",
                 data_bytes < h.count * width ? " (truncated?)" : "");
  return h;
}

std::string shard_path(const std::string& dir, const std::string& split, int64_t index) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s-%05lld.bin", split.c_str(), static_cast<long long>(index));
  return (fs::path(dir) / name).string();
}

void write_shard(const std::string& path, ShardDType dtype, std::span<const int32_t> tokens) {
  const int64_t limit = dtype == ShardDType::kU16 ? 65536 : (int64_t(1) << 32);
  AtomicFileWriter w(path);
  w.write(encode_shard_header(dtype, tokens.size()));
  constexpr size_t kChunk = size_t(1) << 16;
  std::vector<uint16_t> b16;
  std::vector<uint32_t> b32;
  for (size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, tokens.size() - begin);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = tokens[begin + i];
      MYRIAD_REQUIRE(t >= 0 && int64_t(t) < limit, kValue, "token shard '", path, "': token ", t, " at index ",
                     begin + i, " does not fit dtype ", shard_dtype_name(dtype));
    }
    if (dtype == ShardDType::kU16) {
      b16.assign(tokens.begin() + ptrdiff_t(begin), tokens.begin() + ptrdiff_t(begin + n));
      w.write(b16.data(), n * 2);
    } else {
      b32.assign(tokens.begin() + ptrdiff_t(begin), tokens.begin() + ptrdiff_t(begin + n));
      w.write(b32.data(), n * 4);
    }
  }
  w.commit();
}

struct MappedShard::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

MappedShard MappedShard::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MYRIAD_REQUIRE(fd >= 0, kIo, "cannot open token shard '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    throw_error(ErrorKind::kIo, "token shard '", path, "': ", S_ISREG(st.st_mode) ? std::strerror(err) : "not a file");
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    parse_shard_header(nullptr, size, path);  // throws the size error
  }
  void* addr = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  MYRIAD_REQUIRE(addr != MAP_FAILED, kIo, "cannot mmap token shard '", path, "' (", size,
                 " bytes): ", std::strerror(map_err));
  MappedShard s;
  s.map_ = std::make_shared<Mapping>();
  s.map_->addr = addr;
  s.map_->size = size_t(size);
  const ShardHeader h = parse_shard_header(addr, size, path);
  s.path_ = path;
  s.dtype_ = h.dtype;
  s.count_ = int64_t(h.count);
  s.tokens_ = static_cast<const unsigned char*>(addr) + kShardHeaderBytes;
  return s;
}

int64_t MappedShard::operator[](int64_t i) const {
  MYRIAD_CHECK(i >= 0 && i < count_, "token ", i, " outside ", path_, " (", count_, " tokens)");
  if (dtype_ == ShardDType::kU16) {
    uint16_t v;
    std::memcpy(&v, tokens_ + size_t(i) * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + size_t(i) * 4, 4);
  return v;
}

void MappedShard::read(int64_t begin, int64_t n, int64_t* out) const {
  MYRIAD_CHECK(begin >= 0 && n >= 0 && begin + n <= count_, "range [", begin, ", ", begin + n, ") outside ", path_,
               " (", count_, " tokens)");
  if (dtype_ == ShardDType::kU16) {
    const unsigned char* p = tokens_ + size_t(begin) * 2;
    for (int64_t j = 0; j < n; ++j) {
      uint16_t v;
      std::memcpy(&v, p + size_t(j) * 2, 2);
      out[j] = v;
    }
  } else {
    const unsigned char* p = tokens_ + size_t(begin) * 4;
    for (int64_t j = 0; j < n; ++j) {
      uint32_t v;
      std::memcpy(&v, p + size_t(j) * 4, 4);
      out[j] = v;
    }
  }
}

ShardSetWriter::ShardSetWriter(std::string dir, std::string split, ShardDType dtype, int64_t max_tokens)
    : dir_(std::move(dir)), split_(std::move(split)), dtype_(dtype), max_tokens_(max_tokens) {
  MYRIAD_REQUIRE(max_tokens_ >= 1, kValue, "shard size ", max_tokens_, " tokens: must be at least 1");
}

void ShardSetWriter::append(std::span<const int32_t> tokens) {
  while (!tokens.empty()) {
    const size_t room = size_t(max_tokens_) - buffer_.size();
    const size_t n = std::min(room, tokens.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + ptrdiff_t(n));
    tokens = tokens.subspan(n);
    tokens_ += int64_t(n);
    if (buffer_.size() == size_t(max_tokens_)) flush();
  }
}

void ShardSetWriter::flush() {
  if (buffer_.empty()) return;
  const std::string path = shard_path(dir_, split_, int64_t(files_.size()));
  write_shard(path, dtype_, buffer_);
  files_.push_back(fs::path(path).filename().string());
  buffer_.clear();
}

void ShardSetWriter::finish() {
  flush();
  buffer_.shrink_to_fit();
}

// ---- Data sources ----

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
      for (int k = 0; k < 3 && cut > 0 && is_continuation(static_cast<unsigned char>(buf[cut])); ++k) --cut;
      if (cut == 0) cut = buf.size();
    } else {
      continue;
    }
    fn(std::string_view(buf).substr(0, cut));
    buf.erase(0, cut);
  }
  if (!buf.empty()) fn(buf);
}

// ---- Preparation ----

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
  for (std::streamsize k = 0; k < in.gcount() && is_continuation(static_cast<unsigned char>(b[k])); ++k) ++cut;
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
