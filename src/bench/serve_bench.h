// `myriad bench serve`: the serving path (serve/inference_model.h) on the CPU, each figure beside this machine's
// own ceilings measured in the same run (bench/machine_limits.h):
//   1. prefill: one 512-token prompt into a fresh sequence (chunkwise KDA, batched absorbed MLA), tokens/s and
//      GFLOP/s against the f32 FMA peak. FLOPs per token: 2 x activated non-embedding parameters (model/accounting.h)
//      plus a third of the training attention terms (forward only) at T = 512.
//   2. decode at batch 1, 4 and 16 (every sequence holding a 64-token prompt), tokens/s, for f32 and the
//      in-memory quantized forms q8 and q4 (DecodeWeights::quantized: what `myriad quantize` stores). At batch 1
//      the achieved memory bandwidth: bytes one token reads (activated weights as stored:
//      InferenceModel::active_weight_bytes, plus the MLA cache rows and the KDA states read and written) over
//      the time per token, against a STREAM triad timed interleaved with it.
//   3. context: f32 decode time per token with 1K and with 32K tokens of context, for each latent cache dtype
//      (f32, bf16, q8). The long cache is filled with
//      random rows instead of a 32K prefill (a decode step's cost does not depend on the cached values), the
//      KDA states with random values; max_position_embeddings is raised for the run when the config's is lower.
//   4. prefix reuse: time to first token (the serving engine, one prefill and one token) of a 1024 + 64-token
//      prompt, on an engine that has not seen it, and after another prompt with the same 1024-token prefix.
// The model: --model DIR (plain checkpoint; quantized forms are made from it) or --config F (random init, seed 0).
// A benchmark, not a test: figures below target print "below"; the exit status stays 0.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "ops/machine_limits.h"

namespace myriad::bench {

inline constexpr double kDecodeF32BandwidthTarget = 0.85;  // batch-1 f32 decode, of the triad
inline constexpr double kDecodeQ8BandwidthTarget = 0.75;   // batch-1 q8 and q4 decode, of the triad
// (and q8 / q4 prefill at least as fast as f32's: a ratio of 1, no constant)
inline constexpr double kPrefillTarget = 0.60;      // prefill, of the FMA peak
inline constexpr double kBatchScalingTarget = 6.0;  // batch-16 decode tokens/s over batch-1
inline constexpr double kLongContextTarget = 1.5;   // decode at 32K over 1K, at most

struct ServeBenchOptions {
  std::string model_dir;    // or
  std::string config_path;  // random init
  double seconds = 30;      // timed repeats, all rows together
  int64_t prompt_tokens = 512;
  int64_t long_context = 32768;
  int64_t prefix_tokens = 1024;  // the shared prefix of the prefix-reuse rows
  std::vector<std::string> formats = {"f32", "q8", "q4"};
};

struct ServeBenchRow {
  std::string format;
  double prefill_tokens_s = 0, prefill_gflops = 0;
  double decode_tokens_s[3] = {0, 0, 0};  // batch 1, 4, 16
  double bytes_per_token = 0, bandwidth_gbs = 0, triad_gbs = 0;
  // Batch-1 decode broken into phases (core/phase_profile.h): seconds per token each, and the whole forward's.
  std::vector<std::pair<std::string, double>> decode_phases;
  double decode_step_s = 0;
};

struct ServeBenchResult {
  std::vector<ServeBenchRow> rows;
  double peak_gflops = 0;  // f32 FMA peak of the run
  struct ContextRow {
    DType cache;  // of the MLA latent cache: kF32, kBF16, kQ8_0
    double ms_1k = 0, ms_long = 0;
  };
  std::vector<ContextRow> context;  // f32 weights, per latent cache dtype
  double ttft_cold_ms = 0, ttft_warm_ms = 0;
  int targets_met = 0, targets = 0;
};

ServeBenchResult run_serve_bench(const ServeBenchOptions& opt, const MachineLimits& limits, FILE* out);

}  // namespace myriad::bench
