// Random init: every tensor of model_param_specs (model/param_spec.h) filled per its ParamInit, in f32, and a
// writer for a complete random model directory (config.json + model.safetensors, or shards with an index).
//
// Determinism: each tensor is cut into blocks of kInitBlockElems elements; block b of tensor `name` draws from
// its own std::mt19937_64 seeded from (seed, FNV-1a-64 hash of name, b) through splitmix64. Normal samples use
// Box-Muller on the generator's raw 64-bit outputs (std::normal_distribution differs between standard
// libraries), so the values depend on seed, name and shape only: not on the order of the tensors, the number of
// threads, or the platform's standard library.
//
// Values (docs/params.md):
//   linear weights, embeddings, lm_head, experts   N(0, initializer_range)
//   router gate.weight                             N(0, router_init_std)
//   RMSNorm weights                                1
//   e_score_correction_bias                        0
//   AttnRes query projections (*_res_proj)         0: every AttnRes read starts as a uniform average
//   A_log                                          log(U(1, 16))
//   dt_bias                                        softplus^-1(dt), dt = exp(U(ln 1e-3, ln 0.1)) floored at 1e-4
//   short convs [C, 1, W]                          U(-1/sqrt(W), 1/sqrt(W)) (PyTorch's nn.Conv1d default)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/param_spec.h"

namespace myriad {

inline constexpr int64_t kInitBlockElems = int64_t(1) << 20;
inline constexpr uint64_t kInitDefaultShardBytes = uint64_t(2) << 30;  // 2 GiB
inline constexpr double kInitDefaultMaxGb = 8.0;

// One tensor, filled per spec.init (cpu, f32).
Tensor init_param(const ParamSpec& spec, const ModelConfig& c, uint64_t seed);

// Every tensor of the model, in spec order. Blocks are filled in parallel (OpenMP); the result does not depend
// on the thread count.
NamedTensors init_model_tensors(const ModelConfig& c, uint64_t seed);

// Throws kValue when the f32 model is larger than max_gb GB (10^9 bytes), naming the config, the parameter
// count, the size and the limit. Guards against initialising the flagship (11 TB) by accident.
void check_init_size(const ModelConfig& c, double max_gb);

struct InitOptions {
  uint64_t seed = 0;
  double max_gb = kInitDefaultMaxGb;
  uint64_t max_shard_bytes = kInitDefaultShardBytes;  // shard when the model is larger; 0: never shard
  bool overwrite = false;                             // replace a checkpoint already in out_dir
};

// Creates a random model in `out_dir` (created if missing) from the config at `config_path` (a config.json or
// a directory holding one): the weights through save_checkpoint (atomic, sharded above max_shard_bytes), then
// out_dir/config.json with the input's bytes unchanged (atomic). Refuses (kValue) a model above max_gb, and an
// out_dir that already holds a checkpoint unless overwrite. Returns the files written, relative to out_dir.
std::vector<std::string> write_random_model(const std::string& config_path, const std::string& out_dir,
                                            const InitOptions& opt);

}  // namespace myriad
