// The flags of the training commands that run under mpirun (`myriad train`, `myriad sft`; `myriad grpo` reads the
// layout alone): the layout (--dp/--ep/--sp, --zero1), and the line that reports where a parallel run spent its
// time.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "dist/parallel_dims.h"
#include "train/trainer.h"
#include "train/training_ranks.h"

namespace myriad::cli {

// `options` with the layout flags appended.
inline std::vector<OptionSpec> with_parallel_options(std::vector<OptionSpec> options) {
  options.push_back({"dp", "N", "data-parallel ranks (under mpirun; dp x ep x sp = the number of ranks)"});
  options.push_back({"ep", "N", "expert-parallel ranks: each holds num_experts / N routed experts"});
  options.push_back({"sp", "N", "sequence-parallel ranks: each sequence split into N shards run side by side"});
  options.push_back({"zero1", "", "ZeRO-1: each rank keeps the optimizer state of its share of the tensors"});
  options.push_back({"grad-sync", "auto|overlap|after",
                     "the gradient all-reduce layer by layer during the backward, or after it (the same sums); "
                     "auto: after on CPU ranks (overlap where the communicator's buffers are on a GPU)"});
  return options;
}

// --dp/--ep/--sp (each 1 when absent).
inline ParallelDims parallel_dims(const Args& args) {
  ParallelDims d;
  d.dp = int(args.get_int("dp", 1, 1, 1 << 20));
  d.ep = int(args.get_int("ep", 1, 1, 1 << 20));
  d.sp = int(args.get_int("sp", 1, 1, 1 << 20));
  return d;
}

// The layout flags of with_parallel_options (--grad-sync auto: unset).
inline ParallelTraining parallel_training(const Args& args) {
  ParallelTraining p;
  p.dims = parallel_dims(args);
  p.zero1 = args.has("zero1");
  const std::string mode = args.get_choice("grad-sync", "auto", {"auto", "overlap", "after"});
  if (mode != "auto") p.overlap_grad_sync = mode == "overlap";
  return p;
}

inline void print_parallel_summary(const ParallelDims& dims, const TrainSummary& s) {
  if (!dims.distributed()) return;
  const double step_s = s.train_time_s > 1e-9 ? s.train_time_s : 1e-9;
  std::printf(
      "parallel: %s; of %.2f s in steps, waiting for the gradient all-reduce %.2f s (%.1f%%; %.2f s more inside "
      "the backward, overlapped), expert all-to-all %.2f s (%.1f%%)\n",
      dims.str().c_str(), s.train_time_s, s.grad_sync_s, 100.0 * s.grad_sync_s / step_s, s.grad_sync_overlapped_s,
      s.expert_exchange_s, 100.0 * s.expert_exchange_s / step_s);
}

}  // namespace myriad::cli
