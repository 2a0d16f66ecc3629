#include "model/rope.h"

#include <cmath>

namespace myriad {

std::optional<YarnParams> mla_yarn_params(const ModelConfig& c) {
  if (!c.rope_scaling || c.rope_scaling->factor <= 1.0) return std::nullopt;
  const RopeScaling& rs = *c.rope_scaling;
  return YarnParams{rs.factor,
                    rs.original_max_position_embeddings.value_or(c.max_position_embeddings),
                    rs.beta_fast.value_or(32.0),
                    rs.beta_slow.value_or(1.0),
                    rs.mscale.value_or(1.0),
                    rs.mscale_all_dim.value_or(0.0)};
}

float mla_score_scale(const ModelConfig& c) {
  float scale = 1.0f / std::sqrt(float(c.qk_nope_head_dim + c.qk_rope_head_dim));
  if (!c.mla_use_nope && c.qk_rope_head_dim > 0) {
    if (const std::optional<YarnParams> yarn = mla_yarn_params(c)) {
      const double m = yarn_mscale(yarn->factor, yarn->mscale_all_dim);
      scale *= float(m * m);
    }
  }
  return scale;
}

float mla_query_scale(const ModelConfig& c, int64_t position) {
  if (!c.mla_logn_base || position + 1 <= *c.mla_logn_base) return 1.0f;
  return float(std::log(double(position + 1)) / std::log(double(*c.mla_logn_base)));
}

}  // namespace myriad
