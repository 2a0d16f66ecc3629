// `myriad bench vision [--config F] [--patches N] [--layers L]`: the vision tower and projector
// (model/vision_tower.h) on one image of N patches (default 1024: a 448 x 448 image at patch 14), forward (no
// tape) and forward + backward (tape, ag::backward of sum(features)), as patches per second and GFLOP/s beside
// the f32 FMA peak measured in the same run (before and after, to show the drift). Random weights for the
// vision tensors only (the text model is not built), the config's tower with its block count cut to L
// (default 2; every block costs the same, so the ratio is the whole tower's).
// FLOPs, forward, per image of n patches: per block 2 n (3 A D + A D + 2 D I) + 4 n^2 A (scores and values);
// patch embedding 2 n 3 p^2 D; projector 2 (n / w)(w D w D + w D E) for windows of w patches. Forward +
// backward counts 3 x forward (each product's two gradient products). Target: forward + backward >=
// kVisionTarget of the FMA peak at 1024 patches (issue 14). A benchmark, not a test: the exit status stays 0.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "ops/machine_limits.h"

namespace myriad::bench {

constexpr double kVisionTarget = 0.40;  // tower forward + backward, fraction of the FMA peak

struct VisionBenchOptions {
  std::string config_path = "configs/kimi-k3-vl.json";
  int64_t patches = 1024;  // one image of sqrt(n) x sqrt(n) patches, rounded to whole merge windows
  int64_t layers = 2;      // blocks timed (0: the config's)
  double budget_s = 20.0;
};

struct VisionBenchResult {
  nlohmann::ordered_json json;
  bool target_met = false;
};

VisionBenchResult run_vision_bench(const VisionBenchOptions& opt, const MachineLimits& limits, std::FILE* out);

}  // namespace myriad::bench
