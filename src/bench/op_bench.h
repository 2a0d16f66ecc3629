// `myriad bench ops`: the CPU kernels at training-sized shapes, each figure beside the machine's own
// ceiling measured in the same run (bench/machine_limits.h):
//   - the GEMM backends: oneDNN's and OpenBLAS's sgemm (and ops::gemm, which routes between them) side by side
//     on the shapes myriad multiplies, each against the FMA peak, and ops::gemm against the best library;
//   - compute-bound ops (matmul and its backward transposes, causal attention) in GFLOP/s against the
//     f32 FMA peak;
//   - memory-bound ops (RMSNorm, SiTU-GLU, AdamW, MoE gather / scatter-add) in GB/s against the STREAM
//     triad, counting the bytes each op necessarily moves (every input read once, every output written
//     once, accumulated gradients read and written); the count of each op is stated where it is measured.
// Memory-bound shapes are chosen so each call's working set (136 MiB to 0.5 GiB) is, like the triad's
// (192 MiB), far beyond the caches: on the 2-core development VM, 64 MiB working sets still ran partly from
// cache. Each memory-bound row times a triad pass after every op call and is judged against that.
// NOTE: ops that overwrite what they read (AdamW's p, m, v; accumulated gradients) skip the write-allocate
// read that the triad's pure-write stream pays, so they may legitimately exceed 100% of the triad.
// It is a benchmark, not a test: figures below target are reported, never fatal.
#pragma once

#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/report.h"
#include "ops/machine_limits.h"

namespace myriad::bench {

constexpr double kAttentionTarget = 0.40;    // attention fwd+bwd, fraction of the FMA peak
constexpr double kGemmVsBestTarget = 0.90;   // ops::gemm, fraction of the best library on every shape
constexpr double kMemoryBoundTarget = 0.60;  // memory-bound ops, fraction of triad

// The GEMM candidates on myriad's shapes, printed to out as a table; returns its JSON (rows, the worst ratio of
// ops::gemm to the best library, and whether that meets kGemmVsBestTarget).
nlohmann::ordered_json run_gemm_backends(const MachineLimits& limits, double budget_s, std::FILE* out);

// One projection (Kimi-Linear-48B's 2304 -> 4096) at decode, batch and prefill row counts: f32 against q8 / q4 by
// each CPU path of quant_matmul, printed as a table; returns its JSON (GFLOP/s per path and row count, and the
// prefill ratio of each quantized format to f32).
nlohmann::ordered_json run_quant_products(const MachineLimits& limits, double budget_s, std::FILE* out);

// Runs every op row; budget_s (seconds of timed repeats, all rows together) is split evenly between rows.
// on_row is called as each row completes.
std::vector<BenchRow> run_op_bench(const MachineLimits& limits, double budget_s,
                                   const std::function<void(const BenchRow&)>& on_row);

}  // namespace myriad::bench
