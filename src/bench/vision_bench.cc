// The vision tower benchmark (see vision_bench.h).
#include "bench/vision_bench.h"

#include <cmath>
#include <random>

#include "autograd/functions.h"
#include "core/error.h"
#include "core/timing.h"
#include "model/config.h"
#include "model/param_spec.h"
#include "model/vision_tower.h"
#include "model/weights.h"

namespace myriad::bench {

VisionBenchResult run_vision_bench(const VisionBenchOptions& opt, const MachineLimits& limits, std::FILE* out) {
  ModelConfig c = load_model_config(opt.config_path, nullptr);
  MYRIAD_REQUIRE(c.vision_config.has_value(), kValue, "bench vision: ", opt.config_path, " has no vision_config");
  VisionConfig& v = *c.vision_config;
  const int64_t all_blocks = v.vt_num_hidden_layers;
  if (opt.layers > 0) v.vt_num_hidden_layers = std::min(opt.layers, v.vt_num_hidden_layers);
  const int64_t kh = v.merge_kernel_size[0], kw = v.merge_kernel_size[1];
  // One image as square as the merge windows allow, of about opt.patches patches.
  const int64_t side = std::max<int64_t>(1, int64_t(std::lround(std::sqrt(double(opt.patches)))));
  const PatchGrid grid{std::max(kh, side / kh * kh), std::max(kw, side / kw * kw)};
  const int64_t n = grid.patches(), p = v.patch_size, D = v.vt_hidden_size, I = v.vt_intermediate_size;
  const int64_t A = v.qkv_hidden_size.value_or(D), E = *v.text_hidden_size, w = kh * kw, L = v.vt_num_hidden_layers;

  ModelWeights weights = ModelWeights::random(c, 0, [](const ParamSpec& s) {
    return s.component == Component::kVision || s.component == Component::kProjector;
  });
  std::mt19937 rng(1);
  std::normal_distribution<float> gauss;
  Tensor px = Tensor::empty({n, 3 * p * p});
  for (int64_t i = 0; i < px.numel(); ++i) px.data<float>()[i] = gauss(rng);
  const ag::Var patches(px);

  const double block =
      2.0 * double(n) * double(3 * A * D + A * D + 2 * D * I) + 4.0 * double(n) * double(n) * double(A);
  const double fwd_flops = double(L) * block + 2.0 * double(n) * double(3 * p * p * D) +
                           2.0 * double(n / w) * double(w * D * w * D + w * D * E);
  const std::vector<PatchGrid> grids = {grid};
  const Timing fwd = time_repeats(
      [&] {
        ag::NoGradGuard no_grad;
        (void)encode_images(v, weights, patches, grids);
      },
      opt.budget_s * 0.4, 2, 50);
  const Timing train = time_repeats(
      [&] {
        const ag::Var f = encode_images(v, weights, patches, grids);
        ag::backward(ag::sum(f));
        weights.zero_grad();
      },
      opt.budget_s * 0.6, 2, 50);
  const FmaPeak after = measure_fma_peak(0.5);
  const double peak = limits.peak_gflops();
  const double g_fwd = fwd_flops / fwd.best_s * 1e-9, g_train = 3.0 * fwd_flops / train.best_s * 1e-9;
  VisionBenchResult r;
  r.target_met = g_train / peak >= kVisionTarget;
  if (out) {
    std::fprintf(out,
                 "vision tower: %s, %lld of %lld blocks timed, one image of %lld x %lld = %lld patches (%lld tokens "
                 "after the merge), width %lld, attention %lld, MLP %lld, projector to %lld\n",
                 opt.config_path.c_str(), (long long)L, (long long)all_blocks, (long long)grid.h, (long long)grid.w,
                 (long long)n, (long long)(n / w), (long long)D, (long long)A, (long long)I, (long long)E);
    std::fprintf(out, "  %-18s %10s %12s %10s %8s\n", "", "best ms", "patches/s", "GFLOP/s", "peak");
    std::fprintf(out, "  %-18s %10.1f %12.0f %10.1f %7.0f%%\n", "forward", fwd.best_s * 1e3, double(n) / fwd.best_s,
                 g_fwd, 100 * g_fwd / peak);
    std::fprintf(out, "  %-18s %10.1f %12.0f %10.1f %7.0f%%   target >= %.0f%%: %s\n", "forward+backward",
                 train.best_s * 1e3, double(n) / train.best_s, g_train, 100 * g_train / peak, 100 * kVisionTarget,
                 r.target_met ? "met" : "below");
    std::fprintf(out, "  FMA peak %.1f GFLOP/s at the start, %.1f at the end (drift %+.0f%%)\n", peak, after.gflops,
                 100 * (after.gflops / peak - 1));
  }
  r.json = {{"config", opt.config_path},
            {"blocks", L},
            {"patches", n},
            {"tokens", n / w},
            {"forward_flops", fwd_flops},
            {"forward_s", fwd.best_s},
            {"forward_gflops", g_fwd},
            {"train_s", train.best_s},
            {"train_gflops", g_train},
            {"train_ratio_to_peak", g_train / peak},
            {"fma_peak_gflops_end", after.gflops},
            {"target", kVisionTarget},
            {"target_met", r.target_met}};
  return r;
}

}  // namespace myriad::bench
