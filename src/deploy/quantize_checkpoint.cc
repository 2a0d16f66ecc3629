// Quantizing a model directory; see quantize_checkpoint.h for the rules and the output layout.
#include "deploy/quantize_checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "infer/weight_layout.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/run_layout.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/param_spec.h"

namespace fs = std::filesystem;

namespace myriad {

namespace {

using ojson = nlohmann::ordered_json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Copies the directory tree `from` into `to` (regular files and directories), fsync'ing every file and directory.
void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  MYRIAD_REQUIRE(!ec, kIo, "cannot create ", to.string(), ": ", ec.message());
  for (const auto& e : fs::directory_iterator(from)) {
    const fs::path dst = to / e.path().filename();
    if (e.is_directory()) {
      copy_tree(e.path(), dst);
    } else if (e.is_regular_file()) {
      fs::copy_file(e.path(), dst, fs::copy_options::overwrite_existing, ec);
      MYRIAD_REQUIRE(!ec, kIo, "cannot copy ", e.path().string(), " to ", dst.string(), ": ", ec.message());
      fsync_path(dst.string());
    }
  }
  fsync_directory(to.string());
}

// Sort key of a kept tensor: 8-, 4-, 2-byte dtypes first (0, 1, 2), the quantized pairs after (3), 1-byte last (4).
int order_class(DType d) {
  switch (dtype_block_bytes(d)) {
    case 8:
      return 0;
    case 4:
      return 1;
    case 2:
      return 2;
    default:
      return 4;
  }
}

}  // namespace

double QuantizeReport::quantized_bits_per_weight() const {
  return weights_quantized > 0 ? 8.0 * double(quantized_bytes_after) / double(weights_quantized) : 0.0;
}

double QuantizeReport::bits_per_parameter() const {
  return parameters > 0 ? 8.0 * double(bytes_after) / double(parameters) : 0.0;
}

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, QuantType type,
                                   bool only_experts, bool force) {
  MYRIAD_REQUIRE(!in_dir.empty(), kValue, "quantize needs an input model directory (--in DIR)");
  MYRIAD_REQUIRE(!out_dir.empty(), kValue, "quantize needs an output directory (--out DIR)");
  QuantizeReport r;
  r.type = type;
  r.only_experts = only_experts;

  // The output first: refuse before doing any work.
  std::error_code ec;
  const fs::path out_path = fs::path(out_dir).lexically_normal();
  const std::string out = out_path.has_filename() ? out_path.string() : out_path.parent_path().string();
  r.out_dir = out;
  if (fs::exists(fs::symlink_status(out, ec))) {
    MYRIAD_REQUIRE(fs::is_directory(out, ec), kIo, "output '", out, "' exists and is not a directory");
    MYRIAD_REQUIRE(force || directory_is_empty(out), kIo, "output directory '", out,
                   "' exists and is not empty (pass --force to replace it)");
  }
  MYRIAD_REQUIRE(fs::is_directory(in_dir, ec), kIo, "input model '", in_dir, "' is not a directory");
  MYRIAD_REQUIRE(fs::weakly_canonical(out, ec) != fs::weakly_canonical(in_dir, ec), kValue, "--out ", out,
                 " is the input model's directory; choose another");

  // The input: a model directory, or a training run's latest checkpoint (as generate and prune take); its config,
  // weights; not already quantized.
  const std::string model_dir = model_or_latest_checkpoint(in_dir);
  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  const std::string config_text = read_file(config_path);
  const ModelConfig mc = load_model_config(config_path, nullptr);
  const Checkpoint ck = open_model_checkpoint(model_dir, mc);
  if (auto m = ck.metadata().find(kQuantMetadataKey); m != ck.metadata().end())
    throw_error(ErrorKind::kValue, ck.path(), " is already quantized (metadata \"", kQuantMetadataKey, "\" = \"",
                m->second, "\"); quantize the original checkpoint instead");
  for (const std::string& name : ck.names())
    MYRIAD_REQUIRE(!ends_with(name, kQWeightSuffix) && !ends_with(name, kQScaleSuffix), kValue, ck.path(), ": tensor ",
                   name, " is already quantized; quantize the original checkpoint instead");
  std::unordered_map<std::string, ParamSpec> specs;
  for (ParamSpec& s : model_param_specs(mc)) specs.emplace(s.name, std::move(s));

  // What happens to each tensor, and the output's tensor list.
  struct Item {
    std::string name;  // input tensor
    bool quantize = false;
    int cls = 0;  // order class
  };
  std::vector<Item> items;
  for (const std::string& name : ck.names()) {
    Item it{name, false, 0};
    const SafetensorsEntry& e = ck.entry(name);
    r.parameters += e.numel();
    r.bytes_before += e.bytes();
    auto s = specs.find(name);
    if (s == specs.end()) {
      ++r.kept_unknown;
    } else {
      const ParamSpec& spec = s->second;
      MYRIAD_REQUIRE(e.shape == spec.shape, kFormat, ck.path(), ": tensor ", name, " is ", shape_str(e.shape),
                     ", the config (", config_path, ") needs ", shape_str(spec.shape));
      const Component c = spec.component;
      const bool linear = is_quantizable_linear(spec);  // 2-D ".weight", not embeddings / router / norm / AttnRes
      if (linear && (!only_experts || c == Component::kRoutedExperts)) {
        if (spec.shape[1] % kQuantGroup == 0) {
          MYRIAD_REQUIRE(e.dtype == DType::kF32 || e.dtype == DType::kBF16 || e.dtype == DType::kF16, kFormat,
                         ck.path(), ": tensor ", name, " has dtype ", dtype_name(e.dtype),
                         "; only F32, BF16 and F16 weights can be quantized");
          it.quantize = true;
        } else {
          ++r.kept_indivisible;
          r.indivisible_names.push_back(name);
        }
      }
    }
    it.cls = it.quantize ? 3 : order_class(e.dtype);
    if (it.quantize) {
      ++r.tensors_quantized;
      r.weights_quantized += e.numel();
      r.quantized_bytes_before += e.bytes();
    } else {
      ++r.tensors_kept;
    }
    items.push_back(std::move(it));
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cls < b.cls; });

  std::vector<TensorSpec> out_specs;
  struct Source {
    size_t item;
    int part;  // 0: the tensor itself; 1: qweight; 2: qscale
  };
  std::vector<Source> sources;
  const bool q8 = type == QuantType::kQ8;
  for (size_t i = 0; i < items.size(); ++i) {
    const SafetensorsEntry& e = ck.entry(items[i].name);
    if (!items[i].quantize) {
      out_specs.push_back({items[i].name, e.dtype, e.shape});
      sources.push_back({i, 0});
      continue;
    }
    const int64_t rows = e.shape[0], cols = e.shape[1];
    out_specs.push_back({items[i].name + kQWeightSuffix, DType::kU8, {rows, q8 ? cols : cols / 2}});
    sources.push_back({i, 1});
    out_specs.push_back({items[i].name + kQScaleSuffix,
                         type == QuantType::kMxfp4 ? DType::kU8 : DType::kF16,
                         {rows, cols / kQuantGroup}});
    sources.push_back({i, 2});
  }
  for (const TensorSpec& s : out_specs) r.bytes_after += *dtype_bytes(s.dtype, uint64_t(shape_numel(s.shape)));
  r.quantized_bytes_after = r.bytes_after;
  for (const Item& it : items)
    if (!it.quantize) r.quantized_bytes_after -= ck.entry(it.name).bytes();

  // config.json with the quantization record.
  ojson config;
  try {
    config = ojson::parse(config_text);
  } catch (const ojson::exception& e) {
    throw_error(ErrorKind::kFormat, config_path, ": not valid JSON: ", e.what());
  }
  if (config.contains("text_config") && config["text_config"].is_object())
    config["text_config"].erase("quantization_config");
  config["quantization_config"] = {{"quant_method", "myriad"},
                                   {"type", quant_type_name(type)},
                                   {"group_size", kQuantGroup},
                                   {"only", only_experts ? "experts" : "all"}};
  const std::string new_config_text = config.dump(2) + "\n";

  // Write into a temporary directory beside the output (io/atomic_file.h).
  StagedDirectory tmp(out);

  write_file_atomic((fs::path(tmp.path()) / "config.json").string(), new_config_text);
  r.files.push_back("config.json");

  std::map<std::string, std::string> meta = ck.metadata();
  meta.emplace("format", "pt");
  meta[kQuantMetadataKey] = quant_type_name(type);
  Tensor pending_scales;  // the qscale of the matrix whose qweight was just written
  const std::string weights_path = (fs::path(tmp.path()) / kCheckpointSingleFile).string();
  save_safetensors(
      weights_path, out_specs,
      [&](size_t i) -> Tensor {
        const Source& s = sources[i];
        const std::string& name = items[s.item].name;
        if (s.part == 0) return ck.tensor(name);
        if (s.part == 2) return std::move(pending_scales);
        QuantMatrix q;
        try {
          q = quantize(ck.tensor(name), type);
        } catch (const Error& e) {
          throw Error(e.kind(), str(ck.path(), ": tensor ", name, ": ", e.what()));
        }
        pending_scales = q.scales;
        return q.codes;
      },
      meta);
  r.files.push_back(kCheckpointSingleFile);

  fs::path tok_in = fs::path(model_dir) / "tokenizer";  // the checkpoint's, else the run's
  if (!fs::is_directory(tok_in, ec)) tok_in = fs::path(in_dir) / "tokenizer";
  if (fs::is_directory(tok_in, ec)) {
    copy_tree(tok_in, fs::path(tmp.path()) / "tokenizer");
    r.files.push_back("tokenizer/");
  }

  // The result must load: every quantized weight through load_quant_matrix, with the config's shape.
  {
    const Checkpoint written = Checkpoint::open(tmp.path());
    for (const Item& it : items) {
      if (!it.quantize) continue;
      const std::optional<QuantMatrix> q = load_quant_matrix(written, it.name);
      const Shape& want = ck.shape(it.name);
      MYRIAD_CHECK(q && q->rows == want[0] && q->cols == want[1], "quantized ", it.name, " does not read back");
    }
  }
  tmp.commit();
  return r;
}

}  // namespace myriad
