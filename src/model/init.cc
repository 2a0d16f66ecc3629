// Random init (see init.h): per-block seeded mt19937_64 streams, filled in parallel, written atomically.
#include "model/init.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/json_fields.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "model/accounting.h"

namespace myriad {

namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t block_seed(uint64_t seed, uint64_t name_hash, int64_t block) {
  return splitmix64(splitmix64(splitmix64(seed) ^ name_hash) ^ uint64_t(block));
}

// [0, 1) from the top 53 bits.
double uniform01(std::mt19937_64& rng) {
  return double(rng() >> 11) * 0x1.0p-53;
}

// Fills out[0, n) with draws for `init`, from one generator. Normal draws come in Box-Muller pairs.
void fill_block(float* out, int64_t n, ParamInit init, double std_dev, double conv_bound, std::mt19937_64& rng) {
  switch (init) {
    case ParamInit::kNormal:
    case ParamInit::kRouterNormal:
      for (int64_t i = 0; i < n; i += 2) {
        const double u1 = 1.0 - uniform01(rng);  // (0, 1]: log is finite
        const double u2 = uniform01(rng);
        const double r = std::sqrt(-2.0 * std::log(u1)) * std_dev;
        const double t = 2.0 * M_PI * u2;
        out[i] = float(r * std::cos(t));
        if (i + 1 < n) out[i + 1] = float(r * std::sin(t));
      }
      break;
    case ParamInit::kConv:
      for (int64_t i = 0; i < n; ++i) out[i] = float((2.0 * uniform01(rng) - 1.0) * conv_bound);
      break;
    case ParamInit::kOnes:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      break;
    case ParamInit::kZeros:
      for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
      break;
    case ParamInit::kALog:
      for (int64_t i = 0; i < n; ++i) out[i] = float(std::log(1.0 + 15.0 * uniform01(rng)));
      break;
    case ParamInit::kDtBias: {
      // NOTE: FLA's KDA / Mamba custom: dt log-uniform in [dt_min, dt_max] = [1e-3, 0.1], floored at 1e-4,
      // stored as its inverse softplus (dt + log(-expm1(-dt))), so softplus(dt_bias) = dt.
      const double lo = std::log(1e-3), hi = std::log(0.1);
      for (int64_t i = 0; i < n; ++i) {
        const double dt = std::max(std::exp(lo + (hi - lo) * uniform01(rng)), 1e-4);
        out[i] = float(dt + std::log(-std::expm1(-dt)));
      }
      break;
    }
  }
}

double init_std(const ParamSpec& s, const ModelConfig& c) {
  return s.init == ParamInit::kRouterNormal ? c.router_init_std : c.initializer_range;
}

double conv_bound(const ParamSpec& s) {
  return s.init == ParamInit::kConv ? 1.0 / std::sqrt(double(s.shape.back())) : 0.0;
}

void fill_param_block(const ParamSpec& s, const ModelConfig& c, uint64_t seed, uint64_t name_hash, float* data,
                      int64_t block) {
  const int64_t n = s.numel();
  const int64_t begin = block * kInitBlockElems, len = std::min(kInitBlockElems, n - begin);
  std::mt19937_64 rng(block_seed(seed, name_hash, block));
  fill_block(data + begin, len, s.init, init_std(s, c), conv_bound(s), rng);
}

}  // namespace

Tensor init_param(const ParamSpec& spec, const ModelConfig& c, uint64_t seed) {
  MYRIAD_CHECK(spec.dtype == DType::kF32, spec.name, " has dtype ", dtype_name(spec.dtype));
  Tensor t = Tensor::empty(spec.shape, DType::kF32);
  const int64_t n = spec.numel();
  const uint64_t h = fnv1a64(spec.name);
  for (int64_t b = 0; b * kInitBlockElems < n; ++b) fill_param_block(spec, c, seed, h, t.data<float>(), b);
  return t;
}

NamedTensors init_model_tensors(const ModelConfig& c, uint64_t seed) {
  const std::vector<ParamSpec> specs = model_param_specs(c);
  NamedTensors out;
  out.reserve(specs.size());
  struct Work {
    size_t spec;
    int64_t block;
  };
  std::vector<Work> work;
  std::vector<uint64_t> hashes(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    MYRIAD_CHECK(specs[i].dtype == DType::kF32, specs[i].name, " has dtype ", dtype_name(specs[i].dtype));
    out.emplace_back(specs[i].name, Tensor::empty(specs[i].shape, DType::kF32));
    hashes[i] = fnv1a64(specs[i].name);
    for (int64_t b = 0; b * kInitBlockElems < specs[i].numel(); ++b) work.push_back({i, b});
  }
  const int64_t nw = int64_t(work.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t w = 0; w < nw; ++w) {
    const Work& wk = work[size_t(w)];
    fill_param_block(specs[wk.spec], c, seed, hashes[wk.spec], out[wk.spec].second.data<float>(), wk.block);
  }
  return out;
}

void check_init_size(const ModelConfig& c, double max_gb) {
  const ModelAccounting a = account_model(c);
  const double gb = double(a.total_params) * 4.0 / 1e9;
  if (gb <= max_gb) return;
  std::string count = std::to_string(a.total_params);
  for (int i = int(count.size()) - 3; i > 0; i -= 3) count.insert(size_t(i), ",");
  char size[64];
  std::snprintf(size, sizeof(size), "%.1f", gb);
  throw_error(ErrorKind::kValue, "config ", c.source, ": the model has ", count, " parameters, ", size,
              " GB in f32, above the init limit of ", max_gb, " GB (--max-gb)");
}

std::vector<std::string> write_random_model(const std::string& config_path, const std::string& out_dir,
                                            const InitOptions& opt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path cfg(config_path);
  if (fs::is_directory(cfg, ec)) cfg /= "config.json";
  const std::string bytes = read_file(cfg.string());
  const nlohmann::json j = parse_json_document(bytes, cfg.string(), ErrorKind::kFormat);
  const ModelConfig c = parse_model_config(j, cfg.string(), nullptr);
  check_init_size(c, opt.max_gb);

  const fs::path out(out_dir);
  if (!opt.overwrite) {
    for (const char* f : {kCheckpointSingleFile, kCheckpointIndexFile})
      MYRIAD_REQUIRE(!fs::exists(out / f, ec), kValue, "init: ", (out / f).string(),
                     " already exists; refusing to overwrite a checkpoint (use --force)");
  }
  const NamedTensors tensors = init_model_tensors(c, opt.seed);
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"myriad_init_seed", std::to_string(opt.seed)}};
  std::vector<std::string> files = save_checkpoint(out_dir, tensors, metadata, opt.max_shard_bytes);
  write_file_atomic((out / "config.json").string(), bytes);
  files.push_back("config.json");
  return files;
}

}  // namespace myriad
