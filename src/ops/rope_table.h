// Rotary tables: inverse frequencies (standard or YaRN-scaled) and the cos/sin tables the RoPE kernels read.
// YaRN (Peng et al. 2023), as configured by HF `rope_scaling: {type: "yarn", factor, original_max_position_embeddings,
// beta_fast, beta_slow, mscale, mscale_all_dim}`:
//   - dims whose wavelength is short relative to the original context (rotations >= beta_fast over it) keep
//     their frequency (extrapolation); long ones (< beta_slow rotations) are divided by `factor`
//     (interpolation); a linear ramp blends the two in between;
//   - cos/sin are multiplied by mscale(factor, mscale) / mscale(factor, mscale_all_dim), with
//     mscale(s, m) = 0.1 m ln(s) + 1 for s > 1 (else 1); the attention softmax scale is multiplied by
//     mscale(factor, mscale_all_dim)^2 (returned as softmax_scale_factor).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace myriad {

struct YarnParams {
  double factor = 1.0;
  int64_t original_max_position = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

double yarn_mscale(double factor, double mscale);
std::vector<double> rope_inv_freq(int64_t rot, double theta, const YarnParams* yarn);

struct RopeTables {
  Tensor cos;  // [T, rot/2] f32
  Tensor sin;  // [T, rot/2] f32
  float softmax_scale_factor = 1.0f;
};
RopeTables make_rope_tables(const std::vector<int64_t>& positions, int64_t rot, double theta, const YarnParams* yarn);

}  // namespace myriad
