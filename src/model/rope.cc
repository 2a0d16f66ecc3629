#include "model/rope.h"

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

}  // namespace myriad
