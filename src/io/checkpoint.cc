// Checkpoint directories: one model.safetensors, or shards plus model.safetensors.index.json. See checkpoint.h.
#include "io/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

#include "core/json_fields.h"
#include "io/atomic_file.h"
#include "io/checksums.h"

namespace myriad {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A weight_map file name must stay inside the checkpoint directory.
bool safe_relative_name(const std::string& name) {
  if (name.empty()) return false;
  const fs::path p(name);
  if (p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path, const std::string& stem) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  MYRIAD_REQUIRE(!ec && fs::exists(st), kIo, "cannot open checkpoint '", path,
                 "': ", ec ? ec.message() : "no such file or directory");

  if (fs::is_regular_file(st)) {
    c.files_.push_back(SafetensorsFile::open(path));
  } else {
    MYRIAD_REQUIRE(fs::is_directory(st), kIo, "checkpoint '", path, "' is neither a file nor a directory");
    const std::string single_name = stem + ".safetensors", index_name = stem + ".safetensors.index.json";
    const std::string single = (fs::path(path) / single_name).string();
    const std::string index = (fs::path(path) / index_name).string();
    const bool has_single = fs::exists(single, ec);
    const bool has_index = fs::exists(index, ec);
    MYRIAD_REQUIRE(!(has_single && has_index), kFormat, "checkpoint '", path, "' holds both ", single_name, " and ",
                   index_name, "; it is ambiguous which one holds the weights (remove one)");
    MYRIAD_REQUIRE(has_single || has_index, kIo, "checkpoint directory '", path, "' holds neither ", single_name,
                   " nor ", index_name);
    if (has_single) {
      c.files_.push_back(SafetensorsFile::open(single));
    } else {
      c.sharded_ = true;
      verify_checksum(index);
      const std::string text = read_file(index);
      json j;
      std::optional<JsonDuplicateKey> dup;
      try {
        j = parse_json_checking_duplicates(text, index, &dup);
      } catch (const json::exception& e) {
        throw_error(ErrorKind::kFormat, index, ": not valid JSON: ", e.what());
      }
      if (dup) {
        if (dup->depth == 2 && dup->parent == "weight_map")
          throw_error(ErrorKind::kFormat, index, ": tensor '", dup->key,
                      "' is listed twice in \"weight_map\" (a tensor must live in exactly one file)");
        throw_error(ErrorKind::kFormat, index, ": duplicate key \"", dup->key, "\"",
                    dup->parent.empty() ? std::string() : str(" inside \"", dup->parent, "\""));
      }
      MYRIAD_REQUIRE(j.is_object(), kFormat, index, ": must be a JSON object with a \"weight_map\"");
      MYRIAD_REQUIRE(j.contains("weight_map") && j["weight_map"].is_object(), kFormat, index,
                     ": \"weight_map\" (an object mapping tensor names to file names) is missing or not an object");
      const json& wm = j["weight_map"];

      // name -> file, and the distinct files in name order.
      std::map<std::string, std::string> mapped;
      std::set<std::string> file_names;
      for (const auto& [name, file] : wm.items()) {
        MYRIAD_REQUIRE(file.is_string(), kFormat, index, ": weight_map: tensor '", name,
                       "' must map to a file name (a string), got ", file.dump());
        const std::string f = file.get<std::string>();
        MYRIAD_REQUIRE(safe_relative_name(f), kFormat, index, ": weight_map: tensor '", name, "' maps to '", f,
                       "', which is not a file name inside the checkpoint directory");
        mapped[name] = f;
        file_names.insert(f);
      }
      std::map<std::string, size_t> file_slot;
      std::vector<std::string> slot_name;
      for (const std::string& f : file_names) {
        // A name some tensor maps to, for the message.
        std::string example;
        for (const auto& [n, mf] : mapped)
          if (mf == f) {
            example = n;
            break;
          }
        const std::string shard = (fs::path(path) / f).string();
        MYRIAD_REQUIRE(fs::is_regular_file(shard, ec), kIo, index, ": weight_map maps tensor '", example, "' to '", f,
                       "', but '", shard, "' does not exist or is not a file");
        file_slot[f] = c.files_.size();
        slot_name.push_back(f);
        c.files_.push_back(SafetensorsFile::open(shard));
      }
      for (const auto& [name, f] : mapped) {
        const SafetensorsFile& sf = c.files_[file_slot[f]];
        MYRIAD_REQUIRE(sf.contains(name), kFormat, index, ": weight_map maps tensor '", name, "' to '", f,
                       "', but that file does not contain it");
      }
      for (size_t slot = 0; slot < c.files_.size(); ++slot) {
        const std::string& f = slot_name[slot];
        for (const SafetensorsEntry& e : c.files_[slot].entries()) {
          auto it = mapped.find(e.name);
          MYRIAD_REQUIRE(it != mapped.end(), kFormat, index, ": tensor '", e.name, "' in '", f,
                         "' is not listed in \"weight_map\"");
          MYRIAD_REQUIRE(it->second == f, kFormat, index, ": tensor '", e.name, "' is in both '", f, "' and '",
                         it->second, "' (weight_map maps it to '", it->second, "'); a tensor must live in one file");
        }
      }
    }
  }

  for (size_t i = 0; i < c.files_.size(); ++i) {
    for (const SafetensorsEntry& e : c.files_[i].entries()) {
      c.names_.push_back(e.name);
      c.where_.emplace(e.name, i);
    }
    for (const auto& [k, v] : c.files_[i].metadata()) c.metadata_.emplace(k, v);
  }
  return c;
}

struct Checkpoint::Views {
  Checkpoint base;
  std::unordered_map<std::string, CheckpointView> by_name;
  std::unordered_map<std::string, SafetensorsEntry> entries;
};

Checkpoint Checkpoint::with_views(std::vector<CheckpointView> views,
                                  const std::map<std::string, std::string>& metadata) const {
  auto v = std::make_shared<Views>();
  v->base = *this;
  Checkpoint c;
  c.path_ = path_;
  c.sharded_ = sharded_;
  c.files_ = files_;
  c.metadata_ = metadata_;
  for (const auto& [k, val] : metadata) c.metadata_[k] = val;
  for (CheckpointView& view : views) {
    SafetensorsEntry e;
    e.name = view.name;
    e.dtype = view.dtype;
    e.shape = view.shape;
    const auto bytes = dtype_bytes(view.dtype, uint64_t(shape_numel(view.shape)));
    MYRIAD_REQUIRE(bytes.has_value(), kFormat, "checkpoint '", path_, "': view ", view.name, " ", shape_str(view.shape),
                   " ", dtype_name(view.dtype), " has no byte size");
    e.end = *bytes;
    MYRIAD_REQUIRE(v->entries.emplace(view.name, e).second, kFormat, "checkpoint '", path_, "': two views named ",
                   view.name);
    c.names_.push_back(view.name);
    c.where_.emplace(view.name, 0);
    std::string name = view.name;
    v->by_name.emplace(std::move(name), std::move(view));
  }
  c.views_ = std::move(v);
  return c;
}

const SafetensorsFile& Checkpoint::file_of(const std::string& name) const {
  MYRIAD_REQUIRE(!views_, kFormat, "checkpoint '", path_, "': tensor ", name,
                 " is read through a layout adapter and lives in no single file");
  auto it = where_.find(name);
  MYRIAD_REQUIRE(it != where_.end(), kFormat, "checkpoint '", path_, "' has no tensor named '", name, "'");
  return files_[it->second];
}

const SafetensorsEntry& Checkpoint::entry(const std::string& name) const {
  if (views_) {
    auto it = views_->entries.find(name);
    MYRIAD_REQUIRE(it != views_->entries.end(), kFormat, "checkpoint '", path_, "' has no tensor named '", name, "'");
    return it->second;
  }
  return file_of(name).entry(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  if (views_) {
    const SafetensorsEntry& e = entry(name);
    Tensor t = views_->by_name.at(name).make(views_->base);
    MYRIAD_REQUIRE(t.dtype() == e.dtype && t.shape() == e.shape, kFormat, "checkpoint '", path_, "': view ", name,
                   " made ", dtype_name(t.dtype()), " ", shape_str(t.shape()), ", declared ", dtype_name(e.dtype), " ",
                   shape_str(e.shape));
    return t;
  }
  return file_of(name).tensor(name);
}

uint64_t Checkpoint::total_bytes() const {
  if (views_) {
    uint64_t total = 0;
    for (const auto& [name, e] : views_->entries) total += e.bytes();
    return total;
  }
  uint64_t total = 0;
  for (const auto& f : files_)
    for (const auto& e : f.entries()) total += e.bytes();
  return total;
}

std::vector<std::string> save_checkpoint(const std::string& dir, const NamedTensors& tensors,
                                         const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  // Validate everything (names, devices, dtypes) before touching the disk.
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    MYRIAD_REQUIRE(t.defined(), kValue, dir, ": tensor '", name, "' is undefined");
    MYRIAD_REQUIRE(t.device() == Device::kCPU, kUnsupported, dir, ": tensor '", name, "' is on ",
                   device_name(t.device()), "; copy it to the cpu before saving");
    specs.push_back({name, t.dtype(), t.shape()});
  }
  try {
    (void)safetensors_header(specs, metadata);
  } catch (const Error& e) {
    throw Error(e.kind(), str(dir, ": ", e.what()));
  }

  // Greedy sharding in order.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].second.nbytes();
    if (max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + b > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += b;
    total += b;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create checkpoint directory '", dir, "': ", ec.message());
  const fs::path root(dir);
  auto remove_stale = [&](const char* name) {
    const fs::path p = root / name;
    if (fs::exists(p, ec)) {
      fs::remove(p, ec);
      MYRIAD_REQUIRE(!ec, kIo, "cannot remove stale '", p.string(), "': ", ec.message());
      fsync_directory(dir);
    }
  };

  std::vector<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((root / kCheckpointSingleFile).string(), tensors, metadata);
    written.push_back(kCheckpointSingleFile);
    remove_stale(kCheckpointIndexFile);
    return written;
  }

  json weight_map = json::object();
  const size_t n = shards.size();
  for (size_t s = 0; s < n; ++s) {
    const std::string name = checkpoint_shard_name("model", int64_t(s), int64_t(n));
    NamedTensors part;
    part.reserve(shards[s].size());
    for (size_t i : shards[s]) {
      part.push_back(tensors[i]);
      weight_map[tensors[i].first] = name;
    }
    save_safetensors((root / name).string(), part, metadata);
    written.push_back(name);
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic((root / kCheckpointIndexFile).string(), index.dump(2) + "\n");
  written.push_back(kCheckpointIndexFile);
  remove_stale(kCheckpointSingleFile);
  return written;
}

std::string checkpoint_shard_name(const std::string& stem, int64_t shard, int64_t shards) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05lld-of-%05lld.safetensors", static_cast<long long>(shard + 1),
                static_cast<long long>(shards));
  return stem + buf;
}

void write_checkpoint_index(const std::string& dir, const std::string& stem,
                            const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  json map = json::object();
  for (const auto& [name, file] : weight_map) map[name] = file;
  const json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", map}};
  write_file_atomic((fs::path(dir) / (stem + ".safetensors.index.json")).string(), index.dump(2) + "\n");
}

}  // namespace myriad
