// `myriad bench ops`: the CPU kernels at training-sized shapes, each figure beside the machine's own
// ceiling measured in the same run (bench/machine_limits.h):
//   - compute-bound ops (matmul and its backward transposes, causal attention) in GFLOP/s against the
//     OpenBLAS sgemm ceiling;
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

#include <functional>
#include <vector>

#include "bench/report.h"
#include "ops/machine_limits.h"

namespace myriad::bench {

constexpr double kAttentionTarget = 0.40;    // attention fwd+bwd, fraction of sgemm
constexpr double kMemoryBoundTarget = 0.60;  // memory-bound ops, fraction of triad

// Runs every op row; budget_s (seconds of timed repeats, all rows together) is split evenly between rows.
// on_row is called as each row completes.
std::vector<BenchRow> run_op_bench(const MachineLimits& limits, double budget_s,
                                   const std::function<void(const BenchRow&)>& on_row);

}  // namespace myriad::bench
