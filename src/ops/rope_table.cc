#include "ops/rope_table.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace myriad {

double yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

std::vector<double> rope_inv_freq(int64_t rot, double theta, const YarnParams* yarn) {
  MYRIAD_REQUIRE(rot > 0 && rot % 2 == 0, kValue, "rope: rotated width ", rot, " must be even and positive");
  MYRIAD_REQUIRE(theta > 1.0, kValue, "rope: rope_theta ", theta, " must be > 1");
  const int64_t half = rot / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(rot));
  if (!yarn || yarn->factor <= 1.0) return inv;
  MYRIAD_REQUIRE(yarn->original_max_position > 0 && yarn->beta_fast > yarn->beta_slow && yarn->beta_slow > 0, kValue,
                 "rope yarn: need original_max_position_embeddings > 0 and beta_fast > beta_slow > 0");
  // Dimension index at which the wavelength completes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return double(rot) * std::log(double(yarn->original_max_position) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  double low = std::max(0.0, std::floor(correction_dim(yarn->beta_fast)));
  double high = std::min(double(rot - 1), std::ceil(correction_dim(yarn->beta_slow)));
  if (high == low) high += 0.001;  // avoid a zero-width ramp
  for (int64_t i = 0; i < half; ++i) {
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);  // 0: extrapolate, 1: interpolate
    const double extrap = inv[size_t(i)], interp = inv[size_t(i)] / yarn->factor;
    inv[size_t(i)] = extrap * (1.0 - ramp) + interp * ramp;
  }
  return inv;
}

RopeTables make_rope_tables(const std::vector<int64_t>& positions, int64_t rot, double theta, const YarnParams* yarn) {
  const std::vector<double> inv = rope_inv_freq(rot, theta, yarn);
  const int64_t T = int64_t(positions.size()), half = rot / 2;
  double m = 1.0, softmax_factor = 1.0;
  if (yarn && yarn->factor > 1.0) {
    m = yarn_mscale(yarn->factor, yarn->mscale) / yarn_mscale(yarn->factor, yarn->mscale_all_dim);
    const double a = yarn_mscale(yarn->factor, yarn->mscale_all_dim);
    softmax_factor = a * a;
  }
  RopeTables t{Tensor::empty({T, half}), Tensor::empty({T, half}), float(softmax_factor)};
  float* c = t.cos.data<float>();
  float* s = t.sin.data<float>();
  for (int64_t p = 0; p < T; ++p) {
    MYRIAD_REQUIRE(positions[size_t(p)] >= 0, kValue, "rope: negative position ", positions[size_t(p)]);
    for (int64_t i = 0; i < half; ++i) {
      // NOTE: angles in double: position x frequency loses f32 precision beyond ~1e5 tokens.
      const double ang = double(positions[size_t(p)]) * inv[size_t(i)];
      c[p * half + i] = float(std::cos(ang) * m);
      s[p * half + i] = float(std::sin(ang) * m);
    }
  }
  return t;
}

}  // namespace myriad
