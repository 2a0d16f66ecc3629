// `myriad inspect PATH [--json]`: lists the tensors of a safetensors file or a checkpoint directory (name,
// dtype, shape, bytes; the shard file too when sharded) with totals, the files' metadata, and for a directory
// with a config.json the model config summary. A file or checkpoint that fails validation ends the command
// with the validation error (printed once by the CLI boundary, exit 1). A config.json that fails is reported
// the same way after the tensor listing, so the weights can still be examined. A directory with a checksums.json
// (io/checksums.h) has every listed file verified first.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checksums.h"
#include "model/config.h"

namespace {

using myriad::Checkpoint;
using nlohmann::ordered_json;

// 1234567 -> "1,234,567"
std::string grouped(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return s;
}

// 1536 -> "1.5 KiB"
std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string pad(std::string s, size_t width, bool right_align = false) {
  if (s.size() >= width) return s;
  return right_align ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

struct Row {
  std::string name, dtype, shape, bytes, file;
};

int run_inspect(const myriad::cli::Args& args) {
  MYRIAD_REQUIRE(args.positional().size() == 1, kValue,
                 "inspect needs exactly one PATH (a .safetensors file or a checkpoint directory), got ",
                 args.positional().size(), " (see myriad inspect --help)");
  const std::string path = args.positional()[0];
  const bool as_json = args.has("json");
  // A directory with a checksum manifest (every myriad checkpoint): every file it lists, verified first, so that
  // a damaged file is named before anything else reads it.
  std::error_code dir_ec;
  const bool verified = std::filesystem::is_directory(path, dir_ec) && myriad::verify_directory_checksums(path);
  const Checkpoint ck = Checkpoint::open(path);

  // Model config (directories only).
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string config_path = (fs::path(path) / "config.json").string();
  const bool has_config = fs::is_directory(path, ec) && fs::is_regular_file(config_path, ec);
  std::string config_summary;
  std::vector<std::string> config_warnings;
  std::optional<myriad::Error> config_error;
  if (has_config) {
    try {
      config_summary = myriad::model_config_summary(myriad::load_model_config(config_path, &config_warnings));
    } catch (const myriad::Error& e) {
      config_error = e;
    }
  }

  // Per-tensor facts and totals.
  uint64_t total_params = 0, total_bytes = 0;
  std::vector<Row> rows;
  ordered_json jtensors = ordered_json::array();
  for (const std::string& name : ck.names()) {
    const myriad::SafetensorsEntry& e = ck.entry(name);
    const std::string file = fs::path(ck.file_of(name).path()).filename().string();
    total_params += uint64_t(e.numel());
    total_bytes += e.bytes();
    rows.push_back({name, myriad::dtype_name(e.dtype), myriad::shape_str(e.shape), grouped(e.bytes()), file});
    ordered_json t = {{"name", name},
                      {"dtype", myriad::dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"parameters", e.numel()},
                      {"bytes", e.bytes()}};
    if (ck.sharded()) t["file"] = file;
    jtensors.push_back(std::move(t));
  }

  if (as_json) {
    ordered_json out;
    out["path"] = path;
    out["sharded"] = ck.sharded();
    out["files"] = ordered_json::array();
    for (const auto& f : ck.files())
      out["files"].push_back({{"path", f.path()},
                              {"tensors", f.entries().size()},
                              {"file_bytes", f.file_bytes()},
                              {"header_bytes", f.header_bytes()}});
    out["metadata"] = ck.metadata();
    out["checksums_verified"] = verified;
    out["tensors"] = std::move(jtensors);
    out["totals"] = {{"tensors", ck.names().size()}, {"parameters", total_params}, {"bytes", total_bytes}};
    if (has_config) {
      ordered_json c = {{"path", config_path}};
      if (config_error)
        c["error"] = config_error->what();
      else
        c["summary"] = config_summary;
      c["warnings"] = config_warnings;
      out["config"] = std::move(c);
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    if (ck.sharded()) {
      std::printf("checkpoint %s: %zu shards\n", path.c_str(), ck.files().size());
    } else {
      const auto& f = ck.files()[0];
      std::printf("%s: %s, header %s bytes\n", f.path().c_str(), human_bytes(f.file_bytes()).c_str(),
                  grouped(f.header_bytes()).c_str());
    }
    for (const auto& [k, v] : ck.metadata()) std::printf("metadata: %s = %s\n", k.c_str(), v.c_str());
    std::printf("checksums: %s\n", verified ? "every file listed in checksums.json verified (xxh3-64)"
                                            : "none (no checksums.json: not a myriad checkpoint, or an older one)");
    Row head{"name", "dtype", "shape", "bytes", "file"};
    size_t wn = head.name.size(), wd = head.dtype.size(), ws = head.shape.size(), wb = head.bytes.size();
    for (const Row& r : rows) {
      wn = std::max(wn, r.name.size());
      wd = std::max(wd, r.dtype.size());
      ws = std::max(ws, r.shape.size());
      wb = std::max(wb, r.bytes.size());
    }
    auto print_row = [&](const Row& r) {
      std::string line = pad(r.name, wn) + "  " + pad(r.dtype, wd) + "  " + pad(r.shape, ws) + "  " +
                         pad(r.bytes, wb, /*right_align=*/true);
      if (ck.sharded()) line += "  " + r.file;
      std::printf("%s\n", line.c_str());
    };
    std::printf("\n");
    print_row(head);
    for (const Row& r : rows) print_row(r);
    std::printf("\n%zu tensors, %s parameters, %s (%s bytes)\n", rows.size(), grouped(total_params).c_str(),
                human_bytes(total_bytes).c_str(), grouped(total_bytes).c_str());
    if (has_config && !config_error) std::printf("\nconfig %s:\n%s", config_path.c_str(), config_summary.c_str());
    if (!config_summary.empty() && config_summary.back() != '\n') std::printf("\n");
  }
  std::fflush(stdout);
  if (config_error) throw *config_error;  // the listing is out; now the config's one error line and exit 1
  return 0;
}

}  // namespace

MYRIAD_COMMAND("inspect", "list the tensors of a safetensors file or checkpoint directory",
               "myriad inspect PATH   (a .safetensors file, or a directory with model.safetensors[.index.json])",
               {{"json", "", "print the listing as JSON"}}, run_inspect);
