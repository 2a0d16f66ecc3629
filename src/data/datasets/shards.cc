// Token shard files (data/datasets/shards.h).
#include "data/datasets/shards.h"

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

}  // namespace

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

}  // namespace myriad
