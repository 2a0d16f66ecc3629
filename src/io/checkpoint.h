// Model checkpoints in the Hugging Face layout (docs/design.md §5): a directory holding either one
// `model.safetensors`, or shards listed by `model.safetensors.index.json`:
//   {"metadata": {"total_size": 123}, "weight_map": {"<tensor name>": "model-00001-of-00002.safetensors", ...}}
//
// Opening validates the whole checkpoint before any tensor is used: the index is a JSON object whose
// "weight_map" maps each name once (duplicate keys are reported) to a file name inside the directory (no
// absolute paths, no ".."); every mapped file opens and validates as safetensors (kIo if it cannot be opened);
// every tensor is in the file it is mapped to; and no tensor sits in two files or in a file without being
// mapped there. Errors are myriad::Error (kFormat, or kIo), naming the index or shard file, the tensor and the
// rule. The index's "metadata" (total_size) is informational and not checked. A directory holding both
// model.safetensors and the index is ambiguous and rejected.
//
// Writing shards tensors (in the given order) by a maximum byte size, writes each shard atomically and the
// index last (also atomically), so an index never names a shard that is not complete on disk.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/safetensors.h"

namespace myriad {

inline constexpr const char* kCheckpointSingleFile = "model.safetensors";
inline constexpr const char* kCheckpointIndexFile = "model.safetensors.index.json";

class Checkpoint;

// A tensor presented under a name of its own, made from the stored tensors without copying (a rename, a reshape,
// a slice, the same bytes read as another dtype of the same size): how checkpoints in other projects' layouts are
// read under myriad's names (model/weight_layout.h). make(base) must return exactly dtype and shape (checked).
struct CheckpointView {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::function<Tensor(const Checkpoint& base)> make;
};

class Checkpoint {
 public:
  Checkpoint() = default;
  // `path`: a checkpoint directory, or a single .safetensors file (a checkpoint of one file). stem names the
  // files looked for in a directory: "model" (model.safetensors or model.safetensors.index.json), or e.g.
  // "optimizer" for a training checkpoint's optimizer state, which follows the same layout.
  static Checkpoint open(const std::string& path, const std::string& stem = "model");

  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }  // opened through an index
  // Tensor names: shard by shard (shards in file-name order), each shard in data order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  // Each throws kFormat naming the checkpoint when there is no such tensor.
  Tensor tensor(const std::string& name) const;  // zero-copy view into its shard's mapping
  const SafetensorsEntry& entry(const std::string& name) const;
  DType dtype(const std::string& name) const { return entry(name).dtype; }
  const Shape& shape(const std::string& name) const { return entry(name).shape; }
  const SafetensorsFile& file_of(const std::string& name) const;

  const std::vector<SafetensorsFile>& files() const { return files_; }
  // The shards' "__metadata__" merged (a key in several shards keeps the first shard's value).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t total_bytes() const;  // sum of the tensors' data bytes

  // This checkpoint seen through `views` (names unique): names() are the views' in the order given, tensor(name)
  // is make(*this) (checked against the declared dtype and shape), entry(name) describes it (data_offsets from 0),
  // file_of(name) throws kFormat (a view lives in no one file), files() and path() are this checkpoint's, and
  // metadata() is this checkpoint's plus `metadata` (which wins). Views of a view see the viewed names.
  Checkpoint with_views(std::vector<CheckpointView> views, const std::map<std::string, std::string>& metadata) const;
  bool is_view() const { return views_ != nullptr; }

 private:
  struct Views;
  std::shared_ptr<const Views> views_;
  std::string path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> where_;  // name -> index into files_
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` into directory `dir` (created if missing). max_shard_bytes == 0, or everything fitting in one
// shard: a single model.safetensors. Otherwise shards model-0000i-of-0000n.safetensors, each holding tensors
// in order until the next would push it past max_shard_bytes (a tensor larger than the limit gets a shard of
// its own), plus model.safetensors.index.json. `metadata` goes into every shard's __metadata__. A stale
// model.safetensors or index from an earlier save with the other layout is removed after the new one is
// complete, so the directory is never ambiguous. Returns the files written (names relative to dir), index last.
// "model-00002-of-00004.safetensors" for shard 1 of 4 (0-based shard, the file names count from 1).
std::string checkpoint_shard_name(const std::string& stem, int64_t shard, int64_t shards);

// Writes <stem>.safetensors.index.json into dir (atomically): weight_map maps each tensor to its shard file.
// For shards written by several processes; the caller writes it after every shard is complete on disk.
void write_checkpoint_index(const std::string& dir, const std::string& stem,
                            const std::map<std::string, std::string>& weight_map, uint64_t total_size);

std::vector<std::string> save_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                         const std::map<std::string, std::string>& metadata = {},
                                         uint64_t max_shard_bytes = 0);

}  // namespace myriad
