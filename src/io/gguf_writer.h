// GGUF files (ggml's model format, version 3; https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): writing.
//
// Layout, all little-endian:
//   "GGUF" u32 version=3, u64 tensor_count, u64 kv_count
//   kv_count x { string key, u32 value_type, value }          string = u64 length + bytes (no terminator)
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   zero padding to general.alignment (32), then the data section: each tensor at its offset (relative to the
//   section's start, a multiple of the alignment), zero padding between tensors.
// ne is ggml's order: ne[0] is the innermost (contiguous) dimension, so a PyTorch / safetensors shape [out, in]
// is ne = {in, out}.
//
// Tensors are declared up front (the header comes first) and produced one at a time while writing, so memory
// stays at one tensor; the file is written atomically (io/atomic_file.h). Errors: kValue for a bad declaration
// (duplicate key or tensor name, a byte count that does not match the type and shape), kIo from the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace myriad {

// ggml's tensor types that myriad writes (ggml.h's enum ggml_type values).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kBF16 = 30 };
const char* ggml_type_name(GgmlType t);  // "f32", "f16", "q4_0", "q8_0", "bf16"
// Bytes of a row of n elements (n a multiple of the type's block of 32 for the quantized types; kValue otherwise).
uint64_t ggml_row_bytes(GgmlType t, int64_t n);

inline constexpr uint64_t kGgufAlignment = 32;

class GgufWriter {
 public:
  // Metadata, in the order added (keys unique).
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);

  // A tensor of type t and dims ne (ggml order, 1..4 dims); produce() returns its bytes (checked against the
  // type and dims) when the file is written.
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType t, std::function<std::string()> produce);

  size_t tensor_count() const { return tensors_.size(); }
  size_t key_count() const { return keys_.size(); }
  // Writes the file atomically. Returns the file's size in bytes.
  uint64_t write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t bytes;
    std::function<std::string()> produce;
  };
  void add_key(const std::string& key, uint32_t value_type, std::string value_bytes);
  std::vector<std::string> keys_;
  std::string kv_bytes_;
  std::vector<Tensor> tensors_;
};

}  // namespace myriad
