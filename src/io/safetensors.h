// safetensors files (https://github.com/huggingface/safetensors): reading with full validation, and writing.
//
// Layout: u64 little-endian N, then N bytes of JSON header, then the data section. The header is an object
//   { "__metadata__": {"k": "v", ...},                          (optional; string -> string)
//     "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ... }
// with offsets relative to the start of the data section. The byte ranges must tile the data section exactly:
// no gaps, no overlaps, no trailing bytes. Shapes [] (a scalar) and [2, 0] (empty) are legal.
//
// Reading mmaps the file and validates it completely before any tensor is handed out; every violation throws
// one myriad::Error (kFormat; kIo when the file cannot be opened or mapped) whose message names the file, the
// tensor where there is one, and the rule. Tensors are zero-copy views into the mapping (Tensor::from_blob; the
// mapping stays alive as long as any tensor or SafetensorsFile refers to it).
//   NOTE: the mapping is private and writable (copy-on-write, MAP_NORESERVE): writing into a loaded tensor
//   changes this process's copy only, never the file. The file must not be truncated by someone else while
//   mapped (SIGBUS); myriad's own writers replace files by rename, which leaves an open mapping intact.
//   NOTE: the format has no alignment rule. A tensor whose data is not aligned to its element size (possible
//   when a writer puts a U8 tensor of odd length before an F32 one) is copied into aligned memory instead of
//   being viewed, so that kernels never read misaligned floats. Files written by the reference Python writer
//   are always aligned (it orders tensors by decreasing alignment), so this is the rare path.
//
// Dtypes: F32 BF16 F16 I32 I64 U8 I8 F8_E8M0 (the last two as stored by compressed-tensors MXFP4 checkpoints).
// Others (BOOL, F64, F8_E4M3, ...) are reported as unknown.
// Unknown keys inside a tensor entry are ignored, as the reference reader does.
//
// Writing: tensors in the order given, header padded with spaces to a multiple of 8 bytes (as the reference
// writer does), file written atomically (io/atomic_file.h). Non-contiguous tensors are written contiguous.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace myriad {

// Header limit of the reference implementation (100 MB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// One tensor entry of a header. begin/end are byte offsets relative to the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
  int64_t numel() const;
};

// An open, validated safetensors file. Cheap to copy (the mapping is shared).
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  // Opens, maps and validates `path`. Throws kIo (cannot open/map) or kFormat (any rule broken).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  // Entries in data order (by begin offset).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  // Throws kFormat naming the file when there is no such tensor.
  const SafetensorsEntry& entry(const std::string& name) const;
  // Zero-copy view into the mapping (a copy when misaligned; see the NOTE above). Throws like entry().
  Tensor tensor(const std::string& name) const;

  uint64_t file_bytes() const;
  uint64_t header_bytes() const { return header_bytes_; }  // N, the JSON header's length
  // The whole mapped file; for tests and diagnostics.
  const void* mapping_data() const;
  size_t mapping_size() const { return size_t(file_bytes()); }

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  uint64_t header_bytes_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (in this order) and `metadata` to `path`, atomically. Throws kValue on a duplicate or
// reserved name ("__metadata__") or an undefined tensor, kUnsupported on a non-cpu tensor or a dtype the
// format spelling does not cover (block-quantized), kIo on write failures.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Streaming form, for when the tensors should not all be in memory at once (conversion of a large checkpoint):
// `specs` declares name, dtype and shape of each tensor up front (the header comes first in the file);
// produce(i) is then called once per tensor, in order, and must return a cpu tensor of exactly specs[i]'s
// dtype and shape (checked). Each produced tensor is released after it is written.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};
void save_safetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                      const std::function<Tensor(size_t)>& produce,
                      const std::map<std::string, std::string>& metadata = {});

// The header bytes (JSON padded with spaces to a multiple of 8) the writer would put after the u64 length, for
// tensors laid out back to back in the given order. Validates like save_safetensors.
std::string safetensors_header(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata);

// JSON parsing that notices the first key repeated within one object (nlohmann keeps the last duplicate
// silently). Shared by the safetensors header and the checkpoint index. Throws nlohmann::json::exception on
// syntax errors; *dup is set (and the parse completes) on a duplicate. depth 1 is the top-level object.
// Nesting deeper than kMaxJsonNesting is refused first as a kFormat error naming `source`.
struct JsonDuplicateKey {
  std::string key;
  std::string parent;  // key under which the object holding the duplicate sits; empty at the top level
  int depth = 0;
};
nlohmann::json parse_json_checking_duplicates(std::string_view text, const std::string& source,
                                              std::optional<JsonDuplicateKey>* dup);

}  // namespace myriad
