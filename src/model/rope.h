// The MLA layers' RoPE settings from a config: YaRN parameters when rope_scaling asks for them (factor > 1),
// with the defaults of docs/design.md §1.3 / the YaRN paper for absent fields. One place for the training path
// (Transformer::mla_mixer) and the decode path (MlaDecoder), which must agree exactly.
#pragma once

#include <optional>

#include "model/config.h"
#include "ops/rope_table.h"

namespace myriad {

std::optional<YarnParams> mla_yarn_params(const ModelConfig& c);

// The MLA softmax scale (docs/design.md §1.3): 1 / sqrt(qk_nope_head_dim + qk_rope_head_dim), times YaRN's
// mscale(factor, mscale_all_dim)^2 when the layer uses RoPE with YaRN scaling. The training forward and the
// decoder both take it from here.
float mla_score_scale(const ModelConfig& c);

// The factor on an MLA query at `position` (0-based) under log-n scaling (config mla_logn_base = B): 1 up to
// position B - 1, ln(position + 1) / ln(B) beyond, so the softmax over n keys keeps the sharpness it had over the
// B keys it was trained with (its entropy would otherwise grow with ln n). 1 when the config has no base.
float mla_query_scale(const ModelConfig& c, int64_t position);

}  // namespace myriad
