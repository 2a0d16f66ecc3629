// GGUF writing. See gguf_writer.h.
#include "io/gguf_writer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "io/atomic_file.h"

namespace myriad {

namespace {

// gguf_type values (gguf.h).
enum : uint32_t {
  kTypeU32 = 4,
  kTypeI32 = 5,
  kTypeF32 = 6,
  kTypeBool = 7,
  kTypeString = 8,
  kTypeArray = 9,
};

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64), as ggml itself
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint64_t align_up(uint64_t n) {
  return (n + kGgufAlignment - 1) / kGgufAlignment * kGgufAlignment;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return "f32";
    case GgmlType::kF16:
      return "f16";
    case GgmlType::kQ4_0:
      return "q4_0";
    case GgmlType::kQ8_0:
      return "q8_0";
    case GgmlType::kBF16:
      return "bf16";
  }
  return "?";
}

uint64_t ggml_row_bytes(GgmlType t, int64_t n) {
  MYRIAD_REQUIRE(n >= 0, kValue, "ggml row of ", n, " elements");
  switch (t) {
    case GgmlType::kF32:
      return uint64_t(n) * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return uint64_t(n) * 2;
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0:
      MYRIAD_REQUIRE(n % 32 == 0, kValue, "a ", ggml_type_name(t), " row of ", n,
                     " elements: rows must be a multiple of the block of 32");
      return uint64_t(n / 32) * (t == GgmlType::kQ4_0 ? 18 : 34);  // f16 scale + 16 or 32 code bytes
  }
  throw_error(ErrorKind::kValue, "unknown ggml type ", uint32_t(t));
}

void GgufWriter::add_key(const std::string& key, uint32_t value_type, std::string value_bytes) {
  MYRIAD_REQUIRE(!key.empty(), kValue, "gguf: an empty metadata key");
  MYRIAD_REQUIRE(std::find(keys_.begin(), keys_.end(), key) == keys_.end(), kValue, "gguf: metadata key '", key,
                 "' added twice");
  keys_.push_back(key);
  put_string(kv_bytes_, key);
  put<uint32_t>(kv_bytes_, value_type);
  kv_bytes_ += value_bytes;
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  std::string b;
  put(b, v);
  add_key(key, kTypeU32, b);
}

void GgufWriter::add_f32(const std::string& key, float v) {
  std::string b;
  put(b, v);
  add_key(key, kTypeF32, b);
}

void GgufWriter::add_bool(const std::string& key, bool v) {
  std::string b;
  put<uint8_t>(b, v ? 1 : 0);
  add_key(key, kTypeBool, b);
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  std::string b;
  put_string(b, v);
  add_key(key, kTypeString, b);
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::string b;
  put<uint32_t>(b, kTypeI32);
  put<uint64_t>(b, v.size());
  for (int32_t x : v) put(b, x);
  add_key(key, kTypeArray, b);
}

void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& v) {
  std::string b;
  put<uint32_t>(b, kTypeF32);
  put<uint64_t>(b, v.size());
  for (float x : v) put(b, x);
  add_key(key, kTypeArray, b);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::string b;
  put<uint32_t>(b, kTypeString);
  put<uint64_t>(b, v.size());
  for (const std::string& s : v) put_string(b, s);
  add_key(key, kTypeArray, b);
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType t,
                            std::function<std::string()> produce) {
  MYRIAD_REQUIRE(!name.empty() && name.size() < 64, kValue, "gguf: tensor name '", name,
                 "' must have 1 to 63 bytes (ggml's GGML_MAX_NAME)");
  MYRIAD_REQUIRE(ne.size() >= 1 && ne.size() <= 4, kValue, "gguf: tensor ", name, " has ", ne.size(), " dims (1 to 4)");
  for (const Tensor& x : tensors_) MYRIAD_REQUIRE(x.name != name, kValue, "gguf: tensor ", name, " added twice");
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) {
    MYRIAD_REQUIRE(ne[i] >= 1, kValue, "gguf: tensor ", name, " dim ", i, " = ", ne[i]);
    rows *= uint64_t(ne[i]);
  }
  MYRIAD_REQUIRE(ne[0] >= 1, kValue, "gguf: tensor ", name, " dim 0 = ", ne[0]);
  const uint64_t bytes = ggml_row_bytes(t, ne[0]) * rows;
  tensors_.push_back({name, std::move(ne), t, bytes, std::move(produce)});
}

uint64_t GgufWriter::write(const std::string& path) const {
  std::string head;
  head += "GGUF";
  put<uint32_t>(head, 3);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, keys_.size());
  head += kv_bytes_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(head, uint64_t(d));
    put<uint32_t>(head, uint32_t(t.type));
    put<uint64_t>(head, offset);
    offset = align_up(offset + t.bytes);
  }
  head.resize(align_up(head.size()), '\0');
  AtomicFileWriter out(path);
  out.write(head);
  const std::string zeros(kGgufAlignment, '\0');
  for (const Tensor& t : tensors_) {
    const std::string data = t.produce();
    MYRIAD_REQUIRE(data.size() == t.bytes, kValue, "gguf: tensor ", t.name, " produced ", data.size(),
                   " bytes, its type ", ggml_type_name(t.type), " and dims need ", t.bytes);
    out.write(data);
    out.write(zeros.data(), size_t(align_up(t.bytes) - t.bytes));
  }
  const uint64_t size = out.bytes_written();
  out.commit();
  return size;
}

}  // namespace myriad
